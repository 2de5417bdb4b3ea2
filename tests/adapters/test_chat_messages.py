"""A framework's chat history as the messages the Gate decides, and the rows of it that may go
to the LLM (no framework needed)."""

from __future__ import annotations

from pathlib import Path

from ragbound.adapters._chat import Refused, chat_messages, last_user_index, upstream_rows
from ragbound.conversations.model import MAX_CONVERSATION_CHARS, MAX_MESSAGES, conversation
from tests.adapters.conftest import ANSWERED, REJECTED, RULE


def test_roles_are_mapped_and_tools_and_empty_turns_left_out() -> None:
    history = [
        ("system", "Be brief."),
        ("human", "How do bees make honey?"),
        ("ai", ""),  # a turn made only of tool calls
        ("tool", "a retrieved page"),
        ("function", "another result"),
        ("chatbot", "From nectar."),
        ("narrator", "an unknown role"),
    ]
    assert chat_messages(history, "And wax?") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "How do bees make honey?"},
        {"role": "assistant", "content": "From nectar."},
        {"role": "user", "content": "And wax?"},
    ]
    assert last_user_index(["system", "human", "ai", "tool"]) == 1
    assert last_user_index(["ai", "tool"]) is None


def test_a_long_chat_keeps_its_most_recent_messages_within_the_limits() -> None:
    turns = [("user" if i % 2 == 0 else "assistant", f"turn {i}") for i in range(400)]
    kept = chat_messages(turns, "the question")
    assert len(kept) == MAX_MESSAGES and kept[-1]["content"] == "the question"
    assert kept[0]["content"] == f"turn {400 - MAX_MESSAGES + 1}"
    conversation(kept)  # the service's own validation accepts it

    page = "x" * (MAX_CONVERSATION_CHARS // 3)
    long = [("user", page), ("assistant", page), ("user", page), ("assistant", page)]
    kept = chat_messages(long, "the question")
    assert sum(len(m["content"]) for m in kept) <= MAX_CONVERSATION_CHARS
    assert len(kept) == 3 and kept[-1]["content"] == "the question"
    conversation(kept)


def test_what_goes_upstream_leaves_out_a_dropped_turn_its_replies_and_the_unread_past(
    gated_kb_dir: Path,
) -> None:
    """The rows for the LLM: a turn the Gate dropped goes with its replies, tool calls and
    results; rows before the part the Gate read go too (never checked); the system message
    stays. A one-search retriever's refused texts are left out alike."""
    from ragbound.gate import Gate

    gate = Gate.load(gated_kb_dir, rule=RULE)
    history = [
        ("system", "Be brief."),
        ("human", "an old question, never read"),
        ("ai", "x" * MAX_CONVERSATION_CHARS),  # past the limit: the Gate reads what follows
        ("human", REJECTED),
        ("ai", "No."),
        ("tool", "a retrieved page"),
        ("ai", "Still no."),
        ("human", ANSWERED),
        ("ai", "From nectar."),
    ]
    decision = gate.decide(chat_messages(history, "Why?"))
    assert decision.conversation.dropped == [0]
    assert upstream_rows(history, decision, "Why?") == [0, 7, 8]

    plain = [("human", ANSWERED), ("ai", "From nectar."), ("human", "Why?"), ("ai", "Because.")]
    answered = gate.decide(chat_messages(plain, "And wax?"))
    assert upstream_rows(plain, answered, "And wax?") == [0, 1, 2, 3]
    assert upstream_rows(plain, answered, "And wax?", refused={"Why?"}) == [0, 1]


def test_a_one_search_retriever_keeps_the_last_turns_it_refused() -> None:
    refused = Refused(size=2)

    class Decided:  # what Refused reads of a Decision
        def __init__(self, query: str, action: str) -> None:
            self.query, self.action = query, action

    for text, action in [("a ", "reject"), ("b", "answer"), ("c", "reject"), ("d", "reject")]:
        refused.note(Decided(text, action))  # type: ignore[arg-type]
    assert "a" not in refused and "b" not in refused  # "a" was the oldest, "b" answered
    assert "c" in refused and "d" in refused
