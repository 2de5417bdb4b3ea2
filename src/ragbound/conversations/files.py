"""Conversation files: one conversation a record, for ``check`` and ``calibrate --conversations``.

A record holds OpenAI-style ``messages`` (as ``POST /v1/decide`` takes them) or doc2dial's
``turns`` (``agent`` read as ``assistant``), and is validated as a request is
(docs/input-files.md). A ``messages`` record ending with the assistant's message is refused
unless read as a *log* (``logged``): a logged chat ends with the answer to its last question,
which no decision reads. A ``turns`` record is a recorded dialogue, always read as a log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragbound.conversations.model import ROLES, Conversation, conversation
from ragbound.errors import InputError
from ragbound.records import Record, json_kind, read_records

SHAPES = ("messages", "turns")
"""The fields that hold a conversation: OpenAI-style ``messages``, doc2dial's ``turns``."""
TURN_ROLES = {"agent": "assistant"}
"""Roles of the ``turns`` shape read as another (doc2dial's ``agent`` is the assistant)."""


@dataclass(frozen=True)
class FileConversation:
    """A conversation of a file, cut at the user turn decided, and where it came from."""

    conversation: Conversation
    file: str
    line: int

    @property
    def label(self) -> str:
        """The conversation's id, else ``line N``: what to call it in a message."""
        chat_id = self.conversation.id
        return chat_id if chat_id is not None else f"line {self.line}"


def load_conversations(
    path: str | Path, *, every_turn: bool = False, logged: bool = False
) -> list[FileConversation]:
    """The conversations of a file, in file order (InputError ``FILE:LINE...: problem``).

    Each is decided at its last user turn; with ``every_turn`` each is cut at every user turn
    (:meth:`~ragbound.conversations.model.Conversation.turns`), oldest first, which implies
    ``logged``. ``logged``: messages after the last user message are the answer a log
    recorded, left out (their roles are still checked).
    """
    found = []
    for record in read_records(path):
        chat = read_conversation(record, logged=logged or every_turn)
        cuts = _turns(chat, record) if every_turn else [chat]
        found += [FileConversation(cut, record.file, record.line) for cut in cuts]
    if not found:
        raise InputError(f"{path}: no conversations found")
    return found


def read_conversation(record: Record, *, logged: bool = False) -> Conversation:
    """The validated conversation of one record (see the module docstring)."""
    data = record.object("an object with 'messages' (or doc2dial's 'turns')")
    shape = next((name for name in SHAPES if name in data), None)
    if shape is None:
        raise record.missing(SHAPES)
    chat_id = None if data.get("id") is None else record.id("id")
    location = record.where()
    raw = data[shape]
    if shape == "turns":
        raw = _turns_as_messages(raw, location)
    if (logged or shape == "turns") and isinstance(raw, list):
        raw = _before_answer(raw, location)
    return conversation(raw, id=chat_id, location=location)


def _turns_as_messages(turns: object, location: str) -> object:
    """doc2dial's ``[{"role", "text"}]`` as OpenAI-style messages (anything but a list is
    left for :func:`conversation` to refuse)."""
    if not isinstance(turns, list):
        return turns
    messages = []
    for i, turn in enumerate(turns):
        where = f"{location}, turn {i + 1}"
        if not isinstance(turn, Mapping):
            raise InputError(f"{where} must be an object with 'role' and 'text'")
        role = turn.get("role")
        if role not in TURN_ROLES and role not in ROLES:
            raise InputError(
                f"{where}: unknown role {role!r}; expected user or agent "
                f"(or one of {', '.join(ROLES)})"
            )
        text = turn.get("text")
        if text is not None and not isinstance(text, str):
            raise InputError(f"{where}: 'text' must be a string, got {json_kind(text)}")
        messages.append({"role": TURN_ROLES.get(role, role), "content": text})
    return messages


def _before_answer(messages: list[Any], location: str) -> list[Any]:
    """A logged chat's messages up to its last user message; the roles after it are checked,
    their content is not read."""
    users = [i for i, m in enumerate(messages) if _role(m) == "user"]
    if not users:
        return messages  # conversation() says there is no user message
    for i in range(users[-1] + 1, len(messages)):
        if _role(messages[i]) not in ROLES:
            # refused as a request would be: the error names message i + 1 and its role
            conversation(messages[: i + 1], location=location)
    return messages[: users[-1] + 1]


def _role(message: object) -> object:
    return message.get("role") if isinstance(message, Mapping) else None


def _turns(chat: Conversation, record: Record) -> list[Conversation]:
    """``chat`` at each of its user turns, each checked as a decided turn is (its length)."""
    where = record.where()
    return [conversation(cut.messages, id=chat.id, location=where) for cut in chat.turns()]
