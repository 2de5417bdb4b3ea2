"""What the chat adapters share: a framework's chat history as the OpenAI-style messages the Gate
decides (:mod:`ragbound.conversations.model`), and the rows of it that may go to the LLM.

Tool results, messages without text and unknown roles are left out; a chat longer than the
service accepts keeps its most recent messages. On ``answer`` the LLM gets the history
without the turns the Gate dropped as forbidden (or a one-search retriever refused,
:class:`Refused`) and what answers them, and without messages older than the part the Gate
read; system messages always stay.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import TYPE_CHECKING

from ragbound.conversations.model import (
    INSTRUCTION_ROLES,
    MAX_CONVERSATION_CHARS,
    MAX_MESSAGES,
    upstream_messages,
)

if TYPE_CHECKING:
    from ragbound.gate import Decision

ROLE_OF: dict[str, str] = {
    "human": "user",
    "user": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "chatbot": "assistant",
    "model": "assistant",
    "system": "system",
    "developer": "developer",
}
"""A framework's role name -> the OpenAI role (any other role, tools included, is left out)."""


def chat_messages(
    history: Sequence[tuple[str, str]], question: str | None = None
) -> list[dict[str, str]]:
    """OpenAI-style messages of ``history`` ((role, text) pairs, oldest first, roles as the
    framework names them) followed by ``question`` as the user's turn (None: the history
    already ends with it); the most recent that fit the service's limits."""
    return _read(history, question)[1]


def upstream_rows(
    history: Sequence[tuple[str, str]],
    decision: Decision,
    question: str | None = None,
    refused: Container[str] = (),
) -> list[int]:
    """The rows of ``history`` (as :func:`chat_messages` takes it, the conversation
    ``decision`` decided) that may go to the LLM on ``answer``, oldest first.

    Left out: each earlier user turn the Gate dropped as forbidden (or whose text is in
    ``refused``) and every row after it up to the next user turn (its replies, tool calls and
    tool results), and the rows before the recent part the Gate read. System and developer
    messages always stay."""
    rows, messages = _read(history, question)
    marked = [{**message, "row": row} for message, row in zip(messages, rows, strict=True)]
    users = [m["content"] for m in messages if m["role"] == "user"][:-1]
    dropped = decision.conversation.dropped if decision.conversation is not None else []
    dropped = sorted({*dropped, *(j for j, text in enumerate(users) if text in refused)})
    kept = {message["row"] for message in upstream_messages(marked, dropped)}
    read, start = set(rows), rows[0] if rows else 0
    upstream, turn_kept = [], True
    for row, (role, _) in enumerate(history):
        openai = ROLE_OF.get(role)
        if openai in INSTRUCTION_ROLES:
            upstream.append(row)
            continue
        if row < start:
            continue
        if row in read and openai == "user":
            turn_kept = row in kept
        # a row the Gate did not read (a tool result, say) goes with the turn it follows
        if (row in kept) if row in read else turn_kept:
            upstream.append(row)
    return upstream


class Refused:
    """The user turns a one-search retriever refused when it decided them (their texts, the
    most recent ``size``), to leave out of what later turns send the LLM: its Gate meets the
    tripwires with the text it searched alone, so it drops no earlier turn itself. Keyed by
    text: a turn refused as part of a request split over turns is left out wherever it
    comes again (erring on the side of the LLM not seeing it)."""

    def __init__(self, size: int = 4096):
        self.size = size
        self._texts: dict[str, None] = {}

    def note(self, decision: Decision) -> None:
        """Keep ``decision``'s turn if it was refused."""
        if decision.action == "reject":
            self._texts[decision.query.strip()] = None
            while len(self._texts) > self.size:
                del self._texts[next(iter(self._texts))]

    def __contains__(self, text: object) -> bool:
        return text in self._texts


def _read(
    history: Sequence[tuple[str, str]], question: str | None
) -> tuple[list[int], list[dict[str, str]]]:
    """The messages the Gate reads of ``history`` and ``question`` (see :func:`chat_messages`),
    each with its row in ``history`` (the question's: ``len(history)``)."""
    rows, messages = [], []
    for row, (role, text) in enumerate(history):
        if role in ROLE_OF and text and text.strip():
            rows.append(row)
            messages.append({"role": ROLE_OF[role], "content": text.strip()})
    if question is not None:
        rows.append(len(history))
        messages.append({"role": "user", "content": question})
    recent = _recent(messages)
    return rows[len(rows) - len(recent) :], recent


def _recent(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The last messages, at most MAX_MESSAGES of them and MAX_CONVERSATION_CHARS of text (the
    last message is always kept: a turn too long on its own is refused by the Gate, named)."""
    kept, chars = 0, 0
    for message in reversed(messages):
        chars += len(message["content"])
        if kept and (kept == MAX_MESSAGES or chars > MAX_CONVERSATION_CHARS):
            break
        kept += 1
    return messages[len(messages) - kept :]


def last_user_index(roles: list[str]) -> int | None:
    """Index of the last user turn among framework role names (None: there is none)."""
    for index in range(len(roles) - 1, -1, -1):
        if ROLE_OF.get(roles[index]) == "user":
            return index
    return None
