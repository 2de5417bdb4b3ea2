"""The answerability test's cause and evidence everywhere the service shows a decision.

The bundled sample corpus (real MiniLM) calibrated with ``answerability="coverage"``, served
over real HTTP (uvicorn in a thread) with a query log and the gateway in front of the scripted
upstream (a TEST DOUBLE replying a fixed text): ``/v1/decide``, its schema, the gateway's
headers and per-cause replies (Chat Completions and Responses, whole and streamed), the log's
lines, ``/metrics`` and ``/v1/stats``; then ``ragbound serve --unanswerable`` in a child
process.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import httpx
import openai
import pytest

from ragbound.gate import ACTION_OF, Decision, Gate
from ragbound.gate_texts import DEFAULT_ABSTENTION, DEFAULT_REFUSAL, DEFAULT_UNANSWERABLE
from ragbound.serve import ServeSettings, Tokens, create_app
from ragbound.serve.gateway import GatewaySettings
from ragbound.serve.launch import gateway_settings
from tests.cli.runner import run
from tests.serve.server import (
    ANSWERABLE,
    CAUSE_OF_QUESTION,
    OFF_CORPUS,
    READ,
    UNANSWERABLE,
    ChildServer,
    ThreadServer,
    answerability_kb,
    ask,
    auth,
    check_all,
    log_lines,
    scripted_upstream,
    stats,
    wait_ready,
)
from tests.support.instant_upstream import REPLY, ScriptedUpstream

QUESTIONS = list(CAUSE_OF_QUESTION)
NOT_HELD = "Sorry: my documents are about that, but not about this."
"""The gateway's unanswerable text in these tests (set as ``serve --unanswerable`` sets it)."""


@pytest.fixture(scope="module")
def kb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return answerability_kb(tmp_path_factory.mktemp("answerability") / "kb")


@pytest.fixture(scope="module")
def gate(kb_dir: Path) -> Gate:
    gate = Gate.load(kb_dir)
    causes = [d.cause for d in gate.decide_many(QUESTIONS)]
    # the examples must still be what they stand for, or every test below means nothing
    assert causes == list(CAUSE_OF_QUESTION.values()), "pick other example questions"
    return gate


@pytest.fixture(scope="module")
def upstream():
    with scripted_upstream() as double:
        yield double


@pytest.fixture(scope="module")
def log_path(kb_dir: Path) -> Path:
    return kb_dir.parent / "decisions.log.jsonl"


def cli_gateway(upstream_url: str, unanswerable: str) -> GatewaySettings:
    """The gateway's settings as ``ragbound serve --upstream URL --unanswerable TEXT`` makes
    them."""
    replies = {
        "refusal": DEFAULT_REFUSAL,
        "abstention": DEFAULT_ABSTENTION,
        "unanswerable": unanswerable,
    }
    settings = gateway_settings(f"{upstream_url}/v1", None, None, False, replies, {})
    assert settings is not None
    return settings


@pytest.fixture(scope="module")
def url(gate: Gate, upstream: ScriptedUpstream, log_path: Path):
    settings = ServeSettings(
        tokens=Tokens.from_lines([f"read:{READ}"]),
        log=log_path,
        gateway=cli_gateway(upstream.url, NOT_HELD),
    )
    with ThreadServer(create_app(gate, settings)) as url:
        wait_ready(url)
        yield url


@pytest.fixture
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=READ, max_retries=0, timeout=60)


def decide(url: str, query: str) -> dict:
    response = httpx.post(f"{url}/v1/decide", json={"query": query}, headers=auth(READ), timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def metric_samples(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", headers=auth(READ)).text
    lines = [line.rsplit(" ", 1) for line in text.splitlines() if line and line[0] != "#"]
    return {name: float(value) for name, value in lines}


# ------------------------------------------------------------------------ /v1/decide
def test_decide_says_the_cause_and_the_answerability_evidence(url: str, gate: Gate) -> None:
    body = decide(url, UNANSWERABLE)
    expected = gate.decide(UNANSWERABLE)
    assert body["action"] == "abstain" and body["cause"] == "unanswerable"
    assert body["reason"].startswith("unanswerable: the retrieved chunks hold")
    assert not body["test"]["out_of_knowledge"]
    verdict = body["answerability"]
    assert verdict["unanswerable"] and verdict["p_value"] <= verdict["alpha"]
    assert verdict["p_value"] == pytest.approx(expected.answerability.p_value)
    assert verdict["alpha"] == pytest.approx(body["test"]["alpha"])  # the shared level
    evidence = verdict["evidence"]
    assert evidence["missing"] == expected.answerability.evidence.missing != []
    assert evidence["sentence"] and evidence["chunk_id"] in {
        c["chunk_id"] for c in body["neighbours"]
    }
    assert Decision.model_validate(body).answerability == expected.answerability


def test_a_batch_gives_each_query_its_cause(url: str) -> None:
    results = check_all(url, QUESTIONS)
    causes = [r["cause"] for r in results]
    assert causes == list(CAUSE_OF_QUESTION.values())
    assert [r["action"] for r in results] == [ACTION_OF[c] for c in causes]
    # the test ran on the questions the boundary test let through, not on the one off corpus
    assert [r["answerability"] is not None for r in results] == [
        c != "out_of_knowledge" for c in causes
    ]
    answered = results[QUESTIONS.index(ANSWERABLE)]
    assert not answered["answerability"]["unanswerable"]
    assert answered["reason"].startswith("in knowledge:") and "answerable:" in answered["reason"]


def test_the_schema_documents_the_cause_and_the_answerability_verdict(url: str) -> None:
    schema = httpx.get(f"{url}/openapi.json").json()
    schemas = schema["components"]["schemas"]
    decision = schemas["Decision"]
    assert "cause" in decision["required"]
    assert set(decision["properties"]["cause"]["enum"]) == set(CAUSE_OF_QUESTION.values()) | {
        "forbidden",
        "small_talk",
    }
    refs = [option.get("$ref") for option in decision["properties"]["answerability"]["anyOf"]]
    assert "#/components/schemas/AnswerabilityVerdict" in refs
    verdict = schemas["AnswerabilityVerdict"]["properties"]
    assert {"p_value", "unanswerable", "alpha", "evidence"} <= set(verdict)
    assert {"sentence", "chunk_id", "coverage", "missing"} <= set(
        schemas["AnswerabilityEvidence"]["properties"]
    )
    for path in ("/v1/decide", "/v1/decide/batch"):
        reply = schema["paths"][path]["post"]["responses"]["200"]
        assert "$ref" in reply["content"]["application/json"]["schema"]


# --------------------------------------------------------------------------- gateway
ANSWERED_HERE = pytest.mark.parametrize(
    ("query", "cause", "reply"),
    [
        (UNANSWERABLE, "unanswerable", NOT_HELD),
        (OFF_CORPUS, "out_of_knowledge", DEFAULT_ABSTENTION),
    ],
)
"""A question the gateway answers itself, with its cause and the reply of that cause."""


@ANSWERED_HERE
@pytest.mark.parametrize("stream", [False, True])
def test_the_chat_gateway_answers_each_cause_with_its_own_text(
    client, upstream, query: str, cause: str, reply: str, stream: bool
) -> None:
    before = len(upstream.received)
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=ask(query), stream=stream
    )
    if stream:
        chunks = list(raw.parse())
        decision = chunks[0].model_extra["ragbound"]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        completion = raw.parse()
        decision = completion.model_extra["ragbound"]
        text = completion.choices[0].message.content
    assert text == reply
    assert decision["cause"] == cause and decision["action"] == "abstain"
    assert raw.headers["x-ragbound-action"] == "abstain"
    assert raw.headers["x-ragbound-cause"] == cause
    p_value = decision["answerability_p_value"]
    if cause == "unanswerable":
        header = float(raw.headers["x-ragbound-answerability-p-value"])
        assert header == pytest.approx(p_value, rel=1e-5)
        assert p_value is not None and decision["p_value"] > decision["alpha"]
    else:  # out of knowledge: the answerability test did not run
        assert p_value is None and "x-ragbound-answerability-p-value" not in raw.headers
    assert len(upstream.received) == before  # never sent upstream


@ANSWERED_HERE
@pytest.mark.parametrize("stream", [False, True])
def test_the_responses_gateway_answers_each_cause_with_its_own_text(
    client, upstream, query: str, cause: str, reply: str, stream: bool
) -> None:
    before = len(upstream.received)
    raw = client.responses.with_raw_response.create(model="m", input=query, stream=stream)
    if stream:
        events = list(raw.parse())
        decision = events[0].response.model_extra["ragbound"]
        text = events[-1].response.output_text
        assert events[-1].response.model_extra["ragbound"]["cause"] == cause
    else:
        response = raw.parse()
        decision = response.model_extra["ragbound"]
        text = response.output_text
    assert text == reply
    assert decision["cause"] == cause
    assert (decision["answerability_p_value"] is not None) == (cause == "unanswerable")
    assert raw.headers["x-ragbound-cause"] == cause
    assert len(upstream.received) == before


def test_an_answerable_question_goes_upstream_with_its_cause(client, upstream) -> None:
    before = len(upstream.received)
    raw = client.chat.completions.with_raw_response.create(model="m", messages=ask(ANSWERABLE))
    completion = raw.parse()
    assert completion.choices[0].message.content == REPLY
    assert len(upstream.received) == before + 1
    assert raw.headers["x-ragbound-action"] == "answer"
    assert raw.headers["x-ragbound-cause"] == "in_knowledge"
    decision = completion.model_extra["ragbound"]
    assert float(raw.headers["x-ragbound-answerability-p-value"]) == pytest.approx(
        decision["answerability_p_value"], rel=1e-5
    )


def test_the_texts_are_one_per_cause_by_default(gate: Gate) -> None:
    settings = GatewaySettings(upstream="http://127.0.0.1:9/v1")
    decision = gate.decide(ANSWERABLE)
    texts = {
        cause: settings.own_text(decision.model_copy(update={"cause": cause}))
        for cause in ("unanswerable", "out_of_knowledge", "forbidden", "in_knowledge")
    }
    assert texts["unanswerable"] == DEFAULT_UNANSWERABLE != DEFAULT_ABSTENTION
    assert texts["out_of_knowledge"] == DEFAULT_ABSTENTION
    assert texts["forbidden"] == DEFAULT_REFUSAL
    assert texts["in_knowledge"] is None


# ---------------------------------------------------------- the log, metrics, stats
def test_the_log_keeps_each_cause_and_the_answerability_test(url: str, log_path: Path) -> None:
    before = len(log_lines(log_path))
    results = check_all(url, QUESTIONS)
    lines = log_lines(log_path)[before:]
    assert [line["query"] for line in lines] == QUESTIONS
    assert [line["cause"] for line in lines] == list(CAUSE_OF_QUESTION.values())
    for line, result in zip(lines, results, strict=True):
        assert line["action"] == result["action"]
        verdict = result["answerability"]
        if verdict is None:  # out of knowledge: the test did not run
            assert "answerability" not in line and line["cause"] == "out_of_knowledge"
            continue
        assert line["answerability"] == {
            "statistic": verdict["statistic"],
            "score": pytest.approx(verdict["score"]),
            "p_value": pytest.approx(verdict["p_value"]),
        }
        assert line["p_value"] == pytest.approx(result["test"]["p_value"])


def test_metrics_and_stats_count_unanswerable_apart(url: str) -> None:
    before, counts = metric_samples(url), stats(url)
    results = check_all(url, [UNANSWERABLE, UNANSWERABLE, OFF_CORPUS, ANSWERABLE])
    after, counted = metric_samples(url), stats(url)
    tested = sum(r["answerability"] is not None for r in results)

    def gained(name: str) -> float:
        return after[name] - before[name]

    assert gained('ragbound_decisions_by_cause_total{cause="unanswerable"}') == 2
    assert gained('ragbound_decisions_by_cause_total{cause="out_of_knowledge"}') == 1
    assert gained('ragbound_decisions_by_cause_total{cause="in_knowledge"}') == 1
    assert gained('ragbound_decisions_by_cause_total{cause="forbidden"}') == 0
    assert gained('ragbound_decisions_total{action="abstain"}') == 3  # the series as before
    assert gained("ragbound_answerability_p_value_count") == tested == 3  # not off corpus
    assert gained('ragbound_answerability_p_value_bucket{le="0.05"}') >= 2
    causes = counted["causes"]
    assert causes["unanswerable"] - counts["causes"]["unanswerable"] == 2
    assert causes["out_of_knowledge"] - counts["causes"]["out_of_knowledge"] == 1
    assert sum(causes.values()) == counted["total"]
    abstained = causes["unanswerable"] + causes["out_of_knowledge"]
    assert counted["counts"]["abstain"] == abstained


# ---------------------------------------------------------------- ragbound test-log
def test_test_log_replays_the_log_and_counts_unanswerable_apart(
    url: str, gate: Gate, kb_dir: Path, log_path: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    check_all(url, QUESTIONS)
    lines = log_lines(log_path)
    scores = tmp_path / "scores.jsonl"
    code, out, err = run(
        monkeypatch, capsys, "test-log", str(kb_dir), str(log_path), "--out", str(scores), "--json"
    )
    assert code == 0, err
    summary = json.loads(out)
    logged = Counter(line["cause"] for line in lines)
    assert summary["n"] == len(lines)
    assert summary["out_of_knowledge"] == logged["out_of_knowledge"] >= 1
    assert summary["unanswerable"] == logged["unanswerable"] >= 1  # as the service decided
    assert summary["alpha"] == pytest.approx(gate.decide(ANSWERABLE).test.alpha)  # shared
    rows = [json.loads(row) for row in scores.read_text(encoding="utf-8").splitlines()]
    flagged = [row["out_of_knowledge"] for row in rows]
    assert flagged == [line["cause"] == "out_of_knowledge" for line in lines]


def test_test_log_without_the_answerability_test_counts_no_unanswerable(
    gated_kb: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    queries = tmp_path / "queries.txt"
    queries.write_text("What do bees make?\nWho won the 1998 world cup?\n", encoding="utf-8")
    out_file = tmp_path / "scores.jsonl"
    code, out, err = run(
        monkeypatch, capsys, "test-log", str(gated_kb), str(queries), "--out", str(out_file),
        "--json",
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)
    assert summary["n"] == 2 and summary["unanswerable"] is None
    assert summary["alpha"] == pytest.approx(0.1)  # the calibration's, whole


# --------------------------------------------------------------- ragbound serve CLI
def test_serve_unanswerable_sets_the_gateway_s_text(
    kb_dir: Path, gate: Gate, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    log = tmp_path / "served.log.jsonl"
    text = "Not in my documents, sorry."
    server = ChildServer(
        str(kb_dir), "--upstream", f"{upstream.url}/v1", "--unanswerable", text, "--log", str(log)
    ).ready()
    try:
        reply = httpx.post(
            f"{server.url}/v1/chat/completions",
            json={"model": "m", "messages": ask(UNANSWERABLE)},
            timeout=60,
        )
    finally:
        assert server.stop() == 0
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == text
    assert reply.headers["x-ragbound-cause"] == "unanswerable"
    (line,) = log_lines(log)
    assert line["cause"] == "unanswerable" and line["answerability"]["statistic"] == "coverage"
