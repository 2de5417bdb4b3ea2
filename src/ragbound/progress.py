"""Progress of long jobs: a bar on a terminal, a plain line now and then in a log.

On a terminal (stderr is a TTY) a rich bar is drawn and cleared when the job ends. Anywhere
else (a log file, a pipe, a container's output) a bar would be a stream of carriage returns,
so a job says it is alive with one plain line on stderr every ``LOG_SECONDS`` seconds
(``RAGBOUND_PROGRESS_SECONDS`` sets another interval), and one when it ends if it said
anything before: a job shorter than the interval prints nothing.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Advance = Callable[[int], None]

LOG_SECONDS = 30.0
"""Seconds between two progress lines when stderr is not a terminal."""
LOG_SECONDS_ENV = "RAGBOUND_PROGRESS_SECONDS"
"""Environment variable that sets another interval (seconds, 0 or more; 0: every step)."""


def progress_wanted(quiet: bool = False) -> bool:
    """Report progress unless ``quiet`` (``--json``): a bar on a terminal, lines in a log."""
    return not quiet


@contextmanager
def progress_bar(total: int, description: str, enabled: bool) -> Iterator[Advance]:
    """Yield ``advance(n)``: a rich bar on a terminal, a line every :func:`log_seconds` in a
    log (stderr not a terminal), nothing when not ``enabled`` or ``total`` is not positive."""
    if not enabled or total <= 0:
        yield lambda n: None
    elif not sys.stderr.isatty():
        yield _logged(total, description, log_seconds())
    else:
        with _drawn(total, description) as advance:
            yield advance


def log_seconds() -> float:
    """The interval between progress lines in a log: ``$RAGBOUND_PROGRESS_SECONDS``, else
    ``LOG_SECONDS`` (also when the variable is not a number of seconds, 0 or more)."""
    raw = os.environ.get(LOG_SECONDS_ENV, "")
    try:
        seconds = float(raw)
    except ValueError:
        return LOG_SECONDS
    return seconds if math.isfinite(seconds) and seconds >= 0 else LOG_SECONDS


def _logged(total: int, description: str, interval: float) -> Advance:
    """``advance(n)`` writing ``description: N of TOTAL (P%), T elapsed, about T left`` on
    stderr once ``interval`` seconds have passed since the last line (or the start), and
    when the job ends if a line was written before."""
    start = last = time.monotonic()
    done = 0
    said = False

    def advance(n: int) -> None:
        nonlocal done, last, said
        done += n
        now = time.monotonic()
        if now - last >= interval or (said and done >= total):
            sys.stderr.write(_line(description, done, total, now - start) + "\n")
            sys.stderr.flush()
            last, said = now, True

    return advance


def _line(description: str, done: int, total: int, elapsed: float) -> str:
    """One progress line for a log."""
    share = min(done / total, 1.0)
    text = f"{description}: {done:,} of {total:,} ({share:.0%}), {_duration(elapsed)} elapsed"
    if 0 < done < total:
        text += f", about {_duration(elapsed * (total - done) / done)} left"
    return text


def _duration(seconds: float) -> str:
    """``4s``, ``2m05s``, ``1h02m``."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


@contextmanager
def _drawn(total: int, description: str) -> Iterator[Advance]:
    """A rich bar on stderr, cleared at the end."""
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
