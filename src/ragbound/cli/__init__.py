"""The ``ragbound`` command: ``app``, ``build_app`` and ``main`` (the console entry point), all
from ``cli.entry``, which registers every command.

One module per command group, importing no other: the options they share are declared in
``cli.options``, the helpers they share are in ``cli.common``, option validators in
``cli.validate``, and the translation of failures into one-line errors in ``cli.failures``;
what a command computes is in the library. The names load on first use: importing a command
module (it looks ``cli.validate`` up here) imports no other command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragbound._lazy import lazy_attributes

_SOURCES: dict[str, str] = {
    "app": "ragbound.cli.entry",
    "build_app": "ragbound.cli.entry",
    "main": "ragbound.cli.entry",
}

__all__ = ["app", "build_app", "main"]

if TYPE_CHECKING:
    from ragbound.cli.entry import app, build_app, main

__getattr__, __dir__ = lazy_attributes(__name__, _SOURCES, globals())
