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
from tests.adapters.test_framework_tripwires import (
    flagged_haystack_guard,
    flagged_index,
    flagged_store,
    tripwires,
)
from tests.adapters.test_haystack_retriever import cosine_store, embedder, knowledge_of
from tests.adapters.test_langchain_store import embeddings, store
from tests.adapters.test_langchain_store import knowledge_of as store_knowledge
from tests.adapters.test_llamaindex_retriever import MiniLMEmbedding, index
from tests.texts import MORE_IN_KNOWLEDGE
from tests.tripwires.tripwire_texts import UNSAFE

# fixtures used here
__all__ = ["cosine_store", "embedder", "embeddings", "flagged_store", "index", "store", "tripwires"]

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


# ------------------------------------------- a refused turn kept from the LLM, one search each
# the one-search retrievers meet the tripwires with the turn decided only (their Gate drops no
# earlier turn): each keeps the turns it refused and leaves them out of what the LLM gets
SAFE_CHAT = [ANSWERED, UNSAFE[0], *MORE_IN_KNOWLEDGE[13:17]]


def assert_kept_from_the_llm(actions: list[str], calls: list[str]) -> None:
    """The unsafe turn refused; some later turn answered, its LLM call holding the first
    turn and never the unsafe one."""
    assert actions[:2] == ["answer", "reject"] and "answer" in actions[2:], actions
    assert calls and all(UNSAFE[0] not in call for call in calls)
    assert ANSWERED in calls[-1]


def test_a_llamaindex_retriever_keeps_a_refused_turn_from_the_chat_llm(
    minilm_kb_dir: Any, tripwires: list
) -> None:
    from tests.adapters.test_forbidden_turns import PromptsMockLLM

    kb = KnowledgeBase.load(minilm_kb_dir)
    knowledge = LlamaIndexKnowledge(
        flagged_index(kb, tripwires).as_retriever(similarity_top_k=10), name="minilm"
    )
    guard = Guard.calibrate(knowledge, CALIBRATION, k=4, alpha=0.1)
    memory = ChatMemoryBuffer.from_defaults(token_limit=100_000)
    retriever = GatedLlamaIndexRetriever(
        guard, k=2, tripwires=tripwires, embed_model=MiniLMEmbedding(kb=kb), memory=memory
    )
    llm = PromptsMockLLM(max_tokens=4)
    engine = ContextChatEngine.from_defaults(retriever, memory=retriever.upstream_memory(), llm=llm)
    actions = []
    for turn in SAFE_CHAT:
        engine.chat(turn)
        actions.append(retriever.last_decision.action)
    assert_kept_from_the_llm(actions, llm._prompts)


def test_a_haystack_retriever_forwards_the_history_without_a_refused_turn(
    minilm_kb_dir: Any, tripwires: list
) -> None:
    kb = KnowledgeBase.load(minilm_kb_dir)
    retriever = GatedHaystackRetriever(
        flagged_haystack_guard(kb, tripwires), k=2, tripwires=tripwires
    )
    history: list[ChatMessage] = []
    actions, calls = [], []
    for turn in SAFE_CHAT:
        out = retriever.run(turn, history=list(history))
        actions.append(out["decision"].action)
        if "history" in out:  # what the prompt builder gets: the history and the turn
            calls.append("\n".join([*(m.text or "" for m in out["history"]), turn]))
        history += [ChatMessage.from_user(turn), ChatMessage.from_assistant(SAID)]
    assert_kept_from_the_llm(actions, calls)


def test_a_langchain_store_retriever_keeps_a_refused_turn_from_the_answer_chain(
    flagged_store: Any, tripwires: list
) -> None:
    from langchain_core.runnables import RunnableLambda

    from ragbound.adapters.langchain_chat import gated_chat_chain

    guard = Guard.calibrate(store_knowledge(flagged_store), CALIBRATION, k=4, alpha=0.1)
    inner = GatedVectorStoreRetriever(guard=guard, k=2, tripwires=tripwires)
    calls: list[str] = []

    def llm(inputs: dict[str, Any]) -> str:  # the answer chain: what it was handed
        calls.append("\n".join([*(text for _, text in inputs["chat_history"]), inputs["input"]]))
        return SAID

    bot = gated_chat_chain(GatedChatRetriever(retriever=inner), RunnableLambda(llm))
    history: list[tuple[str, str]] = []
    actions = []
    for turn in SAFE_CHAT:
        out = bot.invoke({"input": turn, "chat_history": history})
        actions.append(out["ragbound_decision"]["action"])
        history = [*history, ("human", turn), ("ai", out["answer"])]
    assert_kept_from_the_llm(actions, calls)
