"""A log and the files it was rotated into, read as one stream.

``ragbound serve --log LOG --log-max-bytes N`` (or ``--log-rotate daily``) renames the full
``LOG`` to ``LOG.000001``, then ``LOG.000002``, ... (numbered oldest first, never renamed again)
and starts a new ``LOG``. The series is the rotated files in number order, then ``LOG``.

A reader keeps its place as (file, byte offset), the file named by its identity
(:func:`file_id`: device and inode), which a rename keeps: a monitor that stopped in ``LOG``
finds its place again after ``LOG`` became ``LOG.000007``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ragbound.errors import InputError

_NUMBER_DIGITS = 6


def rotated(path: Path) -> list[Path]:
    """The files ``path`` was rotated into, oldest first."""
    pattern = re.compile(re.escape(path.name) + r"\.(\d{" + str(_NUMBER_DIGITS) + r",})$")
    found = []
    for candidate in path.parent.glob(f"{path.name}.*"):
        match = pattern.match(candidate.name)
        if match:
            found.append((int(match.group(1)), candidate))
    return [file for _, file in sorted(found)]


def series(path: Path) -> list[Path]:
    """The rotated files, oldest first, then ``path`` itself when it exists."""
    return [*rotated(path), *([path] if path.exists() else [])]


def next_rotated(path: Path) -> Path:
    """The name ``path`` takes when it is rotated now."""
    done = rotated(path)
    number = int(done[-1].name.rsplit(".", 1)[1]) + 1 if done else 1
    return path.with_name(f"{path.name}.{number:0{_NUMBER_DIGITS}d}")


def file_id(path: Path | int) -> str:
    """A file's identity (device:inode) from its path or an open descriptor; kept by a rename."""
    info = os.fstat(path) if isinstance(path, int) else os.stat(path)
    return f"{info.st_dev}:{info.st_ino}"


def remaining(path: Path, file: str | None, offset: int) -> list[tuple[Path, int]]:
    """The series from a reader's place on: (file, offset to start at) for the file whose
    identity is ``file`` (``None``: the active ``path``, as places saved before rotation
    existed), then every newer file from its start.

    Raises InputError when that file is gone (deleted, or the log replaced) or shorter than
    ``offset`` (replaced in place)."""
    files = series(path)
    if file is None:
        start = len(files) - 1 if files and files[-1] == path else None
    else:
        ids = [file_id(candidate) for candidate in files]
        start = ids.index(file) if file in ids else None
    if start is None:
        raise InputError(
            f"{path}: the file last read is no longer in the log's series (deleted or "
            "replaced): start a new state"
        )
    if files[start].stat().st_size < offset:
        raise InputError(f"{files[start]} is shorter than when it was last read: it was replaced")
    return [(files[start], offset), *((later, 0) for later in files[start + 1 :])]
