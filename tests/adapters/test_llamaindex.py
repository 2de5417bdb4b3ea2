"""LlamaIndex adapter: GatePostprocessor in a real VectorStoreIndex and query engine.

The index embeds with the knowledge base's own MiniLM model (real vectors). The query engine's
LLM is llama-index-core's MockLLM, a test double: it echoes its prompt, so the test sees which
node texts reached the LLM.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.schema import MetadataMode, QueryBundle, TextNode
from pydantic import ValidationError

from ragbound.adapters.llamaindex import GatePostprocessor, QueryBlocked
from ragbound.errors import InputError
from ragbound.gate import Gate
from tests.adapters.conftest import ABSTAINED, ANSWERED, REJECTED, RULE
from tests.texts import TOPICS


class KnowledgeBaseEmbedding(BaseEmbedding):
    """LlamaIndex embeddings backed by the knowledge base's own MiniLM model."""

    gate: Gate

    def _get_query_embedding(self, query: str) -> list[float]:
        return self.gate.guard.kb.embed([query])[0].tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_query_embedding(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


@pytest.fixture(scope="module")
def gate(gated_kb_dir: Path) -> Gate:
    return Gate.load(gated_kb_dir, rule=RULE, context_k=2)


@pytest.fixture(scope="module")
def index(gate: Gate) -> VectorStoreIndex:
    texts = [text for sentences in TOPICS.values() for text in sentences]
    nodes = [TextNode(text=text, metadata={"n": i}) for i, text in enumerate(texts)]
    return VectorStoreIndex(nodes, embed_model=KnowledgeBaseEmbedding(gate=gate))


def engine(index: VectorStoreIndex, postprocessor: GatePostprocessor):
    return index.as_query_engine(
        llm=MockLLM(), similarity_top_k=2, node_postprocessors=[postprocessor]
    )


@pytest.mark.parametrize(
    ("query", "action"), [(ABSTAINED, "abstain"), (REJECTED, "reject")], ids=["abstain", "reject"]
)
def test_a_blocked_query_reaches_no_node_and_no_llm(
    gate: Gate, index: VectorStoreIndex, query: str, action: str
) -> None:
    postprocessor = GatePostprocessor(gate=gate)
    response = engine(index, postprocessor).query(query)
    assert response.source_nodes == []
    assert str(response) == "Empty Response"  # the synthesizer had nothing to send the LLM
    decision = postprocessor.last_decision
    assert decision is not None and decision.action == action and decision.query == query


def test_an_answered_query_passes_the_retrieved_nodes_annotated(
    gate: Gate, index: VectorStoreIndex
) -> None:
    postprocessor = GatePostprocessor(gate=gate)
    response = engine(index, postprocessor).query(ANSWERED)
    plain = index.as_retriever(similarity_top_k=2).retrieve(ANSWERED)
    assert [n.node.node_id for n in response.source_nodes] == [n.node.node_id for n in plain]
    assert [n.score for n in response.source_nodes] == pytest.approx([n.score for n in plain])
    for node in response.source_nodes:
        summary = node.node.metadata["ragbound"]
        assert summary["action"] == "answer" and "neighbours" not in summary
        assert "ragbound" not in node.node.get_content(MetadataMode.LLM)
        assert node.node.get_content() in str(response)  # the MockLLM echoed it
    assert all("ragbound" not in n.node.metadata for n in plain)  # the index's nodes untouched
    assert postprocessor.last_decision.test.p_value == summary["test"]["p_value"]


def test_annotate_off_passes_the_nodes_themselves(gate: Gate, index: VectorStoreIndex) -> None:
    nodes = index.as_retriever(similarity_top_k=2).retrieve(ANSWERED)
    kept = GatePostprocessor(gate=gate, annotate=False).postprocess_nodes(nodes, query_str=ANSWERED)
    assert kept == nodes


def test_raise_mode_and_the_async_path(gate: Gate, index: VectorStoreIndex) -> None:
    nodes = index.as_retriever(similarity_top_k=2).retrieve(REJECTED)
    postprocessor = GatePostprocessor(gate=gate, on_block="raise")
    with pytest.raises(QueryBlocked, match="reject") as caught:
        postprocessor.postprocess_nodes(nodes, query_bundle=QueryBundle(REJECTED))
    assert caught.value.decision.tripwires.triggers[0].topic == "harm"
    kept = asyncio.run(GatePostprocessor(gate=gate).apostprocess_nodes(nodes, query_str=ABSTAINED))
    assert kept == []


def test_it_needs_the_query_and_a_known_on_block(gate: Gate) -> None:
    with pytest.raises(InputError, match="needs the query"):
        GatePostprocessor(gate=gate).postprocess_nodes([])
    with pytest.raises(ValidationError, match="on_block must be one of"):
        GatePostprocessor(gate=gate, on_block="drop")
