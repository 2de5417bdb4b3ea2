"""Progress bars that show on a terminal and stay silent when piped or asked for JSON."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Advance = Callable[[int], None]


def progress_wanted(quiet: bool = False) -> bool:
    """Show progress only on an interactive terminal and when output is not JSON."""
    return not quiet and sys.stderr.isatty()


@contextmanager
def progress_bar(total: int, description: str, enabled: bool) -> Iterator[Advance]:
    """Yield ``advance(n)``; draws a rich bar on stderr when enabled, does nothing otherwise."""
    if not enabled or total <= 0:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)
