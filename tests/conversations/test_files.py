"""Conversation files (ragbound.conversations.files): both shapes, every turn, logged chats,
and each bad conversation refused with its file and line; the real doc2dial file when present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbound.conversations.files import load_conversations
from ragbound.errors import InputError

DOC2DIAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "doc2dial" / "dialogues.jsonl"

CHAT = {
    "id": "c1",
    "messages": [
        {"role": "system", "content": "Answer from the documents."},
        {"role": "user", "content": "How do bees tell each other where food is?"},
        {"role": "assistant", "content": "With a waggle dance."},
        {"role": "user", "content": [{"type": "text", "text": "How long does it last?"}]},
    ],
}
DIALOGUE = {
    "id": "d1",
    "document": "bees",
    "turns": [
        {"role": "user", "text": "What do worker bees make?"},
        {"role": "agent", "text": "Honey, from nectar."},
        {"role": "user", "text": "yes"},
        {"role": "agent", "text": "Anything else?"},
    ],
}


def user(text: object) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def write(path: Path, *records: object) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_both_shapes_are_decided_at_their_last_user_turn(tmp_path):
    plain = {"messages": [user("What is a pantograph?")]}
    chats = load_conversations(write(tmp_path / "c.jsonl", CHAT, DIALOGUE, plain))
    assert [c.label for c in chats] == ["c1", "d1", "line 3"]
    assert [c.line for c in chats] == [1, 2, 3]
    first, dialogue, alone = (c.conversation for c in chats)
    assert first.last_user == "How long does it last?" and first.turn_index == 1
    assert first.instructions == ("Answer from the documents.",)
    # doc2dial's agent is the assistant; its answer after the last user turn is left out
    assert dialogue.last_user == "yes" and dialogue.user_answers[-1] == "Honey, from nectar."
    assert [m.role for m in dialogue.messages] == ["user", "assistant", "user"]
    assert alone.id is None and alone.turn_index == 0


def test_every_turn_cuts_each_conversation_at_each_user_turn(tmp_path):
    logged = {"messages": [*CHAT["messages"], assistant("About a second.")]}
    chats = load_conversations(write(tmp_path / "c.jsonl", logged, DIALOGUE), every_turn=True)
    assert [(c.line, c.conversation.turn_index) for c in chats] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert [c.conversation.last_user for c in chats[:2]] == [
        "How do bees tell each other where food is?",
        "How long does it last?",
    ]
    assert chats[3].conversation.id == "d1"


def test_a_numeric_id_is_read_as_text_and_a_json_list_works(tmp_path):
    path = tmp_path / "chats.json"
    path.write_text(json.dumps([{"id": 7, "messages": [user("What is a gauge?")]}]))
    assert load_conversations(path)[0].label == "7"


def test_a_logged_chat_ending_with_the_answer_needs_logged(tmp_path):
    path = write(
        tmp_path / "c.jsonl", {"messages": [user("What is a gauge?"), assistant("A width.")]}
    )
    with pytest.raises(InputError, match=r"c\.jsonl:1: the last message is the assistant's"):
        load_conversations(path)
    chat = load_conversations(path, logged=True)[0].conversation
    assert [m.role for m in chat.messages] == ["user"]


LONG = [user(f"turn {i}") if i % 2 else assistant(f"turn {i}") for i in range(1000)]
BAD = {
    "empty messages": ({"messages": []}, ":2: no messages"),
    "no user turn": (
        {"messages": [{"role": "system", "content": "Be brief."}, assistant("Hello.")]},
        ":2: no user message to decide",
    ),
    "last turn from the assistant": (
        {"messages": [user("What is a gauge?"), assistant("A width.")]},
        ":2: the last message is the assistant's",
    ),
    "non-text parts only": (
        {"messages": [user([{"type": "image_url", "image_url": {"url": "http://x/a.png"}}])]},
        ":2, message 1: the last user message has no text to decide",
    ),
    "unknown role": (
        {"messages": [{"role": "robot", "content": "beep"}, user("What is a gauge?")]},
        ":2, message 1: unknown role 'robot'",
    ),
    "unknown role after the last user turn": (
        {"messages": [user("What is a gauge?"), {"role": "robot", "content": "beep"}]},
        ":2, message 2: unknown role 'robot'",
    ),
    "unknown doc2dial role": (
        {"turns": [{"role": "bot", "text": "hi"}, {"role": "user", "text": "What is a gauge?"}]},
        ":2, turn 1: unknown role 'bot'; expected user or agent",
    ),
    "doc2dial text not a string": (
        {"turns": [{"role": "user", "text": 3}]},
        ":2, turn 1: 'text' must be a string, got a number",
    ),
    "1,000 turns": ({"messages": LONG}, ":2: 1,000 messages; at most 256"),
    "a 1 MB history": (
        {"messages": [user("x " * 500_000), assistant("ok"), user("What is a gauge?")]},
        ":2: 1,000,017 characters of text; at most 200,000",
    ),
    "no conversation field": ({"id": "a", "text": "hi"}, ":2 (field 'messages' or 'turns')"),
    "not an object": ("What is a gauge?", ":2: expected an object with 'messages'"),
    "a bad id": ({"id": [1], "messages": [user("Why?")]}, ":2 (field 'id'): expected a string"),
}


@pytest.mark.parametrize(("record", "fragment"), BAD.values(), ids=BAD.keys())
def test_a_bad_conversation_is_refused_with_its_file_and_line(tmp_path, record, fragment):
    path = write(tmp_path / "bad.jsonl", {"messages": [user("What is a gauge?")]}, record)
    logged = "assistant" not in fragment  # a log may end with the answer: the rest still fail
    with pytest.raises(InputError) as caught:
        load_conversations(path, every_turn=logged)
    assert str(caught.value).startswith(f"{path}:2")
    assert fragment in str(caught.value)


def test_an_earlier_turn_too_long_to_decide_is_refused_at_every_turn(tmp_path):
    chat = {"messages": [user("x" * 10_001), assistant("ok"), user("What is a gauge?")]}
    path = write(tmp_path / "c.jsonl", chat)
    assert len(load_conversations(path)) == 1  # only the last turn is decided
    with pytest.raises(InputError, match=r"c\.jsonl:1, message 1: 10,001 characters"):
        load_conversations(path, every_turn=True)


def test_an_empty_file_has_no_conversations(tmp_path):
    path = tmp_path / "none.jsonl"
    path.write_text("\n")
    with pytest.raises(InputError, match="no conversations found"):
        load_conversations(path)


@pytest.mark.skipif(not DOC2DIAL.is_file(), reason=f"doc2dial is not in {DOC2DIAL.parent}")
def test_the_real_doc2dial_dialogues_load_turn_by_turn():
    chats = load_conversations(DOC2DIAL)
    turns = load_conversations(DOC2DIAL, every_turn=True)
    assert len(chats) == 661  # every dialogue ends with the agent's answer: left out
    assert len(turns) == 4253  # every user turn (the dataset's README counts 4,253)
    assert all(c.conversation.messages[-1].role == "user" for c in chats)
    assert all(c.conversation.id for c in turns)
    assert {c.conversation.turn_index for c in turns} == set(range(9))
