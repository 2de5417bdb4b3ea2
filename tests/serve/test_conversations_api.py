"""Conversations over HTTP (issue 38): ``/v1/decide`` with ``messages``, ``/v1/decide/batch`` with
``conversations``, their bad inputs, the query log's conversation fields and their replay by
``ragbound test-log`` and ``ragbound shift`` (uvicorn in a thread, a real MiniLM gate)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import httpx
import pytest

from ragbound.conversations.model import Conversation, as_query, conversation
from ragbound.detect.monitor import read_log
from ragbound.errors import InputError
from ragbound.gate import Gate
from ragbound.serve import Batching, Limits, ServeSettings, create_app
from ragbound.serve.batcher import Batcher
from ragbound.serve.querylog import QueryLog
from tests.cli.runner import run
from tests.serve.server import (
    ThreadServer,
    assert_served_as,
    log_lines,
    one_rank,
    served_kb,
    wait_ready,
)
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE
from tests.tripwires.tripwire_texts import TRIPWIRES, UNSAFE

# the default limits but the batch: a 1 MB history passes the body limit (1 MiB) and meets the
# conversation's own
LIMITS = Limits(max_batch=4, request_timeout_s=60)
FOLLOW_UP = "yes"


def chat(*turns: str) -> list[dict]:
    """Messages alternating user and assistant, ``turns`` the user's (the assistant says
    little, so the follow-up is read through the user's turns)."""
    messages: list[dict] = []
    for turn in turns:
        if messages:
            messages.append({"role": "assistant", "content": "Let me see."})
        messages.append({"role": "user", "content": turn})
    return messages


@pytest.fixture(scope="module")
def kb_dir(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return served_kb(minilm_kb_dir, tmp_path_factory.mktemp("chats") / "kb")


@pytest.fixture(scope="module")
def gate(kb_dir: Path) -> Gate:
    return Gate.load(kb_dir)


def log_of(kb_dir: Path) -> Path:
    """The module's service's query log."""
    return kb_dir.parent / "decisions.log.jsonl"


@pytest.fixture(scope="module")
def url(gate: Gate, kb_dir: Path):
    settings = ServeSettings(log=log_of(kb_dir), limits=LIMITS, monitor_window=5)
    with ThreadServer(create_app(gate, settings)) as url:
        wait_ready(url)
        yield url


def check(url: str, body: dict) -> httpx.Response:
    """``POST /v1/decide``, or ``/v1/decide/batch`` for a body of queries or conversations."""
    path = "/v1/decide/batch" if {"queries", "conversations"} & set(body) else "/v1/decide"
    return httpx.post(f"{url}{path}", json=body, timeout=60)


# ------------------------------------------------------------------------- decisions
def test_a_conversation_over_http_is_the_gate_s_decision(url: str, gate: Gate) -> None:
    messages = chat(IN_KNOWLEDGE[1], FOLLOW_UP)
    response = check(url, {"messages": messages, "conversation_id": "chat-1"})
    assert response.status_code == 200, response.text
    body = response.json()
    expected = gate.decide(as_query({"messages": messages, "id": "chat-1"}))
    assert body["query"] == expected.query == FOLLOW_UP
    assert body["test"]["query"] == expected.test.query != FOLLOW_UP  # the turns joined
    assert body["action"] == expected.action
    assert body["test"]["p_value"] == pytest.approx(expected.test.p_value, abs=one_rank(gate))
    assert body["conversation"] == expected.conversation.model_dump()
    assert body["conversation"]["id"] == "chat-1" and body["conversation"]["turn"] == 1
    assert [c["chunk_id"] for c in body["neighbours"]] == [c.chunk_id for c in expected.neighbours]


def test_a_follow_up_is_answered_where_the_same_text_alone_abstains(url: str) -> None:
    alone = check(url, {"query": FOLLOW_UP}).json()
    assert alone["action"] == "abstain" and alone["conversation"] is None
    followed = check(url, {"messages": chat(IN_KNOWLEDGE[0], FOLLOW_UP)}).json()
    assert followed["action"] == "answer", followed["reason"]
    assert followed["conversation"]["read_turns"] == 2
    parts = [{"type": "text", "text": FOLLOW_UP}, {"type": "image_url", "image_url": {"url": "x"}}]
    with_parts = chat(IN_KNOWLEDGE[0], FOLLOW_UP)
    with_parts[-1]["content"] = parts  # an image beside the text is not read
    assert check(url, {"messages": with_parts}).json()["test"] == followed["test"]


def test_a_topic_switch_is_still_out_of_knowledge(url: str) -> None:
    switched = check(url, {"messages": chat(IN_KNOWLEDGE[0], OUT_OF_KNOWLEDGE[0])}).json()
    assert switched["action"] == "abstain", switched["test"]["query"]


def test_a_batch_of_conversations_is_decided_in_order(url: str, gate: Gate) -> None:
    chats = [
        {"messages": chat(IN_KNOWLEDGE[5], FOLLOW_UP), "id": "a"},
        {"messages": chat(OUT_OF_KNOWLEDGE[1])},
        {"messages": chat(IN_KNOWLEDGE[2], IN_KNOWLEDGE[3]), "id": "c"},
    ]
    response = check(url, {"conversations": chats})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    expected = gate.decide_many([as_query(c) for c in chats])
    assert [r["query"] for r in results] == [d.query for d in expected]
    assert [r["action"] for r in results] == [d.action for d in expected]
    assert [r["conversation"] for r in results] == [d.conversation.model_dump() for d in expected]


def test_concurrent_conversations_and_queries_share_batches(url: str, gate: Gate) -> None:
    items: list = [chat(q, FOLLOW_UP) for q in IN_KNOWLEDGE[:4]] + MORE_IN_KNOWLEDGE[:4]

    async def all_at_once() -> list[dict]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            bodies = [{"query": i} if isinstance(i, str) else {"messages": i} for i in items]
            responses = await asyncio.gather(*(client.post("/v1/decide", json=b) for b in bodies))
        return [r.json() for r in responses]

    results = asyncio.run(all_at_once())
    expected = gate.decide_many(items)
    assert [r["test"]["query"] for r in results] == [d.test.query for d in expected]
    assert_served_as(results, expected, gate)


def test_a_forbidden_earlier_turn_is_dropped(url: str) -> None:
    messages = chat(UNSAFE[1], IN_KNOWLEDGE[7])
    assert check(url, {"messages": messages}).json()["conversation"]["dropped"] == []
    added = httpx.post(f"{url}/v1/tripwires", json={"tripwires": TRIPWIRES})
    assert added.status_code == 200, added.text
    try:
        alone = check(url, {"messages": messages[:1]}).json()
        assert alone["action"] == "reject", alone["reason"]
        assert {t["topic"] for t in alone["tripwires"]["triggers"]} == {"sabotage"}
        decision = check(url, {"messages": messages}).json()
        assert decision["action"] != "reject", decision["reason"]
        assert decision["conversation"]["dropped"] == [0]
    finally:
        topics = {"topics": ["harm", "sabotage"]}
        assert httpx.request("DELETE", f"{url}/v1/tripwires", json=topics).status_code == 200


# ------------------------------------------------------------------------- bad input
TEXT = {"role": "user", "content": "What do bees make?"}
IMAGE_ONLY = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
BAD_INPUTS = {
    "empty messages": ({"messages": []}, 422, "no messages"),
    "no user turn": ({"messages": [{"role": "system", "content": "Be brief."}]}, 422, "no user"),
    "assistant last": ({"messages": [TEXT, {"role": "assistant", "content": "Honey."}]},
                       422, "the last message is the assistant's"),
    "non-text parts only": ({"messages": [IMAGE_ONLY]}, 422, "no text to decide"),
    "unknown role": ({"messages": [{"role": "bot", "content": "Hi"}]}, 422, "role"),
    "content not text": ({"messages": [{"role": "user", "content": 3}]}, 422, "content"),
    "part without type": ({"messages": [{"role": "user", "content": [{"text": "Hi"}]}]}, 422,
                          "type"),
    "null messages": ({"messages": None}, 422, "'messages' must not be null"),
    "query and messages": ({"query": "Hi", "messages": [TEXT]}, 422, "has both"),
    "neither": ({"conversation_id": "c"}, 422, "has neither"),
    "id with a query": ({"query": "Hi", "conversation_id": "c"}, 422, "goes with 'messages'"),
    "id not a string": ({"messages": [TEXT], "conversation_id": 7}, 422, "conversation_id"),
    "1,000 turns": ({"messages": [TEXT] * 1000}, 413, "1000 messages; at most 256"),
    "a 1 MB history": ({"messages": [{"role": "user", "content": "bees " * 200_000}, TEXT]}, 413,
                       "characters of text; at most 200000"),
    "a long last turn": ({"messages": [{"role": "user", "content": "bee " * 600}]}, 422,
                         "its last user message has 2399 characters; at most 2000"),
    # batches
    "5 conversations": ({"conversations": [{"messages": [TEXT]}] * 5}, 413, "5 conversations"),
    "5 queries": ({"queries": ["Why?"] * 5}, 413, "5 queries; at most 4"),
    "no conversations": ({"conversations": []}, 422, "no conversations to decide"),
    "queries and conversations": ({"queries": ["Why?"], "conversations": [{"messages": [TEXT]}]},
                                  422, "has both"),
    "a bad second one": ({"conversations": [{"messages": [TEXT]}, {"messages": [IMAGE_ONLY]}]},
                         422, "conversation 2, message 1"),
    "a long second one": ({"conversations": [{"messages": [TEXT]}, {"messages": chat(*"ab" * 150)}]},
                          413, "conversation 2: 599 messages"),
}  # fmt: skip


@pytest.mark.parametrize(("body", "status", "says"), BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_gets_a_clear_4xx_json_error(url: str, body: dict, status: int, says: str):
    response = check(url, body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert says in response.json()["error"]


def test_the_size_limits_are_named(url: str) -> None:
    turns = check(url, BAD_INPUTS["1,000 turns"][0]).json()
    assert (turns["limit"], turns["max"]) == ("max_messages", 256)
    history = check(url, BAD_INPUTS["a 1 MB history"][0]).json()
    assert (history["limit"], history["max"]) == ("max_conversation_chars", 200_000)
    turn = check(url, BAD_INPUTS["a long last turn"][0]).json()
    assert (turn["limit"], turn["max"]) == ("max_query_chars", 2000)


def test_a_batch_at_the_limit_is_decided(url: str) -> None:
    four = [{"messages": chat(q, FOLLOW_UP)} for q in IN_KNOWLEDGE[:4]]
    response = check(url, {"conversations": four})
    assert response.status_code == 200, response.text
    assert [r["conversation"]["turn"] for r in response.json()["results"]] == [1] * 4


# ------------------------------------------------------------------------- the batcher
def test_the_batcher_carries_conversations_and_a_failed_one_stays_its_own() -> None:
    def prepare(items: list) -> list:
        if any(isinstance(i, Conversation) and i.last_user == "bad" for i in items):
            raise InputError("bad turn")
        return items

    def process(items: list) -> list:
        return [i.last_user.upper() if isinstance(i, Conversation) else i for i in items]

    async def scenario() -> list:
        batcher = Batcher(process, Batching(max_wait_ms=50, max_queries=8), prepare=prepare)
        await batcher.start()
        try:
            requests = [
                [conversation(chat("first", "fine"))],
                [conversation(chat("first", "bad"))],
                ["plain", conversation(chat("other"))],
            ]
            return await asyncio.gather(
                *(batcher.submit(r) for r in requests), return_exceptions=True
            )
        finally:
            await batcher.stop()

    results = asyncio.run(scenario())
    assert results[0] == ["FINE"]
    assert isinstance(results[1], InputError)
    assert results[2] == ["plain", "OTHER"]


# ------------------------------------------------------------------------- the query log
def test_the_log_holds_the_conversation_and_score_replays_it(
    url: str, gate: Gate, kb_dir: Path, monkeypatch, capsys
) -> None:
    log_path = log_of(kb_dir)
    messages = chat(IN_KNOWLEDGE[6], FOLLOW_UP)
    live = check(url, {"messages": messages, "conversation_id": "chat-7"}).json()
    line = log_lines(log_path)[-1]
    assert line["query"] == FOLLOW_UP and line["p_value"] == live["test"]["p_value"]
    expected = as_query({"messages": messages})
    assert line["conversation"] == {
        "turn": 1,
        "history": expected.history_hash,
        "id": "chat-7",
        "reading": "follow",
        "read_turns": 2,
        "dropped": [],
        "searched": live["test"]["query"],
    }
    first = check(url, {"messages": chat(IN_KNOWLEDGE[6])}).json()  # searched: the turn itself
    assert "searched" not in log_lines(log_path)[-1]["conversation"]
    # an older line, without the conversation's fields, beside them
    old = {"time": "2026-11-01T10:00:00Z", "query": IN_KNOWLEDGE[6], "action": "answer"}
    replayed = kb_dir.parent / "replayed.log.jsonl"
    lines = [json.dumps(old), *log_path.read_text(encoding="utf-8").splitlines()[-2:]]
    replayed.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = kb_dir.parent / "scores.jsonl"
    code, _, err = run(
        monkeypatch, capsys, "test-log", str(kb_dir), str(replayed), "--out", str(out)
    )
    assert code == 0, err
    rows = [json.loads(row) for row in out.read_text().splitlines()]
    searched = [IN_KNOWLEDGE[6], live["test"]["query"], first["query"]]
    assert [row["query"] for row in rows] == searched
    assert rows[1]["p_value"] == pytest.approx(live["test"]["p_value"], abs=one_rank(gate))
    assert rows[2]["p_value"] == pytest.approx(first["test"]["p_value"], abs=one_rank(gate))
    assert rows[1]["score"] == pytest.approx(live["test"]["score"], abs=1e-5)


def test_shift_replays_the_searched_text(url: str, kb_dir: Path, monkeypatch, capsys) -> None:
    log_path = log_of(kb_dir)
    for query in IN_KNOWLEDGE[:5]:
        check(url, {"messages": chat(query, FOLLOW_UP)})
    logged = log_lines(log_path)
    read = [record.query for record, _ in read_log(log_path)]
    searched = [line.get("conversation", {}).get("searched", line["query"]) for line in logged]
    assert read == searched and f"{IN_KNOWLEDGE[4]} {FOLLOW_UP}" in read
    code, out, err = run(
        monkeypatch, capsys, "shift", str(kb_dir), "--queries", str(log_path), "--window", "5",
        "--state", str(kb_dir.parent / "shift-state.json"), "--json",
    )  # fmt: skip
    assert code == 0, err
    assert len(out.splitlines()) == len(logged) // 5


@pytest.mark.parametrize("mode", ["full", "hash", "none"])
def test_the_searched_text_is_kept_as_the_query_is(tmp_path: Path, gate: Gate, mode: str) -> None:
    decision = gate.decide(chat(IN_KNOWLEDGE[0], FOLLOW_UP))
    log = QueryLog(tmp_path / "log.jsonl", mode)  # type: ignore[arg-type]
    log.append([decision, gate.decide(IN_KNOWLEDGE[0])])
    log.close()
    chat_line, plain_line = log_lines(tmp_path / "log.jsonl")
    assert "conversation" not in plain_line
    kept = chat_line["conversation"]
    assert kept["turn"] == 1 and kept["history"] == decision.conversation.history
    searched = decision.test.query
    if mode == "full":
        assert kept["searched"] == searched and chat_line["query"] == FOLLOW_UP
    elif mode == "hash":
        assert kept["searched"] == "sha256:" + hashlib.sha256(searched.encode()).hexdigest()
        assert IN_KNOWLEDGE[0] not in json.dumps(chat_line)
    else:
        assert "searched" not in kept and "query" not in chat_line
        assert IN_KNOWLEDGE[0] not in json.dumps(chat_line)
