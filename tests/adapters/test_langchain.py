"""LangChain adapter: GatedRetriever with langchain-core's own in-memory vector store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import ValidationError

from ragbound.adapters.langchain import DECISION_EVENT, GatedRetriever, QueryBlocked
from ragbound.gate import Decision, Gate
from tests.adapters.conftest import ABSTAINED, ANSWERED, REJECTED, RULE
from tests.texts import TOPICS


class KnowledgeBaseEmbeddings(Embeddings):
    """LangChain embeddings backed by the knowledge base's own MiniLM model (real vectors)."""

    def __init__(self, gate: Gate):
        self.kb = gate.guard.kb

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.kb.embed(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.kb.embed([text])[0].tolist()


class Recorder(BaseCallbackHandler):
    """Collects the decisions sent as custom events and the retrievers that started."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.retrievers_started = 0

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name == DECISION_EVENT:
            self.events.append(data)

    def on_retriever_start(self, *args: Any, **kwargs: Any) -> None:
        self.retrievers_started += 1


@pytest.fixture(scope="module")
def gate(gated_kb_dir: Path) -> Gate:
    return Gate.load(gated_kb_dir, rule=RULE, context_k=3)


@pytest.fixture(scope="module")
def store(gate: Gate) -> InMemoryVectorStore:
    store = InMemoryVectorStore(KnowledgeBaseEmbeddings(gate))
    texts = [text for sentences in TOPICS.values() for text in sentences]
    store.add_texts(texts, metadatas=[{"n": i} for i in range(len(texts))])
    return store


def test_alone_it_returns_the_gates_context_on_answer(gate: Gate) -> None:
    retriever = GatedRetriever(gate=gate)
    docs = retriever.invoke(ANSWERED)
    decision = retriever.last_decision
    assert decision is not None and decision.action == "answer"
    assert [d.page_content for d in docs] == [c.text for c in decision.neighbours]
    assert [d.metadata["rank"] for d in docs] == [1, 2, 3]
    assert all(d.metadata["ragbound"]["action"] == "answer" for d in docs)
    summary = docs[0].metadata["ragbound"]
    assert summary["test"]["p_value"] == pytest.approx(decision.test.p_value)
    assert "neighbours" not in summary  # the documents are the context


@pytest.mark.parametrize(
    ("query", "action"), [(ABSTAINED, "abstain"), (REJECTED, "reject")], ids=["abstain", "reject"]
)
def test_a_blocked_query_gets_no_documents_and_its_decision_is_exposed(
    gate: Gate, store: InMemoryVectorStore, query: str, action: str
) -> None:
    recorder = Recorder()
    retriever = GatedRetriever(gate=gate, retriever=store.as_retriever(search_kwargs={"k": 2}))
    assert retriever.invoke(query, config={"callbacks": [recorder]}) == []
    assert retriever.last_decision is not None and retriever.last_decision.action == action
    assert [Decision.model_validate(e).action for e in recorder.events] == [action]
    assert recorder.retrievers_started == 1  # the guard only: the wrapped retriever never ran
    if action == "reject":
        assert recorder.events[0]["tripwires"]["triggers"][0]["topic"] == "harm"


def test_on_answer_it_returns_the_wrapped_retrievers_documents_annotated(
    gate: Gate, store: InMemoryVectorStore
) -> None:
    wrapped = store.as_retriever(search_kwargs={"k": 2})
    recorder = Recorder()
    docs = GatedRetriever(gate=gate, retriever=wrapped).invoke(
        ANSWERED, config={"callbacks": [recorder]}
    )
    plain = wrapped.invoke(ANSWERED)
    assert [d.page_content for d in docs] == [d.page_content for d in plain]
    assert [d.metadata["n"] for d in docs] == [d.metadata["n"] for d in plain]
    assert all(d.metadata["ragbound"]["action"] == "answer" for d in docs)
    assert all("ragbound" not in d.metadata for d in plain)  # the store's documents untouched
    assert recorder.retrievers_started == 2  # the guard, then the wrapped retriever


def test_raise_mode_raises_with_the_decision(gate: Gate) -> None:
    retriever = GatedRetriever(gate=gate, on_block="raise")
    with pytest.raises(QueryBlocked, match="reject") as caught:
        retriever.invoke(REJECTED)
    tripwires = caught.value.decision.tripwires
    assert tripwires is not None and tripwires.forbidden and tripwires.rule == "rank<=1"
    assert retriever.invoke(ANSWERED)  # answers still come through


def test_async_matches_sync(gate: Gate, store: InMemoryVectorStore) -> None:
    retriever = GatedRetriever(gate=gate, retriever=store.as_retriever(search_kwargs={"k": 2}))
    answered, blocked = asyncio.run(_ainvoke_both(retriever))
    assert blocked == [] and retriever.last_decision.action == "abstain"
    assert [d.page_content for d in answered] == [
        d.page_content for d in retriever.invoke(ANSWERED)
    ]


async def _ainvoke_both(retriever: GatedRetriever) -> tuple[list, list]:
    answered = await retriever.ainvoke(ANSWERED)
    blocked = await retriever.ainvoke(ABSTAINED)
    return answered, blocked


def test_an_unknown_on_block_is_refused(gate: Gate) -> None:
    with pytest.raises(ValidationError, match="on_block must be one of empty, raise"):
        GatedRetriever(gate=gate, on_block="drop")
