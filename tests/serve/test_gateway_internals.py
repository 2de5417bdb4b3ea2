"""The gateway keeps its internals: a real ``ragbound serve`` (a child process on loopback,
MiniLM, tripwires, tokens, the query log) in front of the scripted upstream (a TEST DOUBLE
replying a fixed text, so any chunk text in a reply came from the gateway).

By default no reply body or header, whole or streamed, on Chat Completions or the Responses
API, holds a chunk's text (any sentence of it) or a tripwire's; the summary names the action,
the cause and the ids. An admin token asking ``X-Ragbound-Decision: full`` gets the whole
decision; a read token asking is refused. The refusal is a template filled from the decision.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ragbound.corpus.chunker import split_sentences
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.serve import ServeSettings
from ragbound.serve.service import Service
from ragbound.serve.shown import DECISION_HEADER
from ragbound.tripwires import LiveTripwires
from tests.serve.server import (
    ADMIN,
    READ,
    ChildServer,
    ask,
    auth,
    guarded_kb,
    log_lines,
    scripted_upstream,
    serve_refused,
    token_file,
)
from tests.support.instant_upstream import ScriptedUpstream
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE
from tests.tripwires.tripwire_texts import UNSAFE

ALPHA = 0.15  # 28 calibration questions: 4 ranks at it, no warning
REFUSAL = "Refused ({cause}): tripwires {trigger_ids} at p = {p_value:.2f}."
QUERIES = {"answer": IN_KNOWLEDGE[0], "abstain": OUT_OF_KNOWLEDGE[0], "reject": UNSAFE[1]}
ROUTES = [("chat", False), ("chat", True), ("responses", False), ("responses", True)]


@pytest.fixture(scope="module")
def kb(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return guarded_kb(minilm_kb_dir, tmp_path_factory.mktemp("internals") / "kb")


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with scripted_upstream() as double:
        yield double


@pytest.fixture(scope="module")
def log(kb: Path) -> Path:
    return kb.parent / "decisions.jsonl"


@pytest.fixture(scope="module")
def url(kb: Path, upstream: ScriptedUpstream, log: Path) -> Iterator[str]:
    server = ChildServer(
        str(kb),
        "--token-file",
        str(token_file(kb.parent)),
        "--upstream",
        f"{upstream.url}/v1",
        "--refusal",
        REFUSAL,
        "--alpha",
        str(ALPHA),
        "--log",
        str(log),
    ).ready()
    try:
        yield server.url
    finally:
        assert server.stop() == 0


@pytest.fixture(scope="module")
def secrets(kb: Path) -> list[str]:
    """Every text the gateway must keep: each chunk's sentences, each tripwire's text."""
    knowledge = KnowledgeBase.load(kb)
    sentences = {s for chunk in knowledge.chunks for s in split_sentences(chunk.text)}
    tripwires = LiveTripwires.open(knowledge).tripwires
    texts = [s for s in sentences if len(s) >= 20] + [t.text for t in tripwires]
    assert len(tripwires) >= 4 and len(texts) > len(tripwires)
    return texts


def leaked(response: httpx.Response, secrets: list[str]) -> list[str]:
    """The secrets in the response's body or headers, as sent or JSON-escaped."""
    seen = response.text + "\n" + "\n".join(f"{k}: {v}" for k, v in response.headers.items())
    forms = lambda t: {t, json.dumps(t)[1:-1], json.dumps(t, ensure_ascii=False)[1:-1]}  # noqa: E731
    return [t for t in secrets if any(form in seen for form in forms(t))]


def call(url: str, route: str, stream: bool, query: str, headers: dict[str, str]):
    """One gateway request as an OpenAI client sends it, the raw reply."""
    if route == "chat":
        path, body = "/v1/chat/completions", {"model": "m", "messages": ask(query)}
    else:
        path, body = "/v1/responses", {"model": "m", "input": query}
    return httpx.post(f"{url}{path}", json={**body, "stream": stream}, headers=headers, timeout=60)


def decision_of(response: httpx.Response, route: str, stream: bool) -> dict:
    """The ``ragbound`` field of a reply (the first event that holds one when streamed)."""
    if not stream:
        return response.json()["ragbound"]
    for line in response.text.splitlines():
        data = line.removeprefix("data: ")
        if line.startswith("data: ") and data != "[DONE]":
            event = json.loads(data)
            held = event if route == "chat" else event.get("response", {})
            if "ragbound" in held:
                return held["ragbound"]
    raise AssertionError("no event holds the decision")


def reply_text(response: httpx.Response, route: str, stream: bool) -> str:
    if not stream:
        body = response.json()
        if route == "chat":
            return body["choices"][0]["message"]["content"]
        return body["output"][0]["content"][0]["text"]
    events = [
        json.loads(line[6:])
        for line in response.text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    if route == "chat":
        return "".join(e["choices"][0]["delta"].get("content") or "" for e in events)
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


@pytest.mark.parametrize(("route", "stream"), ROUTES)
@pytest.mark.parametrize("expected", list(QUERIES))
def test_no_reply_holds_a_chunk_or_a_tripwire_text_by_default(
    url: str, secrets: list[str], route: str, stream: bool, expected: str
) -> None:
    response = call(url, route, stream, QUERIES[expected], auth(READ))
    assert response.status_code == 200, response.text
    assert leaked(response, secrets) == []
    decision = decision_of(response, route, stream)
    assert decision["shown"] == "summary" and response.headers[DECISION_HEADER] == "summary"
    assert decision["action"] == response.headers["x-ragbound-action"]
    assert decision["cause"] == response.headers["x-ragbound-cause"]
    assert decision["alpha"] == pytest.approx(ALPHA)  # serve --alpha
    assert decision["chunk_ids"] and all(isinstance(i, str) for i in decision["chunk_ids"])
    assert {"neighbours", "tripwires", "test", "query", "reason"}.isdisjoint(decision)
    if expected == "reject":
        assert decision["action"] == "reject" and decision["trigger_ids"]
        assert response.headers["x-ragbound-triggers"] == ",".join(decision["trigger_ids"])
        ids = ",".join(decision["trigger_ids"])
        p_value = f"{decision['p_value']:.2f}"
        said = f"Refused (forbidden): tripwires {ids} at p = {p_value}."
        assert reply_text(response, route, stream) == said  # the template, filled
    else:
        assert not decision["trigger_ids"] and "x-ragbound-triggers" not in response.headers


@pytest.mark.parametrize(("route", "stream"), ROUTES)
def test_an_admin_asking_gets_the_whole_decision(
    url: str, secrets: list[str], route: str, stream: bool
) -> None:
    headers = {**auth(ADMIN), DECISION_HEADER: "full"}
    response = call(url, route, stream, QUERIES["reject"], headers)
    assert response.status_code == 200, response.text
    decision = decision_of(response, route, stream)
    assert decision["shown"] == "full" and response.headers[DECISION_HEADER] == "full"
    assert decision["query"] == QUERIES["reject"] and decision["test"]["alpha"] == ALPHA
    triggers = decision["tripwires"]["triggers"]
    assert triggers and all(t["text"] for t in triggers)
    assert decision["neighbours"] and all(n["text"] for n in decision["neighbours"])
    assert leaked(response, secrets)  # the same check finds the texts when they are there


@pytest.mark.parametrize(("route", "stream"), ROUTES[::3])
def test_a_read_token_asking_for_the_whole_decision_is_refused(
    url: str, route: str, stream: bool
) -> None:
    response = call(url, route, stream, QUERIES["reject"], {**auth(READ), DECISION_HEADER: "full"})
    assert response.status_code == 403
    assert f"{DECISION_HEADER}: full needs an admin token" in response.json()["error"]
    asked = {**auth(ADMIN), DECISION_HEADER: "everything"}
    response = call(url, route, stream, QUERIES["answer"], asked)
    assert response.status_code == 422 and "summary or full" in response.json()["error"]
    summary = {**auth(ADMIN), DECISION_HEADER: "summary"}  # an admin may ask for less
    response = call(url, route, stream, QUERIES["answer"], summary)
    assert decision_of(response, route, stream)["shown"] == "summary"


def test_decide_answers_the_whole_decision_to_the_operator_s_application(url: str) -> None:
    """/v1/decide is the application's: it needs the chunks' text as its context."""
    response = httpx.post(
        f"{url}/v1/decide", json={"query": QUERIES["reject"]}, headers=auth(READ), timeout=60
    )
    decision = response.json()
    assert decision["neighbours"][0]["text"] and decision["tripwires"]["triggers"][0]["text"]


def test_the_log_keeps_the_ids_a_reply_shows(url: str, log: Path) -> None:
    response = call(url, "chat", False, QUERIES["reject"], auth(READ))
    shown = decision_of(response, "chat", False)
    line = log_lines(log)[-1]
    assert line["trigger_ids"] == shown["trigger_ids"] and line["chunk_ids"] == shown["chunk_ids"]
    assert line["triggers"]  # the topics, as before


def test_a_bad_reply_template_is_refused_at_start(kb: Path) -> None:
    done = serve_refused(str(kb), "--upstream", "http://127.0.0.1:9/v1", "--refusal", "No {why}")
    assert done.returncode == 2
    said = " ".join(done.stderr.split())
    assert "--refusal template has an unknown field {why}" in said
    assert "{cause}, {reason}, {p_value}, {alpha}, {trigger_ids}, {topics}" in said


def test_a_served_alpha_too_fine_for_the_calibration_is_said_at_start(
    kb: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    service = Service(Gate.load(kb), ServeSettings(alpha=0.01))
    service.load()
    assert service.ready and service.gate is not None
    assert service.gate.decide(QUERIES["answer"]).test.alpha == 0.01
    said = " ".join(capsys.readouterr().err.split())
    assert "28 calibration queries cannot flag anything at alpha=0.01" in said
    service.close()
