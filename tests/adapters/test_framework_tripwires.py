"""Tripwires inside the user's framework store (RAR's design): documents flagged with
``ragbound_tripwire`` in langchain-core's real InMemoryVectorStore and in a real LlamaIndex
VectorStoreIndex; the guarded retriever's one search decides the test and the rule, with the
same verdicts as ragbound's own tripwire files, and never returns a tripwire."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from llama_index.core import VectorStoreIndex
from llama_index.core.schema import TextNode

from ragbound.adapters.langchain_store import (
    GatedVectorStoreRetriever,
    VectorStoreKnowledge,
    tripwire_documents,
)
from ragbound.adapters.llamaindex_retriever import GatedLlamaIndexRetriever, LlamaIndexKnowledge
from ragbound.detect import Guard
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.tripwires import TripwireTest, read_tripwires
from ragbound.tripwires.collection import tripwire_metadata
from tests.adapters.native_texts import CALIBRATION
from tests.adapters.test_langchain_store import CountingStore, MiniLMEmbeddings
from tests.adapters.test_llamaindex_retriever import Counting, MiniLMEmbedding
from tests.tripwires.tripwire_texts import (
    OFF_TOPIC,
    SAFE,
    UNSAFE,
    tripwired_copy,
    write_tripwire_file,
)

QUERIES = UNSAFE + SAFE + [OFF_TOPIC]


@pytest.fixture(scope="module")
def own(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Gate:
    """ragbound's own folder, calibrated alike, with the tripwires as files."""
    kb = tripwired_copy(minilm_kb_dir, tmp_path_factory.mktemp("own") / "kb")
    return Gate(Guard.calibrate(kb, CALIBRATION, k=4, alpha=0.1), TripwireTest(kb), context_k=3)


@pytest.fixture(scope="module")
def tripwires(tmp_path_factory: pytest.TempPathFactory) -> list:
    return read_tripwires(write_tripwire_file(tmp_path_factory.mktemp("t") / "t.jsonl"))


@pytest.fixture(scope="module")
def flagged_store(minilm_kb_dir: Path, tripwires: list) -> CountingStore:
    kb = KnowledgeBase.load(minilm_kb_dir)
    store = CountingStore(MiniLMEmbeddings(kb.embedder))
    store.add_texts([c.text for c in kb.chunks], ids=[c.id for c in kb.chunks])
    store.add_documents(tripwire_documents(tripwires))
    return store


@pytest.fixture(scope="module")
def plain_guard(minilm_kb_dir: Path) -> Guard:
    """The same store without tripwires, calibrated alike: the knowledge the test must see."""
    kb = KnowledgeBase.load(minilm_kb_dir)
    store = CountingStore(MiniLMEmbeddings(kb.embedder))
    store.add_texts([c.text for c in kb.chunks], ids=[c.id for c in kb.chunks])
    return Guard.calibrate(VectorStoreKnowledge(store, name="minilm"), CALIBRATION, k=4, alpha=0.1)


def _same_tripwire_verdict(mine, theirs) -> None:
    assert [t.id for t in mine.triggers] == [t.id for t in theirs.triggers]
    np.testing.assert_allclose(
        [t.similarity for t in mine.triggers], [t.similarity for t in theirs.triggers], atol=1e-5
    )
    assert mine.tripwire_set == theirs.tripwire_set
    assert mine.floor.value == pytest.approx(theirs.floor.value, abs=1e-5)


def _retriever(store: CountingStore, tripwires: list | None) -> GatedVectorStoreRetriever:
    knowledge = VectorStoreKnowledge(store, name="minilm")
    guard = Guard.calibrate(knowledge, CALIBRATION, k=4, alpha=0.1)
    return GatedVectorStoreRetriever(guard=guard, k=3, tripwires=tripwires)


def test_one_search_decides_like_ragbounds_own_tripwire_files(
    flagged_store: CountingStore, tripwires: list, own: Gate, plain_guard: Guard
) -> None:
    retriever = _retriever(flagged_store, tripwires)
    ours = own.decide_many(QUERIES)
    for query, expected in zip(QUERIES, ours, strict=True):
        documents = retriever.invoke(query)
        decision = retriever.last_decision
        assert decision.action == expected.action, query
        # the tripwires change nothing in the test (ragbound's folder and the store may
        # break a tie between a query and a calibration question apart: compare like with like)
        assert decision.test.p_value == plain_guard.check(query).p_value
        _same_tripwire_verdict(decision.tripwires, expected.tripwires)
        assert not any("ragbound_tripwire" in d.metadata for d in documents)
    assert {d.action for d in ours} == {"reject", "answer", "abstain"}


def test_one_search_per_query_and_tripwires_are_never_knowledge(
    flagged_store: CountingStore, tripwires: list
) -> None:
    retriever = _retriever(flagged_store, tripwires)
    retriever.invoke(SAFE[0])  # the tripwire floor is calibrated at the first decision, once
    for query in (SAFE[0], UNSAFE[0], OFF_TOPIC):
        before = flagged_store.searches
        retriever.invoke(query)
        assert flagged_store.searches == before + 1
    knowledge = retriever.guard.kb
    assert not any(c.text in {t.text for t in tripwires} for c in knowledge.chunks)


def test_without_a_declared_set_flagged_documents_are_still_not_returned(
    flagged_store: CountingStore,
) -> None:
    retriever = _retriever(flagged_store, None)
    documents = retriever.invoke(UNSAFE[1])
    assert retriever.last_decision.tripwires is None
    assert not any("ragbound_tripwire" in d.metadata for d in documents)


def flagged_index(kb: KnowledgeBase, tripwires: list) -> VectorStoreIndex:
    """A LlamaIndex VectorStoreIndex over the folder's chunks and the tripwire nodes."""
    nodes = [TextNode(id_=c.id, text=c.text) for c in kb.chunks] + [
        TextNode(
            id_=t.id,
            text=t.text,
            metadata=tripwire_metadata(t),
            excluded_embed_metadata_keys=list(tripwire_metadata(t)),
        )
        for t in tripwires
    ]
    return VectorStoreIndex(nodes, embed_model=MiniLMEmbedding(kb=kb))


def test_a_llamaindex_retriever_finds_the_tripwire_nodes_in_its_one_retrieval(
    minilm_kb_dir: Path, tripwires: list, own: Gate
) -> None:
    kb = KnowledgeBase.load(minilm_kb_dir)
    retriever = Counting(flagged_index(kb, tripwires).as_retriever(similarity_top_k=10))
    knowledge = LlamaIndexKnowledge(retriever, name="minilm")
    guard = Guard.calibrate(knowledge, CALIBRATION, k=4, alpha=0.1)
    guarded = GatedLlamaIndexRetriever(
        guard, k=3, tripwires=tripwires, embed_model=MiniLMEmbedding(kb=kb)
    )
    guarded.decide(QUERIES[0])  # the tripwire floor is calibrated at the first decision, once
    for query, expected in zip(QUERIES, own.decide_many(QUERIES), strict=True):
        before = retriever.calls
        nodes_returned = guarded.retrieve(query)
        assert retriever.calls == before + 1
        decision = guarded.last_decision
        assert decision.action == expected.action, query
        _same_tripwire_verdict(decision.tripwires, expected.tripwires)
        assert not any("ragbound_tripwire" in n.node.metadata for n in nodes_returned)


def flagged_haystack_guard(kb: KnowledgeBase, tripwires: list) -> Guard:
    """A guard calibrated on a Haystack in-memory store (cosine) holding the folder's chunks
    and the tripwire documents, searched by a CountingRetriever."""
    from haystack import Document
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from ragbound.adapters.haystack_retriever import (
        HaystackKnowledge,
        RagboundDocumentEmbedder,
        tripwire_documents,
    )
    from tests.adapters.test_haystack_retriever import CountingEmbedder, CountingRetriever

    store = InMemoryDocumentStore(embedding_similarity_function="cosine")
    documents = [Document(id=c.id, content=c.text) for c in kb.chunks] + tripwire_documents(
        tripwires
    )
    store.write_documents(RagboundDocumentEmbedder(kb.embedder).run(documents)["documents"])
    retriever = CountingRetriever(store)
    knowledge = HaystackKnowledge(retriever, CountingEmbedder(kb.embedder), name="minilm")
    return Guard.calibrate(knowledge, CALIBRATION, k=4, alpha=0.1)


def test_a_haystack_retriever_finds_the_tripwire_documents_in_its_one_search(
    minilm_kb_dir: Path, tripwires: list, own: Gate
) -> None:
    from ragbound.adapters.haystack_retriever import GatedHaystackRetriever
    from tests.adapters.test_haystack_retriever import CountingRetriever

    kb = KnowledgeBase.load(minilm_kb_dir)
    guarded = GatedHaystackRetriever(
        flagged_haystack_guard(kb, tripwires), k=3, tripwires=tripwires
    )
    guarded.decide(QUERIES[0])  # the tripwire floor is calibrated at the first decision, once
    for query, expected in zip(QUERIES, own.decide_many(QUERIES), strict=True):
        before = len(CountingRetriever.top_ks)
        out = guarded.run(query)
        assert len(CountingRetriever.top_ks) == before + 1
        decision = guarded.last_decision
        assert decision.action == expected.action, query
        _same_tripwire_verdict(decision.tripwires, expected.tripwires)
        assert not any("ragbound_tripwire" in d.meta for d in out["documents"])
