"""The service in front of a store the user runs: a Chroma collection embedded by another
application, queries embedded by an OpenAI-compatible server (infinity serving MiniLM), both
real and on loopback; nothing re-embedded but attach's sample and the tripwires.

One ``ragbound serve`` child (tokens, a query log, the gateway) serves the attached store to
every test here: its decisions, the dashboard, and the gateway in front of the scripted
upstream of ``tests.support.instant_upstream`` (a TEST DOUBLE for the LLM, as in
``tests/serve/test_gateway.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from ragbound.gate import DEFAULT_ABSTENTION, DEFAULT_REFUSAL, Gate
from ragbound.knowledge import KnowledgeBase
from tests.browser import needs_chromium
from tests.serve.dashboard_page import SCRIPTED, assert_the_page_updates
from tests.serve.server import (
    READ,
    ChildServer,
    add_tripwires,
    ask,
    auth,
    check_all,
    guarded_kb,
    log_lines,
    prepare_served,
    scripted_upstream,
    stats,
    token_file,
)
from tests.support.chroma_server import ChromaServer, fill_collection
from tests.support.instant_upstream import REPLY, ScriptedUpstream
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE
from tests.tripwires.tripwire_texts import UNSAFE

# MORE_IN_KNOWLEDGE[12] is held out: a calibration query's own statistic ties with its null
# value, and the last float digits of two embedders decide a tie
CALIBRATION = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10]


@pytest.fixture(scope="module")
def attached(
    minilm_kb_dir: Path,
    chroma: ChromaServer,
    module_endpoint_env: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """The bees-and-trains chunks in a Chroma collection (the application's own MiniLM
    vectors), attached with ``openai:minilm``, calibrated and guarded as the local served
    knowledge base is (``tests.serve.server.guarded_kb``)."""
    local = KnowledgeBase.load(minilm_kb_dir)
    texts = [chunk.text for chunk in local.chunks]
    ids = [chunk.id for chunk in local.chunks]
    fill_collection(chroma, "served", texts, np.asarray(local.vectors), ids=ids, space="cosine")
    kb_dir = tmp_path_factory.mktemp("attached") / "kb"
    KnowledgeBase.attach(chroma.url("served"), kb_dir, embedder="openai:minilm")
    return add_tripwires(prepare_served(kb_dir, CALIBRATION))


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with scripted_upstream() as double:
        yield double


@pytest.fixture(scope="module")
def url(attached: Path, upstream: ScriptedUpstream) -> Iterator[str]:
    """``ragbound serve KB --token-file --log --upstream`` on the attached knowledge base."""
    root = attached.parent
    server = ChildServer(
        str(attached),
        "--token-file", str(token_file(root)),
        "--log", str(root / "queries.log.jsonl"),
        "--upstream", f"{upstream.url}/v1",
    ).ready()  # fmt: skip
    try:
        yield server.url
    finally:
        assert server.stop() == 0, server.stderr()


def test_serve_decides_on_the_attached_store_through_the_endpoint(
    url: str, attached: Path, minilm_kb_dir: Path, tmp_path: Path
) -> None:
    ours = Gate.load(guarded_kb(minilm_kb_dir, tmp_path / "local", CALIBRATION))  # local twin
    queries = [MORE_IN_KNOWLEDGE[12], OUT_OF_KNOWLEDGE[0], UNSAFE[1]]
    ready = httpx.get(f"{url}/readyz", timeout=30).json()
    replies = [
        httpx.post(f"{url}/v1/decide", json={"query": q}, headers=auth(READ), timeout=60).json()
        for q in queries
    ]
    assert ready["canary"]["largest_move"] <= ready["canary"]["tolerance"]
    assert [r["action"] for r in replies] == [d.action for d in ours.decide_many(queries)]
    assert [r["action"] for r in replies] == ["answer", "abstain", "reject"]
    local_p = [d.test.p_value for d in ours.decide_many(queries)]
    assert [r["test"]["p_value"] for r in replies] == pytest.approx(local_p, abs=1e-9)
    logged = {
        line["query"]: line["action"] for line in log_lines(attached.parent / "queries.log.jsonl")
    }
    assert [logged[q] for q in queries] == ["answer", "abstain", "reject"]


# ------------------------------------------------------------------------ the dashboard
def test_the_dashboard_counts_the_attached_store_s_decisions(url: str) -> None:
    before = stats(url)
    assert before["ready"]
    window = before["monitor"]["window_size"]  # the shift monitor runs (with --log)
    filler = (MORE_IN_KNOWLEDGE * 4)[: max(1, window - before["total"] - 2)]  # a whole window
    results = check_all(url, [*filler, OUT_OF_KNOWLEDGE[0], SCRIPTED])
    assert [r["action"] for r in results][-2:] == ["abstain", "reject"]
    after = stats(url)
    for action in ("answer", "abstain", "reject"):
        made = sum(r["action"] == action for r in results)
        assert after["counts"][action] == before["counts"][action] + made
    assert after["total"] == before["total"] + len(results) == after["p_values"]["n"]
    newest = after["forbidden"][0]
    assert newest["query"] == SCRIPTED
    assert newest["p_value"] == pytest.approx(results[-1]["test"]["p_value"])
    windows = after["monitor"]["windows"]
    assert len(windows) == after["total"] // window >= 1
    assert all(w["n"] == window and 0 <= w["p_value"] <= 1 for w in windows)
    page = httpx.get(f"{url}/dashboard", headers=auth(READ))
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert httpx.get(f"{url}/dashboard").status_code == 200  # no data in it: no token
    assert httpx.get(f"{url}/v1/stats").status_code == 401


@needs_chromium
def test_the_dashboard_page_updates_in_headless_chromium(url: str) -> None:
    assert_the_page_updates(url)


# -------------------------------------------------------------------------- the gateway
@pytest.fixture
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=READ, max_retries=0, timeout=60)


def test_the_gateway_answers_with_the_store_s_chunks_as_context(
    client: openai.OpenAI, upstream: ScriptedUpstream, url: str
) -> None:
    query = IN_KNOWLEDGE[0]
    before = len(upstream.received)
    raw = client.chat.completions.with_raw_response.create(
        model="local-model", messages=ask(query, system="Be brief.")
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == REPLY
    assert raw.headers["x-ragbound-action"] == "answer"
    decision = completion.model_extra["ragbound"]  # the reply's summary: chunk ids, no text
    assert decision["action"] == "answer" and decision["chunk_ids"]
    assert len(upstream.received) == before + 1
    system, user = upstream.received[-1]["messages"]
    assert system["content"].startswith("Be brief.\n\n") and user["content"] == query
    (whole,) = check_all(url, [query])  # /v1/decide: the whole decision, with the texts
    assert [n["chunk_id"] for n in whole["neighbours"]] == decision["chunk_ids"]
    for neighbour in whole["neighbours"]:  # the texts the Chroma collection holds
        assert neighbour["text"] in system["content"]


@pytest.mark.parametrize(
    ("query", "action", "reply"),
    [(OUT_OF_KNOWLEDGE[0], "abstain", DEFAULT_ABSTENTION), (UNSAFE[1], "reject", DEFAULT_REFUSAL)],
)
def test_the_gateway_abstains_and_rejects_without_the_upstream(
    client: openai.OpenAI, upstream: ScriptedUpstream, query: str, action: str, reply: str
) -> None:
    before = len(upstream.received)
    raw = client.chat.completions.with_raw_response.create(model="m", messages=ask(query))
    completion = raw.parse()
    assert raw.headers["x-ragbound-action"] == action
    assert completion.model_extra["ragbound"]["action"] == action
    assert completion.choices[0].message.content == reply
    assert len(upstream.received) == before
