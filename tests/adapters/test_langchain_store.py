"""LangChain, natively: the guard on langchain-core's real InMemoryVectorStore, filled with the
bees-and-trains chunks embedded by ragbound's bundled MiniLM, against ragbound's own folder."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("langchain_core")

from langchain_core.vectorstores import InMemoryVectorStore

from ragbound.adapters.langchain_store import (
    GatedVectorStoreRetriever,
    QueryBlocked,
    RagboundEmbeddings,
    VectorStoreKnowledge,
)
from ragbound.detect import Guard
from ragbound.errors import IncompatibleArtifactError, InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.protocol import Knowledge
from tests.adapters.native_texts import ABSTAINED, ANSWERED, CALIBRATION, CHECKED
from tests.texts import OUT_OF_KNOWLEDGE


class MiniLMEmbeddings(RagboundEmbeddings):
    """The adapter's LangChain embeddings over the folder's own MiniLM (real vectors),
    counting the queries it embeds."""

    queries = 0

    def embed_query(self, text: str) -> list[float]:
        self.queries += 1
        return super().embed_query(text)


class CountingStore(InMemoryVectorStore):
    """The real in-memory store, counting searches; its relevance is (1 + cosine) / 2, an
    increasing transform of cosine (langchain-core leaves the in-memory one undefined)."""

    searches = 0

    def similarity_search_with_score_by_vector(self, *args: Any, **kwargs: Any) -> Any:
        self.searches += 1
        return super().similarity_search_with_score_by_vector(*args, **kwargs)

    def _select_relevance_score_fn(self) -> Any:
        return lambda score: (1.0 + score) / 2.0


@pytest.fixture(scope="module")
def embeddings(kb: KnowledgeBase) -> MiniLMEmbeddings:
    return MiniLMEmbeddings(kb.embedder)


@pytest.fixture(scope="module")
def store(kb: KnowledgeBase, embeddings: MiniLMEmbeddings) -> CountingStore:
    store = CountingStore(embeddings)
    chunks = kb.chunks
    store.add_texts(
        [c.text for c in chunks],
        metadatas=[{"n": i} for i in range(len(chunks))],
        ids=[c.id for c in chunks],
    )
    return store


def knowledge_of(store: CountingStore, **options: Any) -> VectorStoreKnowledge:
    return VectorStoreKnowledge(store, name="minilm", size=len(store.store), **options)


@pytest.mark.parametrize("statistic", ["mss", "knn", "fisher", "simes", "avgknn", "energy"])
def test_cosine_scores_give_the_folders_p_values(
    kb: KnowledgeBase, store: CountingStore, statistic: str
) -> None:
    knowledge = knowledge_of(store)
    assert isinstance(knowledge, Knowledge)
    ours = Guard.calibrate(kb, CALIBRATION, k=4, alpha=0.1, statistic=statistic)
    theirs = Guard.calibrate(knowledge, CALIBRATION, k=4, alpha=0.1, statistic=statistic)
    np.testing.assert_allclose(
        theirs.calibration.similarities, ours.calibration.similarities, atol=1e-5
    )
    mine, yours = ours.check_many(CHECKED), theirs.check_many(CHECKED)
    assert [v.p_value for v in yours] == pytest.approx([v.p_value for v in mine], abs=1e-9)
    assert [v.neighbours[0].text for v in yours] == [v.neighbours[0].text for v in mine]


@pytest.mark.parametrize("statistic", ["mss", "knn", "fisher", "simes"])
def test_relevance_scores_give_the_folders_p_values_for_rank_statistics(
    kb: KnowledgeBase, store: CountingStore, statistic: str
) -> None:
    knowledge = knowledge_of(store, closeness="relevance")
    assert knowledge.store.query_kind == "text"  # the store embeds the query itself
    ours = Guard.calibrate(kb, CALIBRATION, k=4, alpha=0.1, statistic=statistic)
    theirs = Guard.calibrate(knowledge, CALIBRATION, k=4, alpha=0.1, statistic=statistic)
    mine, yours = ours.check_many(CHECKED), theirs.check_many(CHECKED)
    assert [v.p_value for v in yours] == pytest.approx([v.p_value for v in mine], abs=1e-9)
    assert any(v.out_of_knowledge for v in yours[-len(OUT_OF_KNOWLEDGE) :])


def test_scale_dependent_statistics_are_refused_without_the_exact_similarity(
    store: CountingStore,
) -> None:
    knowledge = knowledge_of(store, closeness="relevance")
    for statistic in ("avgknn", "entropy", "energy", "combined", "auto"):
        with pytest.raises(InputError, match=rf"statistic {statistic} is refused.*order"):
            Guard.calibrate(knowledge, CALIBRATION, statistic=statistic)
    guard = Guard.calibrate(knowledge, CALIBRATION, k=4)
    with pytest.raises(InputError, match="statistic avgknn is refused"):
        guard.check(ANSWERED, statistic="avgknn")
    with pytest.raises(InputError, match=r"statistic combined is refused.*does not list"):
        Guard.calibrate(knowledge_of(store), CALIBRATION, statistic="combined")


def test_one_embedding_and_one_search_per_query(
    store: CountingStore, embeddings: MiniLMEmbeddings
) -> None:
    guard = Guard.calibrate(knowledge_of(store), CALIBRATION, k=4, alpha=0.1)
    retriever = GatedVectorStoreRetriever(guard=guard, k=6)
    searches, queries = store.searches, embeddings.queries
    retriever.invoke(ANSWERED)
    retriever.invoke(ABSTAINED)
    assert (store.searches - searches, embeddings.queries - queries) == (2, 2)


def test_answer_returns_the_stores_documents_and_abstain_none(store: CountingStore) -> None:
    guard = Guard.calibrate(knowledge_of(store), CALIBRATION, k=4, alpha=0.1)
    retriever = GatedVectorStoreRetriever(guard=guard, k=3)
    docs = retriever.invoke(ANSWERED)
    decision = retriever.last_decision
    assert decision is not None and decision.action == "answer"
    plain = store.similarity_search(ANSWERED, k=3)
    assert [d.id for d in docs] == [d.id for d in plain]
    assert [d.metadata["n"] for d in docs] == [d.metadata["n"] for d in plain]
    assert docs[0].metadata["ragbound"]["test"]["p_value"] == pytest.approx(decision.test.p_value)
    assert all("ragbound" not in d.metadata for d in plain)  # the store's documents untouched
    assert retriever.invoke(ABSTAINED) == []
    assert retriever.last_decision.action == "abstain"
    with pytest.raises(QueryBlocked, match="abstain"):
        GatedVectorStoreRetriever(guard=guard, on_block="raise").invoke(ABSTAINED)
    answered = asyncio.run(retriever.ainvoke(ANSWERED))
    assert [d.id for d in answered] == [d.id for d in docs]


def test_the_calibration_saves_to_a_folder_and_loads_against_the_store(
    store: CountingStore, tmp_path: Path
) -> None:
    knowledge = knowledge_of(store)
    guard = Guard.calibrate(knowledge, CALIBRATION, k=4, alpha=0.1)
    with pytest.raises(InputError, match="no folder"):
        guard.save()
    guard.save(folder=tmp_path / "calibration-of-my-store")
    again = Guard.load_for(knowledge_of(store), tmp_path / "calibration-of-my-store")
    assert again.calibration.manifest.search == knowledge.describe()
    assert [v.p_value for v in again.check_many(CHECKED)] == [
        v.p_value for v in guard.check_many(CHECKED)
    ]
    for other in (
        knowledge_of(store, closeness="relevance"),
        knowledge_of(store, version="2"),
        VectorStoreKnowledge(store, name="another-model"),
    ):
        with pytest.raises(IncompatibleArtifactError):
            Guard.load_for(other, tmp_path / "calibration-of-my-store")


def test_what_the_store_cannot_give_is_refused(store: CountingStore) -> None:
    with pytest.raises(InputError, match=r"wrong way.*closeness='similarity'"):
        Guard.calibrate(knowledge_of(store, closeness="distance"), CALIBRATION, k=4)
    with pytest.raises(InputError, match="returned 10 documents for k=11"):
        Guard.calibrate(VectorStoreKnowledge(store, name="minilm"), CALIBRATION, k=11)
    with pytest.raises(IncompatibleArtifactError, match="rows are its documents"):
        Guard.calibrate(knowledge_of(store), CALIBRATION, k=4, granularity="sentence")
    with pytest.raises(InputError, match="closeness must be one of"):
        knowledge_of(store, closeness="rank")


def test_the_retriever_refuses_a_guard_on_other_knowledge_and_a_bad_k(
    store: CountingStore, kb: KnowledgeBase
) -> None:
    # pydantic reports the refusal as a ValidationError, a ValueError like InputError
    with pytest.raises(ValueError, match="calibrated on a VectorStoreKnowledge"):
        GatedVectorStoreRetriever(guard=Guard.calibrate(kb, CALIBRATION, k=4))
    guard = Guard.calibrate(knowledge_of(store), CALIBRATION, k=4)
    with pytest.raises(ValueError, match=r"k must be a positive integer \(documents returned\)"):
        GatedVectorStoreRetriever(guard=guard, k=0)
    with pytest.raises(ValueError, match="on_block must be one of empty, raise"):
        GatedVectorStoreRetriever(guard=guard, on_block="drop")
