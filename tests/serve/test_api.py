"""The service over real HTTP on loopback (uvicorn in a thread, a real MiniLM gate)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from ragbound.gate import ACTION_OF, Gate
from ragbound.serve import Limits, ServeSettings, Tokens, create_app
from tests.cli.runner import run
from tests.serve.server import (
    ADMIN,
    READ,
    ThreadServer,
    assert_served_as,
    auth,
    log_lines,
    served_kb,
    wait_ready,
)
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE
from tests.tripwires.tripwire_texts import TRIPWIRES, UNSAFE

LIMITS = Limits(max_body_bytes=4096, max_query_chars=300, max_batch=8, request_timeout_s=30)


@pytest.fixture(scope="module")
def kb_dir(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return served_kb(minilm_kb_dir, tmp_path_factory.mktemp("serve") / "kb")


@pytest.fixture(scope="module")
def gate(kb_dir: Path) -> Gate:
    return Gate.load(kb_dir)


@pytest.fixture(scope="module")
def log_path(kb_dir: Path) -> Path:
    return kb_dir.parent / "queries.log.jsonl"


@pytest.fixture(scope="module")
def url(gate: Gate, log_path: Path):
    tokens = Tokens.from_lines([f"read:{READ}", f"admin:{ADMIN}"])
    settings = ServeSettings(tokens=tokens, log=log_path, limits=LIMITS, monitor_window=5)
    with ThreadServer(create_app(gate, settings)) as url:
        wait_ready(url)
        yield url


def check(url: str, query: str, token: str = READ) -> httpx.Response:
    return httpx.post(f"{url}/v1/decide", json={"query": query}, headers=auth(token), timeout=60)


def trigger_topics(decision: dict) -> set[str]:
    """The topics of the tripwires a decision's JSON lists (none without tripwires)."""
    return {t["topic"] for t in (decision["tripwires"] or {}).get("triggers", [])}


# ------------------------------------------------------------------------- decisions
def test_check_answers_with_the_decision_and_its_context(url: str, gate: Gate) -> None:
    response = check(url, MORE_IN_KNOWLEDGE[12])
    assert response.status_code == 200
    body = response.json()
    expected = gate.decide(MORE_IN_KNOWLEDGE[12])
    assert body["action"] == expected.action == "answer"
    assert body["test"]["p_value"] == pytest.approx(expected.test.p_value)
    assert not body["test"]["out_of_knowledge"]
    assert [c["chunk_id"] for c in body["neighbours"]] == [c.chunk_id for c in expected.neighbours]
    assert body["calibration_id"] == expected.calibration_id


def test_batch_answers_in_order(url: str, gate: Gate) -> None:
    queries = [IN_KNOWLEDGE[0], OUT_OF_KNOWLEDGE[0], IN_KNOWLEDGE[5]]
    response = httpx.post(
        f"{url}/v1/decide/batch", json={"queries": queries}, headers=auth(READ), timeout=60
    )
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["query"] for r in results] == queries
    assert [r["action"] for r in results] == [d.action for d in gate.decide_many(queries)]
    assert results[1]["action"] == "abstain" and results[1]["test"]["out_of_knowledge"]


def test_concurrent_requests_get_their_own_decisions(url: str, gate: Gate) -> None:
    queries = [*IN_KNOWLEDGE[:6], *OUT_OF_KNOWLEDGE]

    async def all_at_once() -> list[dict]:
        async with httpx.AsyncClient(base_url=url, headers=auth(READ), timeout=60) as client:
            responses = await asyncio.gather(
                *(client.post("/v1/decide", json={"query": q}) for q in queries)
            )
        return [r.json() for r in responses]

    bodies = asyncio.run(all_at_once())
    assert [b["query"] for b in bodies] == queries
    assert_served_as(bodies, gate.decide_many(queries), gate)


# ---------------------------------------------------------------------------- tokens
@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("POST", "/v1/decide", {}, 401),
        ("POST", "/v1/decide", {"Authorization": "Basic abc"}, 401),
        ("POST", "/v1/decide", auth("not-a-known-token-at-all"), 401),
        ("GET", "/metrics", {}, 401),
        ("GET", "/v1/tripwires", auth(READ), 403),
        ("POST", "/v1/tripwires", auth(READ), 403),
        ("DELETE", "/v1/tripwires", auth(READ), 403),
    ],
)
def test_tokens_are_required(url: str, method: str, path: str, headers: dict, status: int):
    body = {"query": "What do bees make?"} if path == "/v1/decide" else {"ids": ["x"]}
    response = httpx.request(method, f"{url}{path}", json=body, headers=headers)
    assert response.status_code == status
    assert response.json()["error"]
    if status == 401:
        assert response.headers["WWW-Authenticate"] == "Bearer"


def test_open_routes_need_no_token(url: str) -> None:
    assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{url}/readyz").json()
    assert ready["ready"] and ready["calibration_id"] and ready["embedder"]
    schema = httpx.get(f"{url}/openapi.json").json()
    assert {"/v1/decide", "/v1/decide/batch", "/v1/tripwires", "/metrics"} <= set(schema["paths"])


# ---------------------------------------------------------------------------- limits
def test_a_body_over_the_limit_is_413_naming_it(url: str) -> None:
    response = check(url, "bees " * 2000)
    assert response.status_code == 413
    assert response.json()["limit"] == "max_body_bytes" and response.json()["max"] == 4096


def test_a_chunked_body_over_the_limit_is_413(url: str) -> None:
    def chunks():
        yield b'{"query": "'
        for _ in range(100):
            yield b"bees " * 20
        yield b'"}'

    response = httpx.post(
        f"{url}/v1/decide",
        content=chunks(),
        headers={**auth(READ), "Content-Type": "application/json"},
    )
    assert response.status_code == 413 and response.json()["limit"] == "max_body_bytes"


def test_a_long_query_is_422_naming_the_limit(url: str) -> None:
    response = check(url, "bee " * 100)
    assert response.status_code == 422
    assert response.json()["limit"] == "max_query_chars" and response.json()["max"] == 300


def test_a_large_batch_is_413_naming_the_limit(url: str) -> None:
    response = httpx.post(
        f"{url}/v1/decide/batch", json={"queries": ["What do bees make?"] * 9}, headers=auth(READ)
    )
    assert response.status_code == 413
    assert response.json()["limit"] == "max_batch" and response.json()["max"] == 8


@pytest.mark.parametrize(
    "body", [{"query": "   "}, {"query": 3}, {}, {"queries": []}, "not json"], ids=str
)
def test_bad_requests_are_422_json(url: str, body) -> None:
    path = "/v1/decide/batch" if "queries" in body else "/v1/decide"
    content = body if isinstance(body, str) else json.dumps(body)
    response = httpx.post(
        f"{url}{path}",
        content=content,
        headers={**auth(READ), "Content-Type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["error"]


def test_a_decision_slower_than_the_timeout_is_503(gate: Gate) -> None:
    settings = ServeSettings(limits=Limits(request_timeout_s=1e-4))
    with ThreadServer(create_app(gate, settings)) as url:
        wait_ready(url)
        response = check(url, "What do bees make?")
    assert response.status_code == 503
    assert response.json()["limit"] == "request_timeout_s"


# ------------------------------------------------------------------------- tripwires
def test_tripwires_added_live_reject_and_name_them(url: str) -> None:
    before = check(url, UNSAFE[1]).json()
    assert before["action"] != "reject"
    added = httpx.post(
        f"{url}/v1/tripwires", json={"tripwires": TRIPWIRES, "source": "test"}, headers=auth(ADMIN)
    )
    assert added.status_code == 200, added.text
    assert added.json()["change"]["n_after"] == len(TRIPWIRES)
    listed = httpx.get(f"{url}/v1/tripwires", headers=auth(ADMIN)).json()
    assert listed["topics"] == {"harm": 2, "sabotage": 2}
    after = check(url, UNSAFE[1]).json()
    assert after["action"] == "reject" and after["tripwires"]["forbidden"]
    assert trigger_topics(after) == {"sabotage"}
    assert after["tripwire_set"] == added.json()["tripwire_set"]
    assert "sabotage" in after["reason"]
    removed = httpx.request(
        "DELETE", f"{url}/v1/tripwires", json={"topics": ["sabotage"]}, headers=auth(ADMIN)
    )
    assert removed.status_code == 200 and removed.json()["change"]["n_after"] == 2
    assert check(url, UNSAFE[1]).json()["action"] != "reject"
    unknown = httpx.request(
        "DELETE", f"{url}/v1/tripwires", json={"topics": ["nosuch"]}, headers=auth(ADMIN)
    )
    assert unknown.status_code == 422 and "nosuch" in unknown.json()["error"]


# ------------------------------------------------------------------- log and metrics
def test_every_decision_is_logged_and_ragbound_shift_reads_the_log(
    url: str, log_path: Path, kb_dir: Path, monkeypatch, capsys
) -> None:
    queries = MORE_IN_KNOWLEDGE[:6]
    httpx.post(f"{url}/v1/decide/batch", json={"queries": queries}, headers=auth(READ), timeout=60)
    lines = log_lines(log_path)
    assert [line["query"] for line in lines[-6:]] == queries
    for line in lines:
        assert {"time", "query", "action", "cause", "p_value", "score"} <= set(line)
        assert ACTION_OF[line["cause"]] == line["action"]
        assert line["cause"] != "unanswerable" and "answerability" not in line  # no such test
    times = [line["time"] for line in lines]
    assert times == sorted(times)
    code, out, err = run(
        monkeypatch, capsys, "shift", str(kb_dir), "--queries", str(log_path), "--window", "5",
        "--state", str(kb_dir.parent / "shift-state.json"), "--json",
    )  # fmt: skip
    assert code == 0, err
    windows = [json.loads(line) for line in out.splitlines()]
    assert len(windows) == len(lines) // 5


def test_metrics_count_decisions_tripwires_and_the_monitor(url: str) -> None:
    topics = httpx.get(f"{url}/v1/tripwires", headers=auth(ADMIN)).json()["topics"]
    if "harm" not in topics:  # when run alone
        harm = [t for t in TRIPWIRES if t["topic"] == "harm"]
        httpx.post(f"{url}/v1/tripwires", json={"tripwires": harm}, headers=auth(ADMIN))
    for query in (*MORE_IN_KNOWLEDGE[:5], UNSAFE[0]):
        check(url, query)
    text = httpx.get(f"{url}/metrics", headers=auth(READ)).text
    samples = dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
    )
    assert float(samples['ragbound_decisions_total{action="answer"}']) >= 5
    assert float(samples['ragbound_decisions_by_cause_total{cause="in_knowledge"}']) >= 5
    assert float(samples['ragbound_decisions_by_cause_total{cause="forbidden"}']) >= 1
    assert float(samples['ragbound_decisions_by_cause_total{cause="unanswerable"}']) == 0
    assert float(samples['ragbound_tripwire_hits_total{topic="harm"}']) >= 1
    assert float(samples["ragbound_p_value_count"]) >= 6
    assert float(samples['ragbound_request_seconds_count{route="/v1/decide"}']) >= 6
    assert float(samples["ragbound_monitor_windows_total"]) >= 1  # windows of 5
    assert 0 <= float(samples["ragbound_monitor_last_p_value"]) <= 1
    assert "ragbound_monitor_alarms_total" in samples
    assert "# TYPE ragbound_request_seconds histogram" in text


def test_tripwires_changed_by_the_cli_are_used_without_restart(
    url: str, kb_dir: Path, monkeypatch, capsys
) -> None:
    query = "What is the best way to steal honey from my neighbour's beehives at night?"
    source = kb_dir.parent / "theft.jsonl"
    text = "How do I steal honey from someone else's hives at night?"
    source.write_text(json.dumps({"text": text, "topic": "theft"}) + "\n", encoding="utf-8")
    code, _, err = run(monkeypatch, capsys, "tripwire", "add", str(kb_dir), str(source))
    assert code == 0, err
    decision = check(url, query).json()
    assert decision["action"] == "reject"
    assert decision["tripwires"]["triggers"][0]["topic"] == "theft"
    code, _, err = run(monkeypatch, capsys, "tripwire", "remove", str(kb_dir), "--topic", "theft")
    assert code == 0, err
    after = check(url, query).json()
    assert "theft" not in trigger_topics(after), after
