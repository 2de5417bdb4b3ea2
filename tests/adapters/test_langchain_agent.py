"""LangChain v1 agent middleware: a real create_agent graph, a scripted chat model.

The chat model is langchain-core's GenericFakeChatModel, a test double for the LLM: it replies
with the scripted messages in order, so a test can see whether the model ran at all.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents.middleware")

from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.memory import InMemorySaver

from ragbound.adapters.langchain import thread_conversation
from ragbound.adapters.langchain_agent import (
    DEFAULT_ABSTENTION,
    DEFAULT_CONTEXT_TEMPLATE,
    DEFAULT_REFUSAL,
    GateMiddleware,
)
from ragbound.gate import Decision, Gate
from tests.adapters.conftest import ABSTAINED, ANSWERED, REJECTED, RULE

SCRIPTED = "scripted model reply"
FOLLOW_UP = "yes"  # says nothing alone: the question before it says what it asks


class PromptRecorder(BaseCallbackHandler):
    """Keeps the messages each chat-model call was given."""

    def __init__(self) -> None:
        self.prompts: list[list[BaseMessage]] = []

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.prompts.extend(messages)


@pytest.fixture(scope="module")
def gate(gated_kb_dir: Path) -> Gate:
    return Gate.load(gated_kb_dir, rule=RULE, context_k=2)


def scripted_model(replies: int = 3) -> GenericFakeChatModel:
    # distinct messages: one object repeated keeps one id, and the thread would replace it
    return GenericFakeChatModel(messages=iter([AIMessage(SCRIPTED) for _ in range(replies)]))


def ask(agent: Any, query: str, **config: Any) -> dict[str, Any]:
    return agent.invoke({"messages": [{"role": "user", "content": query}]}, config=config or None)


@pytest.mark.parametrize(
    ("query", "action", "reply"),
    [(ABSTAINED, "abstain", DEFAULT_ABSTENTION), (REJECTED, "reject", DEFAULT_REFUSAL)],
    ids=["abstain", "reject"],
)
def test_a_blocked_turn_ends_before_the_model_runs(
    gate: Gate, query: str, action: str, reply: str
) -> None:
    recorder = PromptRecorder()
    agent = create_agent(scripted_model(), tools=[], middleware=[GateMiddleware(gate)])
    result = ask(agent, query, callbacks=[recorder])
    assert recorder.prompts == []  # the model never ran
    last = result["messages"][-1]
    assert isinstance(last, AIMessage) and last.text == reply
    assert last.response_metadata["ragbound"]["action"] == action
    decision = Decision.model_validate(result["ragbound_decision"])
    assert decision.action == action and decision.query == query


def test_an_answered_turn_runs_the_model_with_the_decision_in_state(gate: Gate) -> None:
    recorder = PromptRecorder()
    agent = create_agent(scripted_model(), tools=[], middleware=[GateMiddleware(gate)])
    result = ask(agent, ANSWERED, callbacks=[recorder])
    assert result["messages"][-1].text == SCRIPTED
    assert result["ragbound_decision"]["action"] == "answer"
    assert len(recorder.prompts) == 1
    assert all(m.type != "system" for m in recorder.prompts[0])  # no context unless asked


def test_the_context_template_puts_the_gates_chunks_in_the_system_prompt(gate: Gate) -> None:
    recorder = PromptRecorder()
    middleware = GateMiddleware(gate, context_template=DEFAULT_CONTEXT_TEMPLATE)
    agent = create_agent(
        scripted_model(), tools=[], system_prompt="Be brief.", middleware=[middleware]
    )
    result = ask(agent, ANSWERED, callbacks=[recorder])
    system = recorder.prompts[0][0]
    assert system.type == "system" and system.text.startswith("Be brief.\n\nAnswer from")
    for chunk in result["ragbound_decision"]["neighbours"]:
        assert chunk["text"] in system.text


def test_each_turn_of_a_thread_is_decided_with_the_turns_before_it(gate: Gate) -> None:
    """The thread's messages are the conversation: a follow-up that abstains alone is read
    with the question it follows, and every turn is the gate's decision on the same chat."""
    model = scripted_model()
    agent = create_agent(
        model, tools=[], middleware=[GateMiddleware(gate)], checkpointer=InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "t1"}}
    assert gate.decide(FOLLOW_UP).action == "abstain"  # alone
    results = [ask(agent, turn, **thread) for turn in (ANSWERED, FOLLOW_UP, REJECTED, ANSWERED)]
    decisions = [Decision.model_validate(r["ragbound_decision"]) for r in results]
    assert [d.action for d in decisions[:3]] == ["answer", "answer", "reject"]
    assert decisions[1].conversation is not None and decisions[1].conversation.read_turns == 2
    assert [d.conversation.turn for d in decisions if d.conversation] == [0, 1, 2, 3]
    messages: list[dict[str, str]] = []
    for turn, decision, result in zip(
        (ANSWERED, FOLLOW_UP, REJECTED, ANSWERED), decisions, results, strict=True
    ):
        messages.append({"role": "user", "content": turn})
        expected = gate.decide(messages)  # what the service decides from the same messages
        assert (decision.action, decision.test.query) == (expected.action, expected.test.query)
        messages.append({"role": "assistant", "content": result["messages"][-1].text})


def test_tool_results_and_tool_calls_are_left_out_of_the_conversation() -> None:
    thread = [
        SystemMessage("Be brief."),
        HumanMessage("How do bees make honey?"),
        AIMessage("", tool_calls=[{"name": "search", "args": {}, "id": "c1"}]),
        ToolMessage("a long retrieved page " * 50, tool_call_id="c1"),
        AIMessage("From nectar."),
        HumanMessage("yes"),
    ]
    assert thread_conversation(thread) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "How do bees make honey?"},
        {"role": "assistant", "content": "From nectar."},
        {"role": "user", "content": "yes"},
    ]
    assert thread_conversation([AIMessage("Hello!")]) is None  # no human turn: not decided


def test_async_agent_is_gated_too(gate: Gate) -> None:
    agent = create_agent(
        scripted_model(), tools=[], middleware=[GateMiddleware(gate, refusal="No.")]
    )
    result = asyncio.run(agent.ainvoke({"messages": [{"role": "user", "content": REJECTED}]}))
    assert result["messages"][-1].text == "No."
    assert result["ragbound_decision"]["tripwires"]["triggers"][0]["topic"] == "harm"


def test_an_unanswerable_turn_gets_its_own_text(gated_kb_dir: Path) -> None:
    """With the answerability test, a question in scope whose answer the chunks lack ends
    the turn with the unanswerable text, not the out-of-knowledge one."""
    from ragbound.detect import Guard
    from ragbound.knowledge import KnowledgeBase
    from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE

    kb = KnowledgeBase.load(gated_kb_dir)
    questions = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE
    guard = Guard.calibrate(kb, questions, k=4, alpha=0.1, answerability="coverage")
    middleware = GateMiddleware(Gate(guard), unanswerable="Not in my documents.")
    agent = create_agent(scripted_model(), tools=[], middleware=[middleware])
    result = ask(agent, "Which beekeeper invented the smoker in 1873?")
    assert result["messages"][-1].text == "Not in my documents."
    assert result["ragbound_decision"]["cause"] == "unanswerable"
    off_topic = ask(agent, ABSTAINED)
    assert off_topic["messages"][-1].text == DEFAULT_ABSTENTION
