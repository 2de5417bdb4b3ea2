"""A framework's chat history as the messages the Gate decides (no framework needed)."""

from __future__ import annotations

from ragbound.adapters._chat import chat_messages, last_user_index
from ragbound.conversation import MAX_CONVERSATION_CHARS, MAX_MESSAGES, conversation


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
