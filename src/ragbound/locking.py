"""One writer at a time per artifact directory; readers are never blocked.

A writer holds an advisory lock (``fcntl.flock``) on a small file *beside* the directory it
writes: ``<parent>/.<name>.lock``. Beside, not inside, because ``index --overwrite`` replaces
the directory itself. The kernel drops the lock when the process dies, however it dies, so a
crash never leaves a stale lock. Threads of one process are serialised too: each acquisition
opens the file anew, and ``flock`` locks of separate opens exclude each other; a thread that
already holds the lock may take it again (nested writes) without deadlocking.

Readers take no lock: every write commits by one atomic rename of a manifest, so a reader
sees either the previous commit or the next one.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ragbound.errors import ArtifactError

DEFAULT_TIMEOUT_S = 60.0
TIMEOUT_ENV = "RAGBOUND_LOCK_TIMEOUT"
_POLL_S = 0.05

_held: dict[Path, tuple[int, int]] = {}  # lock file -> (owning thread id, depth)
_held_guard = threading.Lock()


def lock_path(directory: Path) -> Path:
    """The lock file of ``directory``: ``<parent>/.<name>.lock``."""
    directory = Path(directory).absolute()
    return directory.parent / f".{directory.name}.lock"


def lock_timeout() -> float:
    """Seconds a writer waits for another one: ``$RAGBOUND_LOCK_TIMEOUT`` or 60 (0 = refuse)."""
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise ArtifactError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    if not value >= 0:
        raise ArtifactError(f"{TIMEOUT_ENV}={raw!r} must be >= 0 seconds")
    return value


@contextmanager
def writer_lock(
    directory: Path,
    *,
    what: str,
    timeout: float | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold the single-writer lock of ``directory`` for the duration of the block.

    Waits up to ``timeout`` seconds (default :func:`lock_timeout`) for another writer, calling
    ``on_wait(message)`` once when it starts waiting; then raises ArtifactError naming the
    directory and the process that holds it. Re-entrant within one thread.
    """
    path = lock_path(directory)
    me = threading.get_ident()
    with _held_guard:
        owner = _held.get(path)
        if owner is not None and owner[0] == me:
            _held[path] = (me, owner[1] + 1)
            nested = True
        else:
            nested = False
    if nested:
        try:
            yield
        finally:
            _release_nested(path)
        return
    wait = lock_timeout() if timeout is None else timeout
    handle = _acquire(path, directory, what, wait, on_wait)
    with _held_guard:
        _held[path] = (me, 1)
    try:
        yield
    finally:
        with _held_guard:
            _held.pop(path, None)
        handle.close()  # closing the only descriptor releases the flock


def _release_nested(path: Path) -> None:
    with _held_guard:
        owner, depth = _held[path]
        _held[path] = (owner, depth - 1)


def _acquire(
    path: Path,
    directory: Path,
    what: str,
    timeout: float,
    on_wait: Callable[[str], None] | None,
):
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+")
    deadline = time.monotonic() + timeout
    warned = False
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            holder = _holder(path)
            if time.monotonic() >= deadline:
                handle.close()
                raise ArtifactError(
                    f"another process ({holder}) is writing the {what} {directory}; "
                    f"gave up after {timeout:g} s (set {TIMEOUT_ENV} to wait longer)"
                ) from None
            if not warned and on_wait is not None:
                on_wait(f"waiting for another process ({holder}) writing the {what} {directory}")
                warned = True
            time.sleep(_POLL_S)
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}\n")  # for the message another writer shows
    handle.flush()
    return handle


def _holder(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return "unknown pid"
    return text or "unknown pid"
