"""What the Gate needs to read conversations: a bounded cache of embedded turns, and the
reading of each item of a batch.

A chat sends its whole history at every turn; the cache (keyed by the text) means each user
turn is embedded once while it stays among the :data:`TURN_CACHE_SIZE` most recently used,
not once per later turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, Field

from ragbound.conversations.model import Conversation, Query
from ragbound.conversations.reading import FOLLOW_MEAN, LAST, REWRITE, Read, Vectors, read
from ragbound.errors import InputError
from ragbound.knowledge.query import Prepared, QueryEmbedder, query_texts
from ragbound.lru import LRU

if TYPE_CHECKING:
    from ragbound.conversations.rewrite import Rewriter

TURN_CACHE_SIZE = 4096
"""Embedded texts kept (about 1.5 MB at 384 dimensions); the other caches of a chat's turns
(whether each followed, their tripwire verdicts) keep as many."""


class TurnVectors:
    """Unit embeddings of texts through ``embedder``, the most recently used kept; ``links``:
    whether each earlier turn followed the ones before it (the follow reading's segments),
    since a chat's history is read again at every later turn."""

    def __init__(self, embedder: QueryEmbedder, size: int = TURN_CACHE_SIZE):
        self.embedder = embedder
        self.size = size
        self._kept: LRU[str, np.ndarray] = LRU(size)
        self.links: LRU[tuple, bool] = LRU(size)

    def __call__(self, texts: list[str]) -> np.ndarray:
        rows = self._kept.fetch(texts, self._embed)
        return np.stack(rows) if rows else np.empty((0, 0), np.float32)

    def _embed(self, texts: list[str]) -> list[np.ndarray]:
        one = len(texts) == 1
        new = self.embedder.encode_one(texts[0]) if one else self.embedder.encode(texts)
        return list(np.asarray(new, dtype=np.float32).reshape(len(texts), -1))


class ConversationRead(BaseModel):
    """Where a decision sits in its conversation, and how the conversation was read: ``turn``,
    user turns before the decided one (0: the first question); ``history``, the
    :attr:`~ragbound.conversations.model.Conversation.history_hash`; ``id``, the caller's."""

    turn: int
    history: str
    id: str | None = None
    reading: str
    read_turns: int = Field(description="user turns joined into the text searched")
    dropped: list[int] = Field(
        default_factory=list,
        description="earlier user turns (0-based) found forbidden: left out of the text read "
        "and of what goes upstream (``Decision.upstream_messages``), their replies too",
    )


@dataclass(frozen=True)
class Embedded:
    """A batch ready to decide: the items as given, how each was read, and the read texts
    validated and (for a vector search) embedded."""

    items: tuple[Query, ...]
    reads: tuple[Read, ...]
    prepared: Prepared
    # per item, the earlier user turns the tripwires found forbidden (left out of the read)
    dropped: tuple[tuple[int, ...], ...] = ()

    @property
    def texts(self) -> Sequence[str]:
        """The texts searched, one per item."""
        return self.prepared.texts

    def small_talk_at(self, i: int) -> bool:
        """Whether item ``i``'s decided turn is small talk (never for a query)."""
        return bool(self.reads) and self.reads[i].small_talk

    def dropped_at(self, i: int) -> tuple[int, ...]:
        """The earlier user turns of item ``i`` left out as forbidden (none for a query)."""
        return self.dropped[i] if self.dropped else ()


def read_batch(
    items: Sequence[Query],
    reading: str,
    vectors: TurnVectors | None,
    prepare,
    rewriter: Rewriter | None = None,
    dropped: Sequence[tuple[int, ...]] = (),
) -> Embedded:
    """Read every item, then validate and embed the read texts (through the cache for a vector
    search, else the knowledge's own ``prepare``); ``dropped``: per item, the earlier user
    turns found forbidden, left out of what is read."""
    if dropped:
        items_read = [q.without_turns(d) if d else q for q, d in zip(items, dropped, strict=True)]
    else:
        items_read = list(items)
    reads = tuple(read_one(item, reading, vectors, rewriter) for item in items_read)
    texts = query_texts([r.text for r in reads])
    if vectors is None:
        return Embedded(tuple(items), reads, prepare(texts), tuple(dropped))
    prepared = Prepared(texts, searched_vectors(reads, texts, vectors))
    return Embedded(tuple(items), reads, prepared, tuple(dropped))


def searched_vectors(reads: Sequence[Read], texts: Sequence[str], vectors: Vectors) -> np.ndarray:
    """The vector each read searches: its own (``follow-mean``'s mean of turn vectors, no
    embedding), else its validated text's embedding (through the cache, in one call)."""
    given = [i for i, r in enumerate(reads) if r.vector is not None]
    if not given:
        return vectors(list(texts))
    out = np.empty((len(reads), len(reads[given[0]].vector)), dtype=np.float32)
    for i in given:
        out[i] = reads[i].vector
    embed = [i for i, r in enumerate(reads) if r.vector is None]
    if embed:
        out[embed] = vectors([texts[i] for i in embed])
    return out


def read_one(
    item: Query, reading: str, vectors: Vectors | None, rewriter: Rewriter | None = None
) -> Read:
    """How ``item`` is read (:func:`ragbound.conversations.reading.read`), the ``rewrite``
    reading through ``rewriter`` (InputError without one)."""
    if reading != REWRITE or not isinstance(item, Conversation) or item.turn_index == 0:
        return read(item, LAST if reading == REWRITE else reading, vectors)
    if rewriter is None:
        raise InputError("the rewrite reading needs an LLM: pass rewriter=Rewriter(llm)")
    return Read(rewriter.rewrite(item), REWRITE, len(item.user_turns))


def read_texts(
    kb, items: Sequence[Query], reading: str, rewriter: Rewriter | None = None
) -> list[str]:
    """The texts ``kb``'s test searches for ``items`` under ``reading``, in order: what a
    calibration made of conversations holds (each conversation cut at one user turn, see
    :meth:`~ragbound.conversations.model.Conversation.turns`). Not ``follow-mean``: it
    searches a mean of vectors, not its text, so a calibration of its texts would not be its
    null."""
    if reading == FOLLOW_MEAN:
        raise InputError(
            "follow-mean searches a mean of turn vectors, not a text: calibrate on standalone "
            "questions, or on conversations read with follow"
        )
    embedder = vector_reader(kb)
    vectors = None if embedder is None else TurnVectors(embedder)
    return [read_one(item, reading, vectors, rewriter).text for item in items]


def conversation_read(
    item: Query, how: Read, dropped: Sequence[int] = ()
) -> ConversationRead | None:
    """The decision's ``conversation`` field for ``item`` (None for a single query)."""
    if not isinstance(item, Conversation):
        return None
    return ConversationRead(
        turn=item.turn_index,
        history=item.history_hash,
        id=item.id,
        reading=how.reading,
        read_turns=how.turns,
        dropped=list(dropped),
    )


def vector_reader(kb) -> Vectors | None:
    """The knowledge's query embedder when it searches vectors (None: a text search)."""
    if kb.store.query_kind != "vector":
        return None
    return kb.query_embedder()
