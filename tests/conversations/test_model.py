"""Conversations: OpenAI-style messages validated once, with a clear error for bad input."""

from __future__ import annotations

import pytest

from ragbound.conversations.model import (
    MAX_CONVERSATION_CHARS,
    MAX_MESSAGES,
    Conversation,
    as_query,
    conversation,
    decided_text,
)
from ragbound.errors import InputError

CHAT = [
    {"role": "system", "content": "You answer questions about bees."},
    {"role": "user", "content": "How do bees find food?"},
    {"role": "assistant", "content": "Scouts dance to show the way."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "And how far"},
            {"type": "text", "text": "do they fly?"},
        ],
    },
]


def test_a_chat_is_read_into_roles_turns_and_the_turn_decided() -> None:
    chat = conversation(CHAT, id="c-1")
    assert chat.user_turns == ("How do bees find food?", "And how far\ndo they fly?")
    assert chat.last_user == "And how far\ndo they fly?" == decided_text(chat)
    assert chat.turn_index == 1
    assert chat.instructions == ("You answer questions about bees.",)
    assert chat.user_answers[-1] == "Scouts dance to show the way."
    assert chat.id == "c-1"
    assert [m.role for m in chat.before] == ["system", "user", "assistant"]


def test_each_user_turn_knows_the_answer_before_it() -> None:
    chat = conversation(
        [
            {"role": "user", "content": "Hi"},
            {"role": "user", "content": "How do bees dance?"},
            {"role": "assistant", "content": "They waggle."},
            {"role": "tool", "content": "looked up"},
            {"role": "user", "content": "Why?"},
        ]
    )
    assert chat.user_answers == (None, None, "They waggle.")


def test_the_history_hash_depends_on_the_turns_before_only() -> None:
    one = conversation(CHAT)
    other_last = conversation([*CHAT[:3], {"role": "user", "content": "Why?"}])
    other_history = conversation([*CHAT[:2], {"role": "assistant", "content": "No."}, CHAT[3]])
    assert one.history_hash == other_last.history_hash
    assert one.history_hash != other_history.history_hash
    assert len(one.history_hash) == 16


def test_turns_cut_the_chat_at_each_user_turn() -> None:
    cuts = conversation(CHAT).turns()
    assert [c.last_user for c in cuts] == ["How do bees find food?", "And how far\ndo they fly?"]
    assert [c.turn_index for c in cuts] == [0, 1]


def test_image_parts_are_not_read_and_tool_messages_may_close_the_chat() -> None:
    chat = conversation(
        [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "x"}},
                    {"type": "text", "text": "What is this bee?"},
                ],
            },
            {"role": "tool", "content": "looked up"},
        ]
    )
    assert chat.last_user == "What is this bee?"


def test_as_query_takes_strings_chats_and_mappings() -> None:
    assert as_query("Why?") == "Why?"
    chat = as_query({"messages": CHAT, "id": "x"})
    assert isinstance(chat, Conversation) and chat.id == "x"
    assert as_query(chat) is chat
    assert isinstance(as_query(CHAT), Conversation)


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([], "no messages"),
        ("hello", "must be a list"),
        ([{"role": "system", "content": "Be kind."}], "no user message"),
        (
            [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
            "last message is the assistant's",
        ),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            "no text to decide",
        ),
        ([{"role": "wizard", "content": "Hi"}], "unknown role 'wizard'"),
        ([{"role": "user", "content": 42}], "content must be a string or a list"),
        ([{"role": "user", "content": [{"type": "text"}]}], "needs a 'text' string"),
        ([{"role": "user", "content": "   "}], "no text to decide"),
        (["hi"], "must be an object"),
        ([{"role": "user", "content": "q"}] * 1000, f"at most {MAX_MESSAGES}"),
        ([{"role": "user", "content": "x" * 9_000}] * 120, f"at most {MAX_CONVERSATION_CHARS:,}"),
        ([{"role": "user", "content": "x" * 20_000}], "oversize queries are refused"),
    ],
)
def test_bad_conversations_are_refused_with_a_clear_error(messages, message: str) -> None:
    with pytest.raises(InputError, match=message):
        conversation(messages)


def test_a_mapping_without_messages_or_with_a_bad_id_is_refused() -> None:
    with pytest.raises(InputError, match="needs a 'messages' list"):
        as_query({"turns": []})
    with pytest.raises(InputError, match="id must be a string"):
        as_query({"messages": CHAT, "id": 3})


@pytest.mark.parametrize("chat_id", ["chat\r\nX-Injected: 1", "a\x1b[31mred", "rtl\u202eevil"])
def test_a_conversation_id_with_control_characters_is_refused(chat_id: str) -> None:
    # the id is logged and shown: what is stored must be writable to a log line and a page
    with pytest.raises(InputError, match=r"the conversation id .* holds"):
        conversation(CHAT, id=chat_id)
    with pytest.raises(InputError, match="the conversation id"):
        as_query({"messages": CHAT, "id": chat_id})
    assert conversation(CHAT, id="chat-42 (web)").id == "chat-42 (web)"
