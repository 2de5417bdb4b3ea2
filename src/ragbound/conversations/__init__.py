"""Conversations: OpenAI-style chat messages decided at their last user turn.

What a chat adds to a query: the :class:`Conversation` validated once from messages
(``model``), conversation files (``files``), how a conversation is read into the text the
boundary test searches (``reading``, the LLM's ``rewrite``), the cache of embedded turns
(``turns``) and the tripwires met by every user turn (``tripwires``). Names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragbound._lazy import lazy_attributes

_LAZY = {
    "Conversation": "ragbound.conversations.model",
    "Query": "ragbound.conversations.model",
    "as_query": "ragbound.conversations.model",
    "conversation": "ragbound.conversations.model",
    "upstream_messages": "ragbound.conversations.model",
    "load_conversations": "ragbound.conversations.files",
    "READINGS": "ragbound.conversations.reading",
    "Rewriter": "ragbound.conversations.rewrite",
    "read_texts": "ragbound.conversations.turns",
}
__all__ = [
    "READINGS",
    "Conversation",
    "Query",
    "Rewriter",
    "as_query",
    "conversation",
    "load_conversations",
    "read_texts",
    "upstream_messages",
]

if TYPE_CHECKING:
    from ragbound.conversations.files import load_conversations
    from ragbound.conversations.model import (
        Conversation,
        Query,
        as_query,
        conversation,
        upstream_messages,
    )
    from ragbound.conversations.reading import READINGS
    from ragbound.conversations.rewrite import Rewriter
    from ragbound.conversations.turns import read_texts

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
