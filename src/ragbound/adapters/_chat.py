"""What the chat adapters share: a framework's chat history as the OpenAI-style messages the Gate
decides (:mod:`ragbound.conversation`), whatever the framework calls its roles.

LangChain names its roles ``human`` / ``ai`` / ``system`` / ``tool``, LlamaIndex and Haystack
``user`` / ``assistant`` / ``system`` / ``tool`` (LlamaIndex also ``chatbot``, ``model``,
``developer``, ``function``). Each becomes the OpenAI role the service reads, so one chat sent
through an adapter and through ``POST /v1/decide`` is the same conversation.

Left out: tool and function results (what a tool returned is not what the user asked, and its
text, often retrieved documents, would crowd the chat out of the size limits), messages
without text (an assistant turn made only of tool calls), and roles no framework documents.
A chat longer than the service accepts keeps its most recent messages, as the service asks a
caller to do (:data:`~ragbound.conversation.MAX_MESSAGES`,
:data:`~ragbound.conversation.MAX_CONVERSATION_CHARS`).
"""

from __future__ import annotations

from collections.abc import Iterable

from ragbound.conversation import MAX_CONVERSATION_CHARS, MAX_MESSAGES

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
    history: Iterable[tuple[str, str]], question: str | None = None
) -> list[dict[str, str]]:
    """OpenAI-style messages of ``history`` ((role, text) pairs, oldest first, roles as the
    framework names them) followed by ``question`` as the user's turn (None: the history
    already ends with it); the most recent that fit the service's limits."""
    messages = [
        {"role": ROLE_OF[role], "content": text.strip()}
        for role, text in history
        if role in ROLE_OF and text and text.strip()
    ]
    if question is not None:
        messages.append({"role": "user", "content": question})
    return _recent(messages)


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
