"""A real OpenAI-compatible embedding server: infinity-emb serving the bundled MiniLM on a
free loopback port, for the tests (tests/embedders/conftest.py) and
benchmarks/attached_collection.py.

infinity-emb conflicts with ragbound's own environment, so it lives in its own venv:
``$RAGBOUND_INFINITY`` names its ``infinity_emb`` executable, else ``.venv-infinity`` at the
repository root (``make infinity``) is used.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.ports import free_port, stop_process

INFINITY_ENV = "RAGBOUND_INFINITY"
ROOT = Path(__file__).resolve().parents[2]
# With one model infinity answers whatever model name is asked: serving a second name makes
# it refuse unknown names, as OpenAI, vLLM and text-embeddings-inference do.
SERVED = ("minilm", "minilm-twin")
START_TIMEOUT_S = 180.0  # about 30-40 s on 2 cores; more on a loaded CI machine


class InfinityError(RuntimeError):
    """infinity exited, or was not ready in time (the message ends with its log)."""


def infinity_executable() -> Path | None:
    """The infinity_emb to run, or None when there is none."""
    given = os.environ.get(INFINITY_ENV)
    path = Path(given) if given else ROOT / ".venv-infinity" / "bin" / "infinity_emb"
    return path if path.is_file() else None


def missing_reason() -> str | None:
    """Why infinity cannot be started here, or None."""
    if infinity_executable() is None:
        return f"infinity-emb is not installed: run `make infinity` or set ${INFINITY_ENV}"
    return None


def _command(executable: Path, port: int, served: Sequence[str]) -> list[str]:
    from ragbound.embedders.packaged import minilm_path

    model = str(minilm_path())
    command = [str(executable), "v2", "--engine", "torch", "--url-prefix", "/v1"]
    for name in served:
        command += ["--model-id", model, "--served-model-name", name]
    return [*command, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]


def _wait_ready(process: subprocess.Popen[bytes], base_url: str, model: str, log: Path) -> None:
    """Return once the server embeds a text; InfinityError with its log if it exits or
    stalls."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise InfinityError(
                f"infinity exited with {process.returncode}: {log.read_text()[-2000:]}"
            )
        try:
            reply = httpx.post(f"{base_url}/embeddings", json={"model": model, "input": ["ready?"]})
            if reply.status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet
        time.sleep(0.5)
    raise InfinityError(
        f"infinity was not ready within {START_TIMEOUT_S:g} s: {log.read_text()[-2000:]}"
    )


@contextmanager
def running_infinity(executable: Path, log: Path, served: Sequence[str] = SERVED) -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT/v1``) of infinity serving the bundled MiniLM
    under each name in ``served``, its output in ``log``; stopped on exit."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            _command(executable, port, served), stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        _wait_ready(process, base_url, served[0], log)
        yield base_url
    finally:
        stop_process(process, 20)
