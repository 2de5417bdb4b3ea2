"""LangChain chat chains: GatedChatRetriever and gated_chat_chain on the {input, chat_history}
input of LangChain's history-aware chains, with langchain-core's in-memory store and its scripted
chat model (GenericFakeChatModel, a test double for the LLM: the test sees whether it ran)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.vectorstores import InMemoryVectorStore

from ragbound.adapters.langchain import DECISION_EVENT, GatedRetriever, QueryBlocked
from ragbound.adapters.langchain_chat import GatedChatRetriever, gated_chat_chain
from ragbound.errors import InputError
from ragbound.gate import Gate
from tests.adapters.conftest import ANSWERED, REJECTED, RULE
from tests.adapters.test_langchain import KnowledgeBaseEmbeddings
from tests.texts import TOPICS

FOLLOW_UP = "yes"  # says nothing alone: the question before it says what it asks
REPLY = "scripted model reply"


class Recorder(BaseCallbackHandler):
    """The decisions sent as custom events, the queries retrievers started with and the chat
    model's calls."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.queries: list[str] = []
        self.model_calls = 0

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name == DECISION_EVENT:
            self.events.append(data)

    def on_retriever_start(self, serialized: Any, query: Any, **kwargs: Any) -> None:
        self.queries.append(query)

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        self.model_calls += 1


@pytest.fixture(scope="module")
def gate(gated_kb_dir: Path) -> Gate:
    return Gate.load(gated_kb_dir, rule=RULE, context_k=3)


@pytest.fixture(scope="module")
def store(gate: Gate) -> InMemoryVectorStore:
    store = InMemoryVectorStore(KnowledgeBaseEmbeddings(gate))
    store.add_texts([text for sentences in TOPICS.values() for text in sentences])
    return store


def model() -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=(AIMessage(REPLY) for _ in itertools.count()))


def after(question: str, turn: str) -> dict[str, Any]:
    """The chain input of ``turn`` asked after ``question`` was answered."""
    return {"input": turn, "chat_history": [("human", question), ("ai", "Let me see.")]}


def test_a_follow_up_is_decided_with_the_history(gate: Gate) -> None:
    assert gate.decide(FOLLOW_UP).action == "abstain"  # alone
    inner = GatedRetriever(gate=gate)
    recorder = Recorder()
    docs = GatedChatRetriever(retriever=inner).invoke(
        after(ANSWERED, FOLLOW_UP), config={"callbacks": [recorder]}
    )
    decision = inner.last_decision
    assert decision is not None and decision.action == "answer"
    assert decision.conversation is not None and decision.conversation.read_turns == 2
    assert [d.page_content for d in docs] == [c.text for c in decision.neighbours]
    assert [e["test"]["query"] for e in recorder.events] == [decision.test.query]


def test_the_wrapped_retriever_searches_the_text_the_gate_searched(
    gate: Gate, store: InMemoryVectorStore
) -> None:
    recorder = Recorder()
    inner = GatedRetriever(gate=gate, retriever=store.as_retriever(search_kwargs={"k": 2}))
    chat = GatedChatRetriever(retriever=inner)
    docs = chat.invoke(after(ANSWERED, FOLLOW_UP), config={"callbacks": [recorder]})
    joined = inner.last_decision.test.query
    assert joined == f"{ANSWERED} {FOLLOW_UP}"  # the follow-up with the turn it follows
    assert recorder.queries[-1] == joined and len(docs) == 2
    assert asyncio.run(chat.ainvoke(after(ANSWERED, FOLLOW_UP))) == docs


def test_a_forbidden_turn_blocks_the_chat_retrieval(gate: Gate) -> None:
    chat = GatedChatRetriever(retriever=GatedRetriever(gate=gate))
    assert chat.invoke(after(ANSWERED, REJECTED)) == []
    assert chat.retriever.last_decision.action == "reject"
    raising = GatedChatRetriever(retriever=GatedRetriever(gate=gate, on_block="raise"))
    with pytest.raises(QueryBlocked) as caught:
        raising.invoke(after(ANSWERED, REJECTED))
    assert caught.value.decision.tripwires.forbidden


def test_the_chain_calls_the_llm_only_on_answer(gate: Gate) -> None:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "{context}"), MessagesPlaceholder("chat_history"), ("human", "{input}")]
    )
    bot = gated_chat_chain(
        GatedChatRetriever(retriever=GatedRetriever(gate=gate)),
        prompt | model() | StrOutputParser(),
        refusal="No.",
    )
    recorder = Recorder()
    answered = bot.invoke(after(ANSWERED, FOLLOW_UP), config={"callbacks": [recorder]})
    assert answered["answer"] == REPLY and recorder.model_calls == 1
    assert answered["ragbound_decision"]["action"] == "answer" and answered["context"]
    refused = bot.invoke(after(ANSWERED, REJECTED), config={"callbacks": [recorder]})
    assert (refused["answer"], refused["context"]) == ("No.", [])
    assert recorder.model_calls == 1  # the LLM did not run
    assert asyncio.run(bot.ainvoke(after(ANSWERED, REJECTED)))["answer"] == "No."


def test_a_history_aware_retriever_rephrases_only_on_answer(
    gate: Gate, store: InMemoryVectorStore
) -> None:
    """``search``: langchain-classic's create_history_aware_retriever, whose rephrasing LLM
    call runs only when the Gate answers."""
    chains = pytest.importorskip("langchain_classic.chains")
    rephrase = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("chat_history"), ("human", "Rephrase as one question: {input}")]
    )
    search = chains.create_history_aware_retriever(
        GenericFakeChatModel(messages=(AIMessage(ANSWERED) for _ in itertools.count())),
        store.as_retriever(search_kwargs={"k": 2}),
        rephrase,
    )
    chat = GatedChatRetriever(retriever=GatedRetriever(gate=gate), search=search)
    recorder = Recorder()
    docs = chat.invoke(after(ANSWERED, FOLLOW_UP), config={"callbacks": [recorder]})
    assert recorder.model_calls == 1 and recorder.queries[-1] == ANSWERED  # the rephrasing
    assert len(docs) == 2 and all(d.metadata["ragbound"]["action"] == "answer" for d in docs)
    assert chat.invoke(after(ANSWERED, REJECTED), config={"callbacks": [recorder]}) == []
    assert recorder.model_calls == 1
    qa = chains.create_retrieval_chain(chat, prompt_chain())
    assert qa.invoke(after(ANSWERED, FOLLOW_UP))["answer"] == REPLY


def prompt_chain() -> Any:
    prompt = ChatPromptTemplate.from_messages([("system", "{context}"), ("human", "{input}")])
    return (lambda x: {**x, "context": str(x["context"])}) | prompt | model() | StrOutputParser()


def test_an_input_without_the_question_is_refused(gate: Gate) -> None:
    chat = GatedChatRetriever(retriever=GatedRetriever(gate=gate))
    with pytest.raises(InputError, match="'input'"):
        chat.invoke({"question": ANSWERED})
    custom = GatedChatRetriever(
        retriever=GatedRetriever(gate=gate), input_key="question", history_key="history"
    )
    assert custom.invoke({"question": ANSWERED, "history": []})
