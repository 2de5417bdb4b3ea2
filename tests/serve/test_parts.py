"""The service's parts: readiness, binding rules, tokens, metrics text, the batcher, the log."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from ragbound.detect import Guard
from ragbound.detect.monitor import load_state
from ragbound.errors import ArtifactError, InputError
from ragbound.gate import Gate
from ragbound.serve import Batching, ServeSettings, Tokens, create_app
from ragbound.serve import auth as auth_module
from ragbound.serve.batcher import Batcher, BatchFailure
from ragbound.serve.drift import ServiceMonitor
from ragbound.serve.listen import bind_sockets
from ragbound.serve.metrics import Registry, service_registry
from ragbound.serve.querylog import QueryLog, check_query_log, read_scores
from ragbound.serve.settings import is_loopback
from tests.serve.server import ThreadServer, served_kb, wait_ready


# ------------------------------------------------------------------------ readiness
def test_not_ready_without_a_calibration_but_healthy(minilm_kb_dir: Path) -> None:
    app = create_app(lambda: Gate.load(minilm_kb_dir))  # built, never calibrated
    with ThreadServer(app) as url:
        assert httpx.get(f"{url}/healthz").status_code == 200
        for _ in range(600):  # the loader fails on a thread; wait for it (30 s at most)
            ready = httpx.get(f"{url}/readyz")
            if ready.json()["error"] != "the model is loading":
                break
            time.sleep(0.05)
        assert ready.status_code == 503
        assert "no calibration" in ready.json()["error"]
        check = httpx.post(f"{url}/v1/decide", json={"query": "What do bees make?"})
        assert check.status_code == 503 and "not ready" in check.json()["error"]


# -------------------------------------------------------------------------- binding
@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.9", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.0.0.1", False),
     ("example.com", False)],
)  # fmt: skip
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_sockets_are_bound_on_every_loopback_address_or_refused_in_one_line() -> None:
    sockets = bind_sockets("localhost", 0)
    try:
        assert sockets and all(is_loopback(s.getsockname()[0]) for s in sockets)
    finally:
        for sock in sockets:
            sock.close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(InputError, match=rf"^port {port} on 127\.0\.0\.1 is already in use \("):
            bind_sockets("127.0.0.1", port)
    with pytest.raises(InputError, match=r"^cannot listen on no-such-host\.invalid: "):
        bind_sockets("no-such-host.invalid", 8000)


def test_no_tokens_refuses_a_public_address() -> None:
    with pytest.raises(InputError, match=r"refusing to listen on 0\.0\.0\.0 without --token-file"):
        ServeSettings(host="0.0.0.0")
    tokens = Tokens.from_lines(["read:" + "r" * 20])
    assert ServeSettings(host="0.0.0.0", tokens=tokens).tokens is tokens


# --------------------------------------------------------------------------- tokens
def test_tokens_have_roles() -> None:
    tokens = Tokens.from_lines(["# comment", "", "read:" + "r" * 20, "admin:" + "a" * 20])
    assert tokens.role_of("r" * 20) == "read"
    assert tokens.role_of("a" * 20) == "admin"
    assert tokens.role_of("r" * 19) is None
    assert tokens.role_of("") is None


@pytest.mark.parametrize(
    ("line", "problem"),
    [("root:" + "x" * 20, "expected 'read:TOKEN'"), ("read" + "x" * 20, "expected 'read:TOKEN'"),
     ("read:short", "the token must have at least 16 characters")],
)  # fmt: skip
def test_a_bad_token_line_is_named(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "tokens.txt"
    path.write_text("admin:" + "a" * 20 + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=f"tokens.txt:2: {problem}"):
        Tokens.load(path)


def test_every_token_is_compared_in_constant_time(monkeypatch) -> None:
    tokens = Tokens.from_lines(["read:" + "r" * 20, "admin:" + "a" * 20, "read:" + "s" * 20])
    compared: list[tuple[bytes, bytes]] = []
    real = auth_module.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth_module.hmac, "compare_digest", counting)
    for presented in ("r" * 20, "nope"):
        compared.clear()
        tokens.role_of(presented)
        assert len(compared) == 3  # no early exit on a match or a mismatch
        assert all(len(a) == len(b) == 32 for a, b in compared)  # digests: no length leak
    assert compared[0][0] == hashlib.sha256(b"nope").digest()


# -------------------------------------------------------------------------- metrics
def test_metrics_text_by_hand() -> None:
    registry = Registry()
    registry.counter("hits_total", "Hits.")
    registry.histogram("size", "Sizes.", [1, 5])
    registry.inc("hits_total", topic='we"ird')
    registry.inc("hits_total", 2, topic='we"ird')
    for value in (0.5, 3, 9):
        registry.observe("size", value)
    assert registry.render() == (
        "# HELP hits_total Hits.\n# TYPE hits_total counter\n"
        'hits_total{topic="we\\"ird"} 3\n'
        "# HELP size Sizes.\n# TYPE size histogram\n"
        'size_bucket{le="1"} 1\nsize_bucket{le="5"} 2\nsize_bucket{le="+Inf"} 3\n'
        "size_sum 12.5\nsize_count 3\n"
    )


# -------------------------------------------------------------------------- batcher
def test_concurrent_requests_share_batches_and_a_failure_stays_its_own() -> None:
    sizes: list[int] = []

    def process(queries: list[str]) -> list:
        if "bad" in queries:
            raise InputError("bad query")
        sizes.append(len(queries))
        return [q.upper() for q in queries]

    async def scenario() -> list:
        batcher = Batcher(process, Batching(max_wait_ms=50, max_queries=8))
        await batcher.start()
        try:
            requests = [[f"q{i}"] for i in range(12)] + [["bad"], ["x", "y"]]
            return await asyncio.gather(
                *(batcher.submit(r) for r in requests), return_exceptions=True
            )
        finally:
            await batcher.stop()

    results = asyncio.run(scenario())
    assert results[:12] == [[f"Q{i}"] for i in range(12)]
    assert isinstance(results[12], InputError)
    assert results[13] == ["X", "Y"]
    assert max(sizes) > 1 and max(sizes) <= 8  # coalesced, bounded
    assert sum(sizes) == 14


def test_a_failure_of_the_whole_batch_fails_each_request_without_retrying_them() -> None:
    calls: list[list[str]] = []

    def process(queries: list[str]) -> list:
        calls.append(queries)
        raise BatchFailure("the log is full")

    async def scenario() -> list:
        batcher = Batcher(process, Batching(max_wait_ms=50, max_queries=8))
        await batcher.start()
        try:
            requests = (batcher.submit([f"q{i}"]) for i in range(4))
            return await asyncio.gather(*requests, return_exceptions=True)
        finally:
            await batcher.stop()

    results = asyncio.run(scenario())
    assert all(isinstance(result, BatchFailure) for result in results)
    assert max(len(queries) for queries in calls) > 1  # a batch of several failed
    assert sum(len(queries) for queries in calls) == 4  # none was tried again alone


def test_a_request_past_its_deadline_when_its_batch_forms_is_not_decided() -> None:
    decided: list[list[str]] = []

    def process(queries: list[str]) -> list:
        decided.append(queries)
        return [q.upper() for q in queries]

    async def scenario() -> list:
        batcher = Batcher(process, Batching(max_wait_ms=0, max_queries=8))
        await batcher.start()
        try:
            late = asyncio.create_task(batcher.submit(["late"], timeout=0.01))
            await asyncio.sleep(0)  # queued, the batcher woken, the timeout's timer started
            # the loop is held past the deadline: the batcher runs before the timer's callback
            # has answered the request, so only its deadline can keep it out of the batch
            time.sleep(0.05)
            outcome = await asyncio.gather(late, return_exceptions=True)
            return [*outcome, await batcher.submit(["next"], timeout=60)]
        finally:
            await batcher.stop()

    late, after = asyncio.run(scenario())
    assert isinstance(late, TimeoutError)  # answered 503 by the service
    assert after == ["NEXT"]
    assert decided == [["next"]]  # never decided, so never logged


def test_a_slow_decision_times_out_and_the_batcher_goes_on() -> None:
    """What remains: a request whose batch is already embedded or being decided when it
    times out is decided (and the service logs it), though its caller got TimeoutError; one
    still queued behind the full pipeline is not."""
    decided: list[list[str]] = []
    release = threading.Event()

    def process(queries: list[str]) -> list:
        decided.append(queries)
        release.wait(30)  # the decision thread is busy until the test lets it go
        return [q.upper() for q in queries]

    async def scenario() -> list:
        batcher = Batcher(process, Batching(max_wait_ms=0, max_queries=8))
        await batcher.start()
        try:
            slow = await asyncio.gather(
                batcher.submit(["slow"], timeout=0.01), return_exceptions=True
            )
            embedded = asyncio.create_task(batcher.submit(["embedded"], timeout=0.05))
            await asyncio.sleep(0.02)  # embedded, its decision queued behind the slow one's
            queued = asyncio.create_task(batcher.submit(["queued"], timeout=0.01))
            late = await asyncio.gather(embedded, queued, return_exceptions=True)
            release.set()
            return [*slow, *late, await batcher.submit(["next"], timeout=60)]
        finally:
            release.set()
            await batcher.stop()

    slow, embedded, queued, after = asyncio.run(scenario())
    assert all(isinstance(r, TimeoutError) for r in (slow, embedded, queued))
    assert after == ["NEXT"]
    assert decided == [["slow"], ["embedded"], ["next"]]


def test_the_next_batch_is_embedded_while_this_one_is_decided() -> None:
    """Two threads, two stages: batch 2 is embedded while batch 1 is still being decided,
    and the decisions keep batch order."""
    events: list[str] = []
    deciding = threading.Event()
    embedded_meanwhile = threading.Event()

    def prepare(queries: list[str]) -> list[str]:
        events.append(f"embed {queries}")
        if deciding.is_set():
            embedded_meanwhile.set()
        return [q.upper() for q in queries]

    def process(prepared: list[str]) -> list[str]:
        deciding.set()
        embedded_meanwhile.wait(10 if prepared == ["A"] else 0)
        events.append(f"decide {prepared}")
        deciding.clear()
        return prepared

    async def scenario() -> list:
        batcher = Batcher(process, Batching(max_wait_ms=0, max_queries=8), prepare=prepare)
        await batcher.start()
        try:
            first = asyncio.create_task(batcher.submit(["a"]))
            await asyncio.sleep(0.01)
            return await asyncio.gather(first, batcher.submit(["b"]))
        finally:
            await batcher.stop()

    assert asyncio.run(scenario()) == [["A"], ["B"]]
    assert embedded_meanwhile.is_set()  # "b" was embedded while "a" was being decided
    assert events == ["embed ['a']", "embed ['b']", "decide ['A']", "decide ['B']"]


# ---------------------------------------------------------------------------- log
def _decision(gate_query: str):
    from ragbound.gate import Decision
    from ragbound.results import Verdict

    test = Verdict(
        query=gate_query, statistic="mss", score=-0.7, p_value=0.5, out_of_knowledge=False,
        alpha=0.05, critical_value=None, k=4, n_calibration=20,
    )  # fmt: skip
    return Decision(
        query=gate_query, action="answer", cause="in_knowledge", reason="r", test=test,
        tripwires=None, neighbours=[], kb_fingerprint="f", calibration_id="c", tripwire_set=None,
    )  # fmt: skip


def test_a_torn_last_line_is_cut_and_numbering_continues(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    log = QueryLog(path)
    log.append([_decision("one"), _decision("two")])
    log.close()
    with path.open("ab") as handle:
        handle.write(b'{"time": "2026-')  # a write cut short by a crash
    log = QueryLog(path)
    assert log.lines == 2
    landed = log.append([_decision("three")])
    log.close()
    assert landed[0].line == 3
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["query"] for line in lines] == ["one", "two", "three"]
    assert [item.line for item, _ in read_scores(path, (None, 0), 1)] == [1, 2, 3]


_SHIFT_LINE = '{"time": "2026-11-01T10:00:00Z", "query": "What do bees make?"}\n'
_DECISION_LINE = '{"time": "2026-11-01T10:00:00+00:00", "action": "answer", "score": -0.7}\n'


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (_SHIFT_LINE, "line 1 has no 'action' or 'score' field"),
        ("What do bees make?\n", "line 1 is not JSON"),
        ("[1, 2]\n", "line 1 is not a JSON object"),
        (_DECISION_LINE + "What do bees", "its last line is neither whole nor the start of a"),
        ("What do bees", "its last line is neither whole nor the start of a decision"),
        ("\n" + _DECISION_LINE, "line 1 is not JSON"),
    ],
)
def test_a_file_the_service_did_not_write_is_refused_untouched(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(content)
    with pytest.raises(InputError, match=rf"^{path}: not a decision log written by ragbound serve"):
        QueryLog(path)
    with pytest.raises(InputError) as caught:
        check_query_log(path)
    assert f"({problem}" in str(caught.value)
    assert path.read_text() == content


@pytest.mark.parametrize("content", ["", '{"ti', _DECISION_LINE, _DECISION_LINE + '{"time": "20'])
def test_an_empty_log_or_one_cut_short_is_the_service_s(tmp_path: Path, content: str) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(content)
    check_query_log(path)
    check_query_log(tmp_path / "absent.jsonl")
    QueryLog(path).close()
    assert path.read_text() == content[: content.rfind("\n") + 1]  # only a torn write is cut


def test_a_damaged_line_after_the_monitor_s_state_is_named(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    log = QueryLog(path)
    log.append([_decision("one")])
    log.close()
    with path.open("a") as handle:
        handle.write(_SHIFT_LINE)
    with pytest.raises(InputError, match=rf"^{path}:2: not a decision with its time and score$"):
        read_scores(path, (None, 0), 1)


def test_the_service_decides_without_a_monitor_when_its_log_cannot_be_replayed(
    minilm_kb_dir: Path, tmp_path: Path, capsys
) -> None:
    kb = served_kb(minilm_kb_dir, tmp_path / "kb")
    path = tmp_path / "log.jsonl"
    log = QueryLog(path)
    log.append([_decision("one")])
    log.close()
    with path.open("a") as handle:  # a line the service never wrote, after a good one
        handle.write(_SHIFT_LINE)
    app = create_app(Gate.load(kb), ServeSettings(log=path))
    with ThreadServer(app) as url:
        wait_ready(url)
        check = httpx.post(f"{url}/v1/decide", json={"query": "What do bees make?"})
        assert check.status_code == 200
        assert app.state.service.monitor is None
    assert json.loads(path.read_text().splitlines()[-1])["query"] == "What do bees make?"
    warning = f"warning: no shift monitor: {path}:2: not a decision with its time and score\n"
    assert warning in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["hash", "none"])
def test_the_log_keeps_a_hash_or_no_query(tmp_path: Path, mode: str) -> None:
    log = QueryLog(tmp_path / "log.jsonl", mode)  # type: ignore[arg-type]
    log.append([_decision("secret question")])
    log.close()
    line = json.loads((tmp_path / "log.jsonl").read_text())
    assert "secret" not in json.dumps(line)
    if mode == "hash":
        assert line["query"] == "sha256:" + hashlib.sha256(b"secret question").hexdigest()
    else:
        assert "query" not in line
    assert line["score"] == -0.7 and line["action"] == "answer" and line["p_value"] == 0.5


def test_a_failed_write_leaves_no_partial_line(tmp_path: Path, monkeypatch) -> None:
    import errno

    from ragbound.serve import querylog

    path = tmp_path / "log.jsonl"
    log = QueryLog(path)
    log.append([_decision("one")])
    before = path.read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(querylog.os, "fsync", disk_full)
    with pytest.raises(querylog.QueryLogError, match="No space left on device"):
        log.append([_decision("two"), _decision("three")])
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert log.append([_decision("four")])[0].line == 2
    log.close()
    assert [json.loads(x)["query"] for x in path.read_text().splitlines()] == ["one", "four"]


# ------------------------------------------------------------------------ monitor
def test_the_service_monitor_resumes_holds_its_state_and_deletes_a_crashed_save(
    minilm_kb_dir: Path, tmp_path: Path
) -> None:
    guard = Guard.load(served_kb(minilm_kb_dir, tmp_path / "kb"))
    log = QueryLog(tmp_path / "log.jsonl")
    state_path = tmp_path / "log.jsonl.monitor.json"
    first = ServiceMonitor(guard, 2, service_registry(), log, state_path)
    first.feed(log.append([_decision(f"q{i}") for i in range(3)]), log.place)
    first.close()
    stale = tmp_path / ".log.jsonl.monitor.json.3kq_z1.tmp"  # a save killed before its rename
    stale.write_text("{", encoding="utf-8")
    second = ServiceMonitor(guard, 2, service_registry(), log, state_path)
    try:
        assert not stale.exists()
        assert (second.state.windows, second.state.line) == (1, 3)
        with ThreadPoolExecutor(1) as other:  # another thread: the lock is not re-entered
            refused = other.submit(ServiceMonitor, guard, 2, service_registry(), log, state_path)
            with pytest.raises(ArtifactError, match="monitor state"):
                refused.result()
    finally:
        second.close()
    assert load_state(state_path).line == 3
    ServiceMonitor(guard, 2, service_registry(), log, state_path).close()  # free again
    log.close()


def test_a_monitor_state_the_disk_refuses_is_one_warning_and_the_log_replays_it(
    minilm_kb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from ragbound.serve import drift

    guard = Guard.load(served_kb(minilm_kb_dir, tmp_path / "kb"))
    log = QueryLog(tmp_path / "log.jsonl")
    state_path = tmp_path / "log.jsonl.monitor.json"
    monitor = ServiceMonitor(guard, 2, service_registry(), log, state_path)

    def disk_full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(drift, "save_state", disk_full)
        for n in range(3):  # each completed window saves: each save fails
            monitor.feed(log.append([_decision(f"q{n}a"), _decision(f"q{n}b")]), log.place)
        monitor.close()
    warnings = [line for line in capsys.readouterr().err.splitlines() if "not saved" in line]
    assert len(warnings) == 1 and "No space left on device" in warnings[0]
    resumed = ServiceMonitor(guard, 2, service_registry(), log, state_path)
    try:
        assert (resumed.state.windows, resumed.state.line) == (3, 6)  # replayed from the log
    finally:
        resumed.close()
        log.close()
