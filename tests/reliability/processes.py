"""Run the real ``ragbound`` command in child processes: two at once, or killed at a step.

The reliability tests use real processes, not threads or mocks: a lock must hold across
processes, and a crash must be a real ``SIGKILL`` (armed at a named step with
``RAGBOUND_CRASH_AT``, see :mod:`ragbound.faults`), so no cleanup code runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
KILLED = -9  # returncode of a child that died of SIGKILL


def child_env(**extra: str) -> dict[str, str]:
    """This environment with our source first on the path (and no progress bars)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def _default_sigint() -> None:
    """In the child: SIGINT back to its default, so Python turns Ctrl-C into KeyboardInterrupt.

    A shell starts background jobs with SIGINT ignored, and Python keeps an inherited "ignore";
    a test run in the background would then send SIGINT to a child that never sees it.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def command(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "ragbound.cli", *(str(a) for a in args)]


def ragbound(
    *args: str | Path, crash_at: str | None = None, timeout: float = 600, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``ragbound ARGS`` to the end; ``crash_at`` kills it with SIGKILL at that step."""
    extra = dict(env)
    if crash_at is not None:
        extra["RAGBOUND_CRASH_AT"] = crash_at
    return subprocess.run(
        command(*args),
        capture_output=True,
        text=True,
        env=child_env(**extra),
        timeout=timeout,
        preexec_fn=_default_sigint,
    )


def start(*args: str | Path, **env: str) -> subprocess.Popen[str]:
    """Start ``ragbound ARGS`` without waiting (for two writers at once)."""
    return subprocess.Popen(
        command(*args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(**env),
        preexec_fn=_default_sigint,
    )


def finish(process: subprocess.Popen[str], timeout: float = 600) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err
