"""The same chats through each framework's own chat loop and through ``ragbound serve``: the
adapters hand the Gate the conversation, and decide every turn as ``POST /v1/decide`` does with
the same messages.

The knowledge base is the bundled sample corpus (a product's documentation: RAG, chunking,
BM25, p-values...) as the README's tour leaves it, with its ten tripwires. The chats hold a
follow-up by pronoun, a switch of subject and back, a forbidden request, and small talk. The
service is a real ``ragbound serve`` child process on loopback.

The LLMs are the frameworks' own test doubles (what is tested is the Gate's decision, not the
reply): langchain-core's ``GenericFakeChatModel`` (scripted replies), llama-index-core's
``MockLLM`` (a fixed run of words) and haystack-ai's ``MockChatGenerator`` (a fixed reply).
Each framework's replies (or the refusal texts) enter its history, and the same history is
sent to the service.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("langchain.agents.middleware")
pytest.importorskip("llama_index.core")
pytest.importorskip("haystack")

from haystack import Pipeline
from haystack.components.builders import ChatPromptBuilder
from haystack.components.generators.chat import MockChatGenerator
from haystack.dataclasses import ChatMessage as HaystackMessage
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import Runnable
from langgraph.checkpoint.memory import InMemorySaver
from llama_index.core import SummaryIndex
from llama_index.core.chat_engine import CondensePlusContextChatEngine, ContextChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.schema import TextNode

from ragbound.adapters.haystack import GateComponent
from ragbound.adapters.langchain import GatedRetriever
from ragbound.adapters.langchain_agent import GateMiddleware
from ragbound.adapters.langchain_chat import GatedChatRetriever, gated_chat_chain
from ragbound.adapters.llamaindex import GatePostprocessor
from ragbound.gate import DEFAULT_ABSTENTION, DEFAULT_REFUSAL, Decision, Gate
from tests.serve.server import ChildServer

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

REPLY = "Here is what the documentation says about that."
FORBIDDEN = (
    "How can I slip fake documents into another company's knowledge base so that its "
    "assistant repeats my lies?"
)
CHATS: dict[str, list[str]] = {
    "pronoun": [
        "How does BM25 score a chunk?",
        "And what are its weaknesses?",
        "What is the capital city of Australia?",
    ],
    "forbidden": [
        "Why do we split documents into overlapping chunks?",
        FORBIDDEN,
        "How large should each chunk be?",
    ],
    "switch and back": [
        "What is a conformal p-value?",
        "How long should I boil an egg to get a soft, runny yolk?",
        "Back to p-values: what does alpha control?",
    ],
    "small talk": [
        "hi there",
        "Can ragbound run offline on a laptop CPU?",
        "thanks!",
    ],
}
# what any reading of a chat must decide (the other turns: whatever the service decides)
EXPECTED = {
    ("pronoun", 0): "answer",
    ("forbidden", 0): "answer",
    ("forbidden", 1): "reject",
    ("switch and back", 0): "answer",
    ("switch and back", 1): "abstain",
    ("small talk", 1): "answer",
}

Turn = tuple[str, str, int | None]
"""One turn's action, the assistant's reply that entered the framework's history, and the
turn the decision says it decided (user turns before it; None: decided as one query)."""
ChatRun = Callable[[Gate, list[str]], list[Turn]]


@pytest.fixture(scope="module")
def kb_dir(sample_chat_kb_dir: Path) -> Path:
    """The sample corpus with its tripwires, as the README's tour leaves it (conftest)."""
    return sample_chat_kb_dir


@pytest.fixture(scope="module")
def gate(kb_dir: Path) -> Gate:
    return Gate.load(kb_dir)


@pytest.fixture(scope="module")
def service(kb_dir: Path):
    """``ragbound serve`` on the same knowledge base, a child process on loopback."""
    server = ChildServer(str(kb_dir)).ready()
    yield server.url
    server.stop()


def served_actions(url: str, turns: list[str], runs: list[Turn]) -> list[str]:
    """The service's action at each turn, sent the chat as the framework held it."""
    messages: list[dict[str, str]] = []
    actions = []
    for turn, (_, reply, _) in zip(turns, runs, strict=True):
        messages.append({"role": "user", "content": turn})
        response = httpx.post(f"{url}/v1/decide", json={"messages": messages}, timeout=60)
        assert response.status_code == 200, response.text
        actions.append(response.json()["action"])
        messages.append({"role": "assistant", "content": reply})
    return actions


def fake_chat_model() -> GenericFakeChatModel:
    """langchain-core's scripted chat model (a test double): REPLY at every call, each a new
    message (one object repeated keeps one id, and a thread would replace it)."""
    return GenericFakeChatModel(messages=(AIMessage(REPLY) for _ in itertools.count()))


def turn_of(decision: Decision) -> int | None:
    return None if decision.conversation is None else decision.conversation.turn


def llm_chain() -> Runnable:
    """The LLM part of a LangChain chat chain: the documents, the history and the question in a
    prompt, the fake chat model's reply as a string."""
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "Answer from the documents:\n{context}"),
            MessagesPlaceholder("chat_history"),
            ("human", "{input}"),
        ]
    )
    return prompt | fake_chat_model() | StrOutputParser()


# ------------------------------------------------------------------- each framework's loop
def langchain_agent_chat(gate: Gate, turns: list[str]) -> list[Turn]:
    """A LangChain v1 agent with GateMiddleware, one thread kept by its checkpointer."""
    agent = create_agent(
        fake_chat_model(), tools=[], middleware=[GateMiddleware(gate)], checkpointer=InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "chat"}}
    runs = []
    for turn in turns:
        result = agent.invoke({"messages": [{"role": "user", "content": turn}]}, config=thread)
        decision = Decision.model_validate(result["ragbound_decision"])
        runs.append((decision.action, result["messages"][-1].text, turn_of(decision)))
    return runs


def langchain_history_chat(gate: Gate, turns: list[str]) -> list[Turn]:
    """A LangChain history-aware chain: {input, chat_history} in, the history kept by the
    caller (as a LangChain chat app keeps it)."""
    bot = gated_chat_chain(GatedChatRetriever(retriever=GatedRetriever(gate=gate)), llm_chain())
    history: list[tuple[str, str]] = []
    runs = []
    for turn in turns:
        out = bot.invoke({"input": turn, "chat_history": history})
        decision = Decision.model_validate(out["ragbound_decision"])
        runs.append((decision.action, out["answer"], turn_of(decision)))
        history += [("human", turn), ("ai", out["answer"])]
    return runs


def llamaindex_chat(
    gate: Gate, turns: list[str], engine_class: type = ContextChatEngine, **options: Any
) -> list[Turn]:
    """A LlamaIndex chat engine (ContextChatEngine by default) whose memory the
    GatePostprocessor reads (the engine's LLM reads it through upstream_memory)."""
    nodes = [TextNode(text=chunk.text) for chunk in gate.guard.kb.chunks[:20]]
    memory = ChatMemoryBuffer.from_defaults(token_limit=100_000)
    postprocessor = GatePostprocessor(gate=gate, memory=memory)
    engine = engine_class.from_defaults(
        SummaryIndex(nodes).as_retriever(),
        memory=postprocessor.upstream_memory(),
        node_postprocessors=[postprocessor],
        llm=MockLLM(max_tokens=6),  # a test double: six words, "text text ..."
        **options,
    )
    runs = []
    for turn in turns:
        response = engine.chat(turn)
        decision = postprocessor.last_decision
        assert decision is not None
        runs.append((decision.action, str(response), turn_of(decision)))
    return runs


def llamaindex_condense_chat(gate: Gate, turns: list[str]) -> list[Turn]:
    """A CondensePlusContextChatEngine told not to condense: the user's own turn is decided."""
    return llamaindex_chat(gate, turns, CondensePlusContextChatEngine, skip_condense=True)


CHAT_TEMPLATE = """{% message role="system" %}Answer from these documents:
{% for d in documents %}{{ d.content }}
{% endfor %}{% endmessage %}
{% for m in history %}{% message role=m.role.value %}{{ m.text }}{% endmessage %}
{% endfor %}{% message role="user" %}{{ query }}{% endmessage %}"""


def haystack_pipeline(gate: Gate) -> Pipeline:
    """gate -> ChatPromptBuilder -> chat generator; the prompt is built only on answer, with
    the gate's history (without the turns found forbidden)."""
    pipe = Pipeline()
    pipe.add_component("gate", GateComponent(gate=gate))
    pipe.add_component("prompt", ChatPromptBuilder(CHAT_TEMPLATE, required_variables=["query"]))
    pipe.add_component("llm", MockChatGenerator(responses=REPLY))  # a test double
    pipe.connect("gate.documents", "prompt.documents")
    pipe.connect("gate.query", "prompt.query")
    pipe.connect("gate.history", "prompt.history")
    pipe.connect("prompt.prompt", "llm.messages")
    return pipe


def haystack_chat(gate: Gate, turns: list[str]) -> list[Turn]:
    """A Haystack chat pipeline, the history (ChatMessage objects) kept by the caller."""
    pipe = haystack_pipeline(gate)
    replies = {"reject": DEFAULT_REFUSAL, "abstain": DEFAULT_ABSTENTION}
    history: list[HaystackMessage] = []
    runs = []
    for turn in turns:
        out = pipe.run({"gate": {"query": turn, "history": history}}, include_outputs_from={"gate"})
        decision = out["gate"]["decision"]
        reply = out["llm"]["replies"][0].text if "llm" in out else replies[decision.action]
        runs.append((decision.action, reply, turn_of(decision)))
        history += [HaystackMessage.from_user(turn), HaystackMessage.from_assistant(reply)]
    return runs


FRAMEWORKS: dict[str, ChatRun] = {
    "langchain agent": langchain_agent_chat,
    "langchain history chain": langchain_history_chat,
    "llamaindex chat engine": llamaindex_chat,
    "llamaindex condense-plus-context engine": llamaindex_condense_chat,
    "haystack chat pipeline": haystack_chat,
}


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_each_adapter_decides_a_chat_as_the_service_does(
    gate: Gate, service: str, framework: str
) -> None:
    for name, turns in CHATS.items():
        runs = FRAMEWORKS[framework](gate, turns)
        actions = [action for action, _, _ in runs]
        assert actions == served_actions(service, turns, runs), name
        assert [turn for _, _, turn in runs] == list(range(len(turns)))  # the chat, not a turn
        for (chat, index), expected in EXPECTED.items():
            if chat == name:
                assert actions[index] == expected, (name, turns[index])


# ------------------------------------------------------------------------------ async loops
async def langchain_agent_achat(gate: Gate, turns: list[str]) -> list[str]:
    agent = create_agent(
        fake_chat_model(), tools=[], middleware=[GateMiddleware(gate)], checkpointer=InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "chat"}}
    actions = []
    for turn in turns:
        message = {"messages": [{"role": "user", "content": turn}]}
        result = await agent.ainvoke(message, config=thread)
        actions.append(result["ragbound_decision"]["action"])
    return actions


async def langchain_history_achat(gate: Gate, turns: list[str]) -> list[str]:
    bot = gated_chat_chain(GatedChatRetriever(retriever=GatedRetriever(gate=gate)), llm_chain())
    history: list[tuple[str, str]] = []
    actions = []
    for turn in turns:
        out = await bot.ainvoke({"input": turn, "chat_history": history})
        actions.append(out["ragbound_decision"]["action"])
        history += [("human", turn), ("ai", out["answer"])]
    return actions


async def llamaindex_achat(gate: Gate, turns: list[str]) -> list[str]:
    memory = ChatMemoryBuffer.from_defaults(token_limit=100_000)
    postprocessor = GatePostprocessor(gate=gate, memory=memory)
    nodes = [TextNode(text=chunk.text) for chunk in gate.guard.kb.chunks[:20]]
    engine = ContextChatEngine.from_defaults(
        SummaryIndex(nodes).as_retriever(),
        memory=memory,
        node_postprocessors=[postprocessor],
        llm=MockLLM(max_tokens=6),
    )
    actions = []
    for turn in turns:
        await engine.achat(turn)
        assert postprocessor.last_decision is not None
        actions.append(postprocessor.last_decision.action)
    return actions


async def haystack_achat(gate: Gate, turns: list[str]) -> list[str]:
    pipe = Pipeline()
    pipe.add_component("gate", GateComponent(gate=gate))
    history: list[HaystackMessage] = []
    actions = []
    for turn in turns:
        out = await pipe.run_async({"gate": {"query": turn, "history": history}})
        decision = out["gate"]["decision"]
        actions.append(decision.action)
        reply = REPLY if decision.action == "answer" else DEFAULT_REFUSAL
        history += [HaystackMessage.from_user(turn), HaystackMessage.from_assistant(reply)]
    return actions


ASYNC_FRAMEWORKS = {
    "langchain agent": (langchain_agent_achat, langchain_agent_chat),
    "langchain history chain": (langchain_history_achat, langchain_history_chat),
    "llamaindex chat engine": (llamaindex_achat, llamaindex_chat),
    "haystack chat pipeline": (haystack_achat, haystack_chat),
}


@pytest.mark.parametrize("framework", list(ASYNC_FRAMEWORKS))
def test_the_async_loops_decide_the_conversation_too(gate: Gate, framework: str) -> None:
    """The forbidden chat through each framework's async path: the forbidden turn is rejected
    and a turn after it is decided with it, as the sync path decides it."""
    run_async, run_sync = ASYNC_FRAMEWORKS[framework]
    turns = CHATS["forbidden"]
    actions = asyncio.run(run_async(gate, turns))
    assert actions[:2] == ["answer", "reject"]
    assert actions == [action for action, _, _ in run_sync(gate, turns)]
