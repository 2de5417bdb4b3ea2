"""The conversation: OpenAI-style chat messages as an input wherever a query is.

A :class:`Conversation` is the validated form of a list of messages: the text of each message
(its text parts joined; images and other parts are not read), the user turns in order, and the
turn decided, the last user turn. It is built once at the boundary (:func:`conversation`), so
every later step reads plain strings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ragbound.corpus.queries import MAX_QUERY_CHARS
from ragbound.errors import InputError
from ragbound.labels import check_label

ROLES: tuple[str, ...] = ("system", "developer", "user", "assistant", "tool", "function")
"""The roles of OpenAI's chat and Responses APIs; any other is refused."""
INSTRUCTION_ROLES = frozenset({"system", "developer"})
TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
"""Content part types whose ``text`` is read (Chat Completions' and the Responses API's)."""
MAX_MESSAGES = 256
"""Most messages a conversation may hold (a longer chat: send its recent messages)."""
MAX_CONVERSATION_CHARS = 200_000
"""Most characters of text a conversation may hold, over all its messages."""

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


@dataclass(frozen=True)
class Message:
    """One message's role and text (its text parts joined by newlines; "" when it has none)."""

    role: str
    text: str


@dataclass(frozen=True)
class Conversation:
    """A validated conversation whose last user turn is the one decided.

    ``messages`` are all the messages, oldest first; ``id`` an optional conversation id the
    caller sends (kept in the query log, never read by the test).
    """

    messages: tuple[Message, ...]
    id: str | None = None

    @property
    def user_turns(self) -> tuple[str, ...]:
        """The user messages' texts, oldest first (the last is the one decided)."""
        return tuple(m.text for m in self.messages if m.role == "user")

    @property
    def last_user(self) -> str:
        """The text of the turn decided: the last user message."""
        return self.user_turns[-1]

    @property
    def turn_index(self) -> int:
        """User turns before the decided one: 0 for the first question of a chat."""
        return len(self.user_turns) - 1

    @property
    def instructions(self) -> tuple[str, ...]:
        """The system and developer messages' texts (non-empty), oldest first."""
        return tuple(m.text for m in self.messages if m.role in INSTRUCTION_ROLES and m.text)

    @property
    def before(self) -> tuple[Message, ...]:
        """The messages before the decided user turn."""
        last = max(i for i, m in enumerate(self.messages) if m.role == "user")
        return self.messages[:last]

    @property
    def history_hash(self) -> str:
        """sha256 (hex, 16 characters) of the messages before the decided turn: equal for
        two decisions of one chat at one point, whatever the caller's id."""
        digest = hashlib.sha256()
        for message in self.before:
            digest.update(f"{message.role}\x1f{message.text}\x1e".encode())
        return digest.hexdigest()[:16]

    def turns(self) -> list[Conversation]:
        """The conversation as it stood at each of its user turns, oldest first (the messages
        after that turn left out): what calibrating on a logged chat decides, turn by turn.
        Turns without text are skipped."""
        cuts = [i + 1 for i, m in enumerate(self.messages) if m.role == "user" and m.text]
        return [Conversation(self.messages[:cut], id=self.id) for cut in cuts]

    @property
    def user_answers(self) -> tuple[str | None, ...]:
        """For each user turn, the assistant's last message before it (None: none yet), in
        the order of :attr:`user_turns`: what each turn may answer to."""
        found: list[str | None] = []
        answer = None
        for message in self.messages:
            if message.role == "assistant" and message.text:
                answer = message.text
            elif message.role == "user":
                found.append(answer)
        return tuple(found)

    def without_turns(self, dropped: Sequence[int]) -> Conversation:
        """This conversation without the user turns ``dropped`` (0-based) and the messages
        that answer each (everything up to the next user message); the decided turn is never
        dropped."""
        if not dropped:
            return self
        rows = _kept_rows([m.role for m in self.messages], dropped)
        return Conversation(tuple(self.messages[i] for i in rows), id=self.id)


Query = str | Conversation
"""What a decision is about: a single query, or a conversation decided at its last user turn."""


def conversation(
    messages: object,
    *,
    id: str | None = None,
    location: str = "conversation",
    max_messages: int = MAX_MESSAGES,
    max_chars: int = MAX_CONVERSATION_CHARS,
    max_turn_chars: int = MAX_QUERY_CHARS,
) -> Conversation:
    """Validate OpenAI-style ``messages`` into a :class:`Conversation`; InputError naming the
    message for a bad role or content, no user turn, a chat ending with the assistant's message,
    or one past the limits. ``id`` is an identifier (:func:`ragbound.labels.check_label`)."""
    if id is not None:
        check_label(id, f"{location}: the conversation id")
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InputError(f"{location}: messages must be a list of messages")
    if not messages:
        raise InputError(f"{location}: no messages")
    if len(messages) > max_messages:
        raise InputError(
            f"{location}: {len(messages):,} messages; at most {max_messages:,} "
            "(send the recent part of a longer chat)"
        )
    parsed = tuple(_message(m, f"{location}, message {i + 1}") for i, m in enumerate(messages))
    total = sum(len(m.text) for m in parsed)
    if total > max_chars:
        raise InputError(f"{location}: {total:,} characters of text; at most {max_chars:,}")
    _check_turns(parsed, location, max_turn_chars)
    return Conversation(parsed, id=id)


def as_query(item: object, *, location: str = "query") -> Query:
    """A query string as it is, a :class:`Conversation` as it is, or a list of messages (or a
    mapping with ``messages`` and an optional ``id``) validated into a Conversation."""
    if isinstance(item, (str, Conversation)):
        return item
    if isinstance(item, Mapping):
        if "messages" not in item:
            raise InputError(f"{location}: a conversation needs a 'messages' list")
        chat_id = item.get("id")
        if chat_id is not None and not isinstance(chat_id, str):
            raise InputError(f"{location}: the conversation id must be a string")
        return conversation(item["messages"], id=chat_id, location=location)
    return conversation(item, location=location)


def decided_text(item: Query) -> str:
    """The text a decision is about: the query, or the conversation's last user turn."""
    return item if isinstance(item, str) else item.last_user


def upstream_messages(messages: list[dict], dropped: Sequence[int]) -> list[dict]:
    """OpenAI-style ``messages`` as they go upstream: without the user turns a decision
    ``dropped`` (its ``conversation.dropped``) and the messages that answer them, so a
    forbidden request never reaches the LLM in a later turn either."""
    if not dropped:
        return messages
    return [messages[i] for i in _kept_rows([m.get("role") for m in messages], dropped)]


def _kept_rows(roles: Sequence[str | None], dropped: Sequence[int]) -> list[int]:
    """The messages kept (their rows) when the user turns ``dropped`` go with their answers;
    system and developer messages always stay."""
    gone, turn, kept = set(dropped), -1, []
    for row, role in enumerate(roles):
        turn += role == "user"
        if turn not in gone or role in INSTRUCTION_ROLES:
            kept.append(row)
    return kept


def _message(raw: object, location: str) -> Message:
    if isinstance(raw, Message):
        return raw
    if not isinstance(raw, Mapping):
        raise InputError(f"{location} must be an object with 'role' and 'content'")
    role = raw.get("role")
    if role not in ROLES:
        raise InputError(f"{location}: unknown role {role!r}; expected one of {', '.join(ROLES)}")
    return Message(role, _content_text(raw.get("content"), location))


def _content_text(content: Any, location: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        raise InputError(f"{location}: content must be a string or a list of parts")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
            raise InputError(f"{location}, part {j + 1} must be an object with a 'type'")
        if part["type"] in TEXT_PARTS:
            text = part.get("text")
            if not isinstance(text, str):
                raise InputError(f"{location}, part {j + 1}: a text part needs a 'text' string")
            texts.append(text)
    return "\n".join(t for t in texts if t.strip()).strip()


def _check_turns(messages: tuple[Message, ...], location: str, max_turn_chars: int) -> None:
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    if not users:
        raise InputError(f"{location}: no user message to decide")
    if messages[-1].role == "assistant":
        raise InputError(
            f"{location}: the last message is the assistant's; nothing new to decide "
            "(a conversation ends with the user's turn)"
        )
    last = messages[users[-1]]
    if not last.text:
        raise InputError(
            f"{location}, message {users[-1] + 1}: the last user message has no text to decide "
            "(only text parts are read)"
        )
    if len(last.text) > max_turn_chars:
        raise InputError(
            f"{location}, message {users[-1] + 1}: {len(last.text):,} characters; the limit "
            f"is {max_turn_chars:,} (oversize queries are refused, not truncated)"
        )
