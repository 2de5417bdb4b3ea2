"""Helpers shared by the command modules: JSON output, the console, progress, options."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from pydantic import BaseModel

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (one object per line).")]


def emit_json(obj: BaseModel | dict) -> None:
    """Write one JSON object as a line on stdout."""
    text = obj.model_dump_json() if isinstance(obj, BaseModel) else json.dumps(obj)
    sys.stdout.write(text + "\n")


def console():
    """A rich console on stdout (imported lazily: rich is slow to import)."""
    from rich.console import Console

    return Console()


def progress(json_out: bool) -> bool:
    """Show progress bars: on a terminal and not with --json."""
    from ragbound.progress import progress_wanted

    return progress_wanted(quiet=json_out)
