"""``kill -9`` under concurrent requests, then a restart: every answered request is in the
log, no line is torn, and the shift monitor resumes (a real ``ragbound serve`` child)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from ragbound.detect.monitor import load_state
from tests.serve.server import ChildServer, log_lines, served_kb
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

QUERIES = [*IN_KNOWLEDGE, *OUT_OF_KNOWLEDGE]
CLIENTS = 4


@pytest.fixture(scope="module")
def kb_dir(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return served_kb(minilm_kb_dir, tmp_path_factory.mktemp("crash") / "kb")


@pytest.fixture
def start_server(kb_dir: Path):
    """Start ``ragbound serve`` children; any still running when the test ends is killed."""
    started: list[ChildServer] = []

    def start(*args: str) -> ChildServer:
        server = ChildServer(str(kb_dir), *args)
        started.append(server)
        return server.ready()

    yield start
    for server in started:
        server.kill()


def _load(url: str, answered: list[str], stop: threading.Event, client_id: int) -> None:
    """Send unique queries one after another until told to stop or the server is gone."""
    with httpx.Client(base_url=url, timeout=60) as client:
        n = 0
        while not stop.is_set():
            query = f"{QUERIES[n % len(QUERIES)]} ({client_id}-{n})"
            try:
                response = client.post("/v1/decide", json={"query": query})
            except httpx.TransportError:
                return
            if response.status_code == 200:
                answered.append(query)
            n += 1


def test_kill_9_loses_no_answered_request_and_the_monitor_resumes(
    start_server, tmp_path: Path
) -> None:
    log = tmp_path / "queries.log.jsonl"
    server = start_server("--log", str(log))
    answered: list[str] = []
    stop = threading.Event()
    clients = [
        threading.Thread(target=_load, args=(server.url, answered, stop, i)) for i in range(CLIENTS)
    ]
    for client in clients:
        client.start()
    deadline = time.monotonic() + 120
    while len(answered) < 3 * CLIENTS and time.monotonic() < deadline:
        time.sleep(0.05)
    server.kill()  # SIGKILL while the clients keep sending
    stop.set()
    for client in clients:
        client.join(timeout=60)
    assert len(answered) >= 3 * CLIENTS

    restarted = start_server("--log", str(log))  # cuts a torn tail
    lines = log_lines(log)  # every line whole
    logged = [line["query"] for line in lines]
    assert set(answered) <= set(logged)
    assert len(set(logged)) == len(logged)  # a decision is logged once

    after = httpx.post(f"{restarted.url}/v1/decide", json={"query": IN_KNOWLEDGE[0]}, timeout=60)
    assert after.status_code == 200
    assert restarted.stop() == 0  # a clean shutdown saves the monitor's state
    lines = log_lines(log)
    assert lines[-1]["query"] == IN_KNOWLEDGE[0]
    state = load_state(log.with_name(log.name + ".monitor.json"))
    # the lines the killed server logged after its last save were replayed from their scores
    assert state.line == len(lines)
    assert state.offset == log.stat().st_size
    assert state.windows * 50 + len(state.buffer) == len(lines)
