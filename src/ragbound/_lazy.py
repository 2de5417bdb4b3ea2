"""Module attributes resolved on first use (PEP 562): lazy re-exports and deprecated names.

A package ``__init__`` that re-exports names from heavy submodules (numpy, scipy, pydantic)
lists where each name lives and gets a module ``__getattr__`` and ``__dir__`` from here, so
importing the package, or one light submodule of it, does not import the others.

A renamed class or function keeps its old name for one release the same way: ``deprecated``
maps each old name to the new one, and reading the old name warns (``DeprecationWarning``)
and returns the new object. A module with nothing lazy passes empty ``sources``.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def deprecation_note(old: str, new: str) -> str:
    """The one wording of a renamed name's warning."""
    return f"{old} is deprecated, use {new}; removed in the next release"


def warn_deprecated(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn that ``old`` (a name, a keyword, an option) is now ``new``."""
    warnings.warn(deprecation_note(old, new), DeprecationWarning, stacklevel=stacklevel)


def lazy_attributes(
    package: str,
    sources: Mapping[str, str],
    namespace: dict[str, Any],
    deprecated: Mapping[str, str] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``sources`` maps a name to its module,
    ``deprecated`` an old name to the new name it now reads (a name of ``namespace`` or of
    ``sources``).

    A name, once imported, is stored in ``namespace`` (the module's ``globals()``); an old
    name is not, so each read of it warns. ``__dir__`` lists the new names only.
    """
    renamed = dict(deprecated or {})

    def __getattr__(name: str) -> Any:
        if name in renamed:
            new = renamed[name]
            warn_deprecated(f"{package}.{name}", new)
            return namespace[new] if new in namespace else __getattr__(new)
        if name in sources:
            value = getattr(importlib.import_module(sources[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*namespace, *sources})

    return __getattr__, __dir__


def deprecated_aliases(
    module: str, deprecated: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """A plain module's ``__getattr__`` that reads each old name of ``deprecated`` as its new
    name, with a warning (:func:`lazy_attributes` with nothing lazy)."""
    return lazy_attributes(module, {}, namespace, deprecated)[0]
