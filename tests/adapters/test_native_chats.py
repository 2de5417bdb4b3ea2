"""The retrievers on the user's own store decide chats: GatedVectorStoreRetriever under a
GatedChatRetriever, GatedLlamaIndexRetriever in a ContextChatEngine (its memory read), and
GatedHaystackRetriever with a history. Each decides a follow-up with the question it follows,
as ragbound's own folder (the same chunks, the same calibration) decides the same messages.

The stores are the frameworks' real in-memory ones over the folder's chunks, embedded by its
MiniLM; the chat engine's LLM is llama-index-core's MockLLM (a test double, a fixed run of
words)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")
pytest.importorskip("haystack")

from haystack.dataclasses import ChatMessage
from llama_index.core import VectorStoreIndex
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.memory import ChatMemoryBuffer

from ragbound.adapters.haystack_retriever import GatedHaystackRetriever
from ragbound.adapters.langchain_chat import GatedChatRetriever
from ragbound.adapters.langchain_store import GatedVectorStoreRetriever
from ragbound.adapters.llamaindex_retriever import GatedLlamaIndexRetriever, LlamaIndexKnowledge
from ragbound.detect import Guard
from ragbound.gate import Decision, Gate
from ragbound.knowledge import KnowledgeBase
from tests.adapters.native_texts import ANSWERED, CALIBRATION
from tests.adapters.test_haystack_retriever import cosine_store, embedder, knowledge_of
from tests.adapters.test_langchain_store import embeddings, store
from tests.adapters.test_langchain_store import knowledge_of as store_knowledge
from tests.adapters.test_llamaindex_retriever import index

__all__ = ["cosine_store", "embedder", "embeddings", "index", "store"]  # fixtures used here

FOLLOW_UP = "yes"  # says nothing alone: the question before it says what it asks
SAID = "Let me see."


def chat(reply: str = SAID) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": ANSWERED},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": FOLLOW_UP},
    ]


@pytest.fixture(scope="module")
def folder_gate(kb: KnowledgeBase) -> Gate:
    return Gate(Guard.calibrate(kb, CALIBRATION, k=4, alpha=0.1))


def assert_read_alike(decision: Decision | None, expected: Decision) -> None:
    """The same action, from the same read text (the follow-up joined with its question)."""
    assert decision is not None and decision.conversation is not None
    assert decision.conversation.read_turns == expected.conversation.read_turns == 2
    assert (decision.action, decision.test.query) == (expected.action, expected.test.query)
    assert decision.test.p_value == pytest.approx(expected.test.p_value)


def test_a_langchain_store_retriever_decides_the_chat(folder_gate: Gate, store: Any) -> None:
    guard = Guard.calibrate(store_knowledge(store), CALIBRATION, k=4, alpha=0.1)
    inner = GatedVectorStoreRetriever(guard=guard, k=2)
    history = [("human", ANSWERED), ("ai", SAID)]
    docs = GatedChatRetriever(retriever=inner).invoke({"input": FOLLOW_UP, "chat_history": history})
    assert_read_alike(inner.last_decision, folder_gate.decide(chat()))
    assert len(docs) == 2 and docs[0].metadata["ragbound"]["action"] == "answer"


def test_a_llamaindex_retriever_in_a_chat_engine_reads_its_memory(
    folder_gate: Gate, index: VectorStoreIndex
) -> None:
    knowledge = LlamaIndexKnowledge(index.as_retriever(similarity_top_k=4), name="minilm")
    guard = Guard.calibrate(knowledge, CALIBRATION, k=4, alpha=0.1)
    memory = ChatMemoryBuffer.from_defaults(token_limit=100_000)
    retriever = GatedLlamaIndexRetriever(guard, k=2, memory=memory)
    engine = ContextChatEngine.from_defaults(retriever, memory=memory, llm=MockLLM(max_tokens=4))
    reply = str(engine.chat(ANSWERED))
    response = engine.chat(FOLLOW_UP)
    assert_read_alike(retriever.last_decision, folder_gate.decide(chat(reply)))
    assert len(response.source_nodes) == 2


def test_a_haystack_retriever_decides_the_history(
    kb: KnowledgeBase, folder_gate: Gate, cosine_store: Any, embedder: Any
) -> None:
    guard = Guard.calibrate(knowledge_of(cosine_store, embedder), CALIBRATION, k=4, alpha=0.1)
    retriever = GatedHaystackRetriever(guard, k=2)
    history = [ChatMessage.from_user(ANSWERED), ChatMessage.from_assistant(SAID)]
    out = retriever.run(FOLLOW_UP, history=history)
    assert_read_alike(out["decision"], folder_gate.decide(chat()))
    assert out["query"] == FOLLOW_UP and len(out["documents"]) == 2
