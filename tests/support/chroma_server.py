"""A throw-away Chroma server (``chroma run``, the CLI chromadb ships) for the tests and
benchmarks/attached_collection.py, and a collection filled with given vectors as another
application would (``collection.add``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.ports import free_port, stop_process

STARTUP_SECONDS = 60.0


@dataclass(frozen=True)
class ChromaServer:
    """A running server: where it listens."""

    host: str
    port: int

    def url(self, collection: str) -> str:
        return f"chroma://{self.host}:{self.port}/{collection}"

    def client(self) -> Any:
        import chromadb
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False)
        return chromadb.HttpClient(host=self.host, port=self.port, settings=settings)


def chroma_binary() -> Path | None:
    """The ``chroma`` executable next to this Python (None without it)."""
    found = Path(sys.executable).parent / "chroma"
    return found if found.exists() else None


@contextmanager
def running_chroma(data: Path) -> Iterator[ChromaServer]:
    """``chroma run`` on a free port with its data in ``data``; stopped on exit."""
    port = free_port()
    log = (data / "chroma.log").open("wb")
    argv = [str(chroma_binary()), "run", "--path", str(data / "db"), "--host", "127.0.0.1"]
    process = subprocess.Popen(
        [*argv, "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
    )
    try:
        _wait_for_heartbeat(process, port, data / "chroma.log")
        yield ChromaServer("127.0.0.1", port)
    finally:
        stop_process(process, 10)
        log.close()


def _wait_for_heartbeat(process: subprocess.Popen, port: int, log: Path) -> None:
    import httpx

    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"chroma run exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1).is_success:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"chroma run did not answer on port {port} in {STARTUP_SECONDS:.0f} s")


def fill_collection(
    server: ChromaServer,
    name: str,
    texts: Sequence[str],
    vectors: np.ndarray,
    *,
    ids: Sequence[str],
    space: str = "l2",
    metadatas: Sequence[dict[str, Any]] | None = None,
    documents: bool = True,
) -> Any:
    """A new collection ``name`` (replacing one of that name) with the given records."""
    from chromadb.errors import NotFoundError

    client = server.client()
    with suppress(NotFoundError):
        client.delete_collection(name)
    collection = client.create_collection(name, configuration={"hnsw": {"space": space}})
    collection.add(
        ids=list(ids),
        embeddings=np.asarray(vectors, dtype=np.float32),
        documents=list(texts) if documents else None,
        metadatas=list(metadatas) if metadatas else None,
    )
    return collection
