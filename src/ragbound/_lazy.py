"""Module attributes resolved on first use (PEP 562): lazy re-exports.

A package ``__init__`` that re-exports names from heavy submodules (numpy, pydantic)
lists where each name lives and gets a module ``__getattr__`` and ``__dir__`` from here, so
importing the package, or one light submodule of it, does not import the others.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(
    package: str, sources: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``sources`` maps a name to its module.

    A name, once imported, is stored in ``namespace`` (the module's ``globals()``), so later
    reads do not reach ``__getattr__``.
    """

    def __getattr__(name: str) -> Any:
        if name in sources:
            value = getattr(importlib.import_module(sources[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*namespace, *sources})

    return __getattr__, __dir__
