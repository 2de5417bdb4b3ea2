"""Fault injection for crash and full-disk tests: die, or fail a write, at a named step.

Every write path names its steps with :func:`crash_point` (for example
``kb.add:segment-written``, just before the manifest that commits it). A test that sets
``RAGBOUND_CRASH_AT=kb.add:segment-written`` in a child process's environment makes that
process kill itself at exactly that step, as ``kill -9`` would, so the crash window is hit
every time rather than by luck. Unset, a crash point costs one dictionary lookup.

A write the operating system may refuse (a full disk, an I/O error) names its step with
:func:`io_fault` just before the system call: while the file that ``RAGBOUND_FAULTS_FILE``
names lists the step, the call raises the ``OSError`` the system would (``ENOSPC``, or the
errno named after the step: ``querylog.write EIO``). The file is read at each call, so a test
arms and disarms a running process by rewriting it. Unset, a fault point costs one dictionary
lookup.
"""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

CRASH_ENV = "RAGBOUND_CRASH_AT"
FAULTS_ENV = "RAGBOUND_FAULTS_FILE"


def crash_point(name: str) -> None:
    """Kill this process (SIGKILL, no cleanup) if ``$RAGBOUND_CRASH_AT`` names ``name``.

    ``$RAGBOUND_CRASH_AT`` may list several names separated by commas.
    """
    armed = os.environ.get(CRASH_ENV)
    if armed and name in armed.split(","):
        os.kill(os.getpid(), signal.SIGKILL)


def io_fault(name: str) -> None:
    """Raise ``OSError`` (``ENOSPC`` unless another errno is named) if the file that
    ``$RAGBOUND_FAULTS_FILE`` names has a line ``name`` or ``name ERRNO`` (see the module)."""
    path = os.environ.get(FAULTS_ENV)
    if not path:
        return
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return
    for line in lines:
        step, _, code = line.strip().partition(" ")
        if step == name:
            number = getattr(errno, code.strip() or "ENOSPC")
            raise OSError(number, os.strerror(number))
