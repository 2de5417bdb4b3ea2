"""Ways to damage an artifact file, and the one error line a damaged artifact must give."""

from __future__ import annotations

import subprocess
from pathlib import Path


def one_error_line(done: subprocess.CompletedProcess[str] | tuple, *names: str) -> str:
    """The single ``error:`` line a failed command printed; asserts it names ``names``."""
    code, err = (done.returncode, done.stderr) if hasattr(done, "stderr") else (done[0], done[2])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


def truncate(path: Path) -> None:
    """Cut the file to half its size (a write that stopped midway)."""
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def break_utf8(path: Path) -> None:
    """Replace one byte by one that is never valid UTF-8."""
    path.write_bytes(path.read_bytes().replace(b"e", b"\xff", 1))
