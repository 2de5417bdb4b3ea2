"""LlamaIndex, natively: the guard on a real VectorStoreIndex retriever over the bees-and-trains
chunks (embedded by ragbound's bundled MiniLM), against ragbound's own folder."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import MetadataMode, QueryBundle, TextNode

from ragbound.adapters.llamaindex_retriever import GatedLlamaIndexRetriever, LlamaIndexKnowledge
from ragbound.detect import Guard
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from tests.adapters.native_texts import ABSTAINED, ANSWERED, CALIBRATION, CHECKED


class MiniLMEmbedding(BaseEmbedding):
    """LlamaIndex embeddings over the folder's MiniLM (real vectors), counting queries."""

    kb: Any
    queries: ClassVar[list[str]] = []

    def _get_query_embedding(self, query: str) -> list[float]:
        self.queries.append(query)
        return self.kb.embed([query])[0].tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self.kb.embed([text])[0].tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


class Counting(BaseRetriever):
    """The user's retriever, counting its retrievals."""

    def __init__(self, inner: BaseRetriever):
        super().__init__()
        self.inner = inner
        self.calls = 0

    def _retrieve(self, query_bundle: QueryBundle) -> list:
        self.calls += 1
        return self.inner.retrieve(query_bundle)


@pytest.fixture(scope="module")
def index(kb: KnowledgeBase) -> VectorStoreIndex:
    """The chunks as nodes, embedded as their text alone (their metadata kept out)."""
    nodes = [
        TextNode(id_=c.id, text=c.text, metadata={"n": i}, excluded_embed_metadata_keys=["n"])
        for i, c in enumerate(kb.chunks)
    ]
    return VectorStoreIndex(nodes, embed_model=MiniLMEmbedding(kb=kb))


@pytest.mark.parametrize("statistic", ["mss", "fisher", "avgknn"])
def test_cosine_scores_give_the_folders_p_values(
    kb: KnowledgeBase, index: VectorStoreIndex, statistic: str
) -> None:
    knowledge = LlamaIndexKnowledge(index.as_retriever(similarity_top_k=4), name="minilm")
    ours = Guard.calibrate(kb, CALIBRATION, k=4, alpha=0.1, statistic=statistic)
    theirs = Guard.calibrate(knowledge, CALIBRATION, k=4, alpha=0.1, statistic=statistic)
    mine, yours = ours.check_many(CHECKED), theirs.check_many(CHECKED)
    assert [v.p_value for v in yours] == pytest.approx([v.p_value for v in mine], abs=1e-9)


def test_the_guarded_retriever_retrieves_once_and_decides(index: VectorStoreIndex) -> None:
    users = Counting(index.as_retriever(similarity_top_k=5))
    guard = Guard.calibrate(LlamaIndexKnowledge(users, name="minilm"), CALIBRATION, k=4, alpha=0.1)
    guarded = GatedLlamaIndexRetriever(guard, k=3)
    calls, embedded = users.calls, len(MiniLMEmbedding.queries)
    nodes = guarded.retrieve(ANSWERED)
    assert guarded.last_decision is not None and guarded.last_decision.action == "answer"
    plain = index.as_retriever(similarity_top_k=3).retrieve(ANSWERED)
    assert [n.node.node_id for n in nodes] == [n.node.node_id for n in plain]
    assert [n.score for n in nodes] == pytest.approx([n.score for n in plain], rel=1e-6)
    assert nodes[0].node.metadata["ragbound"]["action"] == "answer"
    assert "ragbound" not in nodes[0].node.get_content(MetadataMode.LLM)
    assert guarded.retrieve(ABSTAINED) == [] and guarded.last_decision.action == "abstain"
    assert (users.calls - calls, len(MiniLMEmbedding.queries) - embedded) == (2, 3)  # + plain


def test_what_the_retriever_cannot_give_is_refused(index: VectorStoreIndex) -> None:
    ranked = LlamaIndexKnowledge(
        index.as_retriever(similarity_top_k=4), name="m", closeness="similarity"
    )
    with pytest.raises(InputError, match="statistic avgknn is refused"):
        Guard.calibrate(ranked, CALIBRATION, k=4, statistic="avgknn")
    guard = Guard.calibrate(ranked, CALIBRATION, k=4)
    with pytest.raises(InputError, match="returned 4 documents for k=6"):
        GatedLlamaIndexRetriever(guard, k=6).retrieve(ANSWERED)
    with pytest.raises(InputError, match="LlamaIndexKnowledge"):
        GatedLlamaIndexRetriever(Guard.calibrate(_other(index), CALIBRATION, k=4))


def _other(index: VectorStoreIndex) -> Any:
    from langchain_core.embeddings import FakeEmbeddings
    from langchain_core.vectorstores import InMemoryVectorStore

    from ragbound.adapters.langchain_store import VectorStoreKnowledge

    store = InMemoryVectorStore(FakeEmbeddings(size=8))
    store.add_texts([f"text {i}" for i in range(6)])
    return VectorStoreKnowledge(store, name="fake", closeness="similarity")
