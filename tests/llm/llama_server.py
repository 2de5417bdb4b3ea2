"""llama-cpp-python's own OpenAI-compatible server (``python -m llama_cpp.server``) on the
bundled local model, on a free loopback port: started by the slow tests, always stopped."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.ports import free_port

ALIAS = "qwen-local"
KEY = "test-key-not-secret"


@contextlib.contextmanager
def llama_server(log_dir: Path) -> Iterator[str]:
    """Start the server, wait until it lists the model, yield its base URL (``.../v1``), stop
    it. Its output goes to ``log_dir/server.log``, quoted when it fails to start."""
    from ragbound.llm.local import join_default_model

    port = free_port()
    log = log_dir / "server.log"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(join_default_model())]
    cmd += ["--model_alias", ALIAS, "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--n_ctx", "4096", "--api_key", KEY]
    with log.open("w") as out:
        process = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_until_ready(base_url, process, log)
        yield base_url
    finally:
        process.terminate()
        process.wait(timeout=30)


def _wait_until_ready(base_url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the llama.cpp server exited:\n{log.read_text()[-2000:]}")
        try:
            reply = httpx.get(f"{base_url}/models", headers={"Authorization": f"Bearer {KEY}"})
            if reply.status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    pytest.fail(f"the llama.cpp server did not start in 180 s:\n{log.read_text()[-2000:]}")
