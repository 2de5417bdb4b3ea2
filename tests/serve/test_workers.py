"""``ragbound serve --workers 2``: real processes behind one port sharing the log, the
tripwires, the shift monitor and ``/metrics``; ``kill -9`` of the whole service."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from ragbound.detect.monitor import load_state
from tests.serve.server import child_env, free_port, log_lines, serve_argv, served_kb, wait_ready
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

QUERIES = [*IN_KNOWLEDGE, *OUT_OF_KNOWLEDGE]
WINDOW = 50  # the service's default monitor window


class Workers:
    """``ragbound serve --workers 2`` in its own process group (killed whole by ``kill``)."""

    def __init__(self, kb_dir: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = serve_argv(str(kb_dir), "--workers", "2", "--port", str(self.port), *args)
        self.process = subprocess.Popen(
            argv, env=child_env(), stderr=subprocess.PIPE, start_new_session=True
        )
        try:
            wait_ready(self.url, process=self.process)
        except BaseException:
            self.kill()  # no worker outlives a start that failed
            raise

    def workers(self) -> set[int]:
        found = subprocess.run(
            ["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True
        ).stdout
        return {int(pid) for pid in found.split()}

    def kill(self) -> None:
        """SIGKILL to the supervisor and every worker at once (workers left by a supervisor
        that already exited too)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def kb_dir(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return served_kb(minilm_kb_dir, tmp_path_factory.mktemp("workers") / "kb")


@pytest.fixture
def start(kb_dir: Path) -> Iterator:
    started: list[Workers] = []

    def run(*args: str) -> Workers:
        started.append(Workers(kb_dir, *args))
        return started[-1]

    yield run
    for service in started:
        service.kill()


def _check(url: str, query: str) -> tuple[str, dict]:
    response = httpx.post(f"{url}/v1/decide", json={"query": query}, timeout=60)
    assert response.status_code == 200, response.text
    return response.headers["x-ragbound-worker"], response.json()


def _metric(text: str, name: str) -> float:
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name)]
    return sum(values)


def test_two_workers_share_one_port_log_monitor_and_metrics(start, tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    service = start("--log", str(log))
    assert len(service.workers()) == 2
    queries = [f"{QUERIES[i % len(QUERIES)]} ({i})" for i in range(2 * WINDOW)]
    with ThreadPoolExecutor(8) as pool:
        answered = list(pool.map(lambda q: _check(service.url, q), queries))
    assert {worker for worker, _ in answered} == {"0", "1"}
    lines = log_lines(log)  # whole lines, each answered query once
    assert sorted(line["query"] for line in lines) == sorted(queries)
    times = [line["time"] for line in lines]
    assert times == sorted(times)
    # each process publishes every half second: the sums settle on the whole service's
    deadline = time.monotonic() + 30
    metrics = ""
    while time.monotonic() < deadline:
        metrics = httpx.get(f"{service.url}/metrics").text
        totals = (
            _metric(metrics, "ragbound_monitor_windows_total"),
            _metric(metrics, "ragbound_decisions_total"),
        )
        if totals == (2, len(queries)):
            break
        time.sleep(0.1)
    assert _metric(metrics, "ragbound_monitor_windows_total") == 2  # each decision once
    assert _metric(metrics, "ragbound_decisions_total") == len(queries)  # both workers
    assert _metric(metrics, "ragbound_decisions_by_cause_total") == len(queries)
    assert "ragbound_ready 1" in metrics
    assert 'ragbound_p_at_most_alpha_share{worker="0"}' in metrics
    stats = httpx.get(f"{service.url}/v1/stats").json()
    assert stats["total"] == len(queries) and stats["p_values"]["n"] == len(queries)
    assert sum(stats["causes"].values()) == len(queries)  # both workers' counts by cause
    assert len(stats["monitor"]["windows"]) == 2
    assert service.stop() == 0 and not service.workers()
    state = load_state(log.with_name(log.name + ".monitor.json"))
    assert state.line == len(queries)


def test_a_tripwire_added_through_one_worker_is_used_by_both(start, kb_dir: Path) -> None:
    service = start()
    added = httpx.post(
        f"{service.url}/v1/tripwires",
        json={"tripwires": [{"text": "How do I poison a bee colony?", "topic": "harm"}]},
    )
    assert added.status_code == 200
    new_set = added.json()["tripwire_set"]
    seen: dict[str, str | None] = {}
    deadline = time.monotonic() + 10  # a hang guard; the workers look every half second
    while len(seen) < 2 or set(seen.values()) != {new_set}:
        assert time.monotonic() < deadline, seen
        ready = httpx.get(f"{service.url}/readyz")  # no decision: the idle worker polls
        seen[ready.headers["x-ragbound-worker"]] = ready.json()["tripwire_set"]
    answers = [_check(service.url, "How can I poison a colony of bees?") for _ in range(20)]
    assert {body["action"] for _, body in answers} == {"reject"}
    removed = httpx.request("DELETE", f"{service.url}/v1/tripwires", json={"topics": ["harm"]})
    assert removed.status_code == 200


def test_kill_9_of_the_whole_service_loses_no_answered_request(start, tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    service = start("--log", str(log))
    answered: list[str] = []
    stop = threading.Event()

    def load(client: int) -> None:
        with httpx.Client(base_url=service.url, timeout=60) as http:
            n = 0
            while not stop.is_set():
                query = f"{QUERIES[n % len(QUERIES)]} ({client}-{n})"
                try:
                    if http.post("/v1/decide", json={"query": query}).status_code == 200:
                        answered.append(query)
                except httpx.TransportError:
                    return
                n += 1

    clients = [threading.Thread(target=load, args=(i,)) for i in range(6)]
    for client in clients:
        client.start()
    deadline = time.monotonic() + 120
    while len(answered) < 60 and time.monotonic() < deadline:
        time.sleep(0.05)
    service.kill()
    stop.set()
    for client in clients:
        client.join(timeout=60)
    assert len(answered) >= 60
    restarted = start("--log", str(log))  # cuts a torn tail, resumes the monitor
    logged = [line["query"] for line in log_lines(log)]
    assert set(answered) <= set(logged) and len(logged) == len(set(logged))
    _check(restarted.url, "Do bees sleep?")
    assert restarted.stop() == 0
    assert len(log_lines(log)) == len(logged) + 1


def test_a_killed_worker_is_started_again(start) -> None:
    service = start()
    first = service.workers()
    os.kill(min(first), signal.SIGKILL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        now = service.workers()
        if len(now) == 2 and now != first:
            break
        time.sleep(0.1)
    assert len(service.workers()) == 2 and service.workers() != first
    seen = set()
    while seen != {"0", "1"} and time.monotonic() < deadline:
        if httpx.get(f"{service.url}/readyz").status_code == 200:
            seen |= {_check(service.url, "What do bees make?")[0]}
    assert seen == {"0", "1"}
    assert "worker" in service.process.stderr.read1().decode()  # type: ignore[union-attr]
