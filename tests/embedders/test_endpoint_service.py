"""The service in front of a store the user runs: a Chroma collection embedded by another
application, queries embedded by an OpenAI-compatible server (infinity serving MiniLM), both
real and on loopback; nothing re-embedded but attach's sample."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

from benchmarks.chroma_server import ChromaServer, fill_collection
from ragbound.detect import Guard
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from tests.serve.server import ChildServer
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE


@pytest.fixture
def attached(
    minilm_kb_dir: Path, chroma: ChromaServer, endpoint_env: str, tmp_path: Path
) -> tuple[Path, KnowledgeBase]:
    """The bees-and-trains chunks in a Chroma collection (the application's own MiniLM
    vectors), attached with ``openai:minilm`` and calibrated; and the local folder."""
    local = KnowledgeBase.load(minilm_kb_dir)
    texts = [chunk.text for chunk in local.chunks]
    ids = [chunk.id for chunk in local.chunks]
    fill_collection(chroma, "served", texts, np.asarray(local.vectors), ids=ids, space="cosine")
    kb = KnowledgeBase.attach(chroma.url("served"), tmp_path / "kb", embedder="openai:minilm")
    Guard.calibrate(kb, IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10], k=4, alpha=0.1).save()
    return tmp_path / "kb", local


def test_serve_decides_on_the_attached_store_through_the_endpoint(attached) -> None:
    kb_dir, local = attached
    ours = Gate(Guard.calibrate(local, IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10], k=4, alpha=0.1))
    queries = [MORE_IN_KNOWLEDGE[12], OUT_OF_KNOWLEDGE[0], OUT_OF_KNOWLEDGE[1]]
    server = ChildServer(str(kb_dir)).ready()
    try:
        ready = httpx.get(f"{server.url}/readyz", timeout=30).json()
        replies = [
            httpx.post(f"{server.url}/v1/check", json={"query": q}, timeout=60).json()
            for q in queries
        ]
    finally:
        server.stop()
    assert ready["canary"]["largest_move"] <= ready["canary"]["tolerance"]
    assert [r["action"] for r in replies] == [d.action for d in ours.decide_many(queries)]
    assert [r["action"] for r in replies] == ["answer", "abstain", "abstain"]
    local_p = [d.test.p_value for d in ours.decide_many(queries)]
    assert [r["test"]["p_value"] for r in replies] == pytest.approx(local_p, abs=1e-9)
