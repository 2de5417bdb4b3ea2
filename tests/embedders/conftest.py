"""A real OpenAI-compatible embedding server for the tests: infinity-emb serving the bundled
MiniLM on a free loopback port, started once per session (skipped when it is not installed).

infinity-emb conflicts with ragbound's own environment, so it lives in its own venv:
``$RAGBOUND_INFINITY`` names its ``infinity_emb`` executable, else ``.venv-infinity`` at the
repository root (``make infinity``) is used.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

INFINITY_ENV = "RAGBOUND_INFINITY"
ROOT = Path(__file__).resolve().parents[2]
# With one model infinity answers whatever model name is asked: serving a second name makes
# it refuse unknown names, as OpenAI, vLLM and text-embeddings-inference do.
SERVED = ("minilm", "minilm-twin")
START_TIMEOUT_S = 180.0  # about 30-40 s on 2 cores; more on a loaded CI machine


def infinity_executable() -> Path | None:
    """The infinity_emb to run, or None when there is none."""
    given = os.environ.get(INFINITY_ENV)
    path = Path(given) if given else ROOT / ".venv-infinity" / "bin" / "infinity_emb"
    return path if path.is_file() else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _command(executable: Path, port: int) -> list[str]:
    from ragbound.embedders.packaged import minilm_path

    model = str(minilm_path())
    command = [str(executable), "v2", "--engine", "torch", "--url-prefix", "/v1"]
    for name in SERVED:
        command += ["--model-id", model, "--served-model-name", name]
    return [*command, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]


def _wait_ready(process: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
    """Return once the server embeds a text; fail with its log if it exits or stalls."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"infinity exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            reply = httpx.post(
                f"{base_url}/embeddings", json={"model": SERVED[0], "input": ["ready?"]}
            )
            if reply.status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet
        time.sleep(0.5)
    pytest.fail(f"infinity was not ready within {START_TIMEOUT_S:g} s: {log.read_text()[-2000:]}")


@pytest.fixture(scope="session")
def infinity_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT/v1``) of a running infinity serving MiniLM as
    ``minilm`` (and ``minilm-twin``); stopped at the end of the session."""
    executable = infinity_executable()
    if executable is None:
        pytest.skip(f"infinity-emb is not installed: run `make infinity` or set ${INFINITY_ENV}")
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    log = tmp_path_factory.mktemp("infinity") / "infinity.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            _command(executable, port), stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        _wait_ready(process, base_url, log)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def endpoint_env(infinity_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``$RAGBOUND_EMBED_BASE_URL`` pointing at the infinity server, for this test."""
    monkeypatch.setenv("RAGBOUND_EMBED_BASE_URL", infinity_url)
    return infinity_url


@pytest.fixture(scope="module")
def module_endpoint_env(infinity_url: str) -> Iterator[str]:
    """``$RAGBOUND_EMBED_BASE_URL`` pointing at the infinity server, for this test module
    (for module-scoped fixtures: a service started once, say)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAGBOUND_EMBED_BASE_URL", infinity_url)
        yield infinity_url
