"""Loopback ports and child processes for the servers the tests (and benchmarks) start."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (free when asked: bind it soon)."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return probe.getsockname()[1]


def stop_process(process: subprocess.Popen, timeout: float) -> None:
    """SIGTERM a server child, and SIGKILL it if it has not exited after ``timeout`` s."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
