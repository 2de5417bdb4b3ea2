"""Fault injection for crash tests: die with SIGKILL at a named step of a commit.

Every write path names its steps with :func:`crash_point` (for example
``kb.add:segment-written``, just before the manifest that commits it). A test that sets
``RAGBOUND_CRASH_AT=kb.add:segment-written`` in a child process's environment makes that
process kill itself at exactly that step, as ``kill -9`` would, so the crash window is hit
every time rather than by luck. Unset, a crash point costs one dictionary lookup.

Example:
    >>> crash_point("doc:example")  # no-op unless RAGBOUND_CRASH_AT=doc:example
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "RAGBOUND_CRASH_AT"


def crash_point(name: str) -> None:
    """Kill this process (SIGKILL, no cleanup) if ``$RAGBOUND_CRASH_AT`` names ``name``.

    ``$RAGBOUND_CRASH_AT`` may list several names separated by commas.
    """
    armed = os.environ.get(CRASH_ENV)
    if armed and name in armed.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
