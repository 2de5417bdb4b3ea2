"""What the Gate needs to decide conversations: a bounded cache of embedded turns, the reading
of each item of a batch, and the turns the tripwires see besides the read text.

A chat sends its whole history at every turn; the cache (keyed by the text) means each user
turn is embedded once while it stays among the :data:`TURN_CACHE_SIZE` most recently used,
not once per later turn.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, Field

from ragbound.conversation import Conversation, Query
from ragbound.detect.reading import LAST, REWRITE, Read, Vectors, read, recent_text
from ragbound.errors import InputError
from ragbound.knowledge.query import Prepared, QueryEmbedder, query_texts

if TYPE_CHECKING:
    from ragbound.detect.rewrite import Rewriter

TURN_CACHE_SIZE = 4096
"""Embedded texts kept (about 1.5 MB at 384 dimensions)."""


class TurnVectors:
    """Unit embeddings of texts through ``embedder``, the most recently used kept (LRU, thread
    safe: the service embeds on one thread and decides on another)."""

    def __init__(self, embedder: QueryEmbedder, size: int = TURN_CACHE_SIZE):
        self.embedder = embedder
        self.size = size
        self._kept: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._kept))
        if missing:
            one = len(missing) == 1
            new = self.embedder.encode_one(missing[0]) if one else self.embedder.encode(missing)
            new = np.asarray(new, dtype=np.float32).reshape(len(missing), -1)
            with self._lock:
                self._kept.update(zip(missing, new, strict=True))
        with self._lock:
            rows = [self._kept.get(t) for t in texts]
            for text in texts:
                if text in self._kept:
                    self._kept.move_to_end(text)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)
        if any(row is None for row in rows):  # evicted by another thread meanwhile: rare
            return self.embedder.encode(list(texts))
        return np.stack(rows) if rows else np.empty((0, 0), np.float32)


class ConversationRead(BaseModel):
    """Where a decision sits in its conversation, and how the conversation was read.

    ``turn``: user turns before the decided one (0: the first question); ``history``: sha256
    (16 hex characters) of the messages before it; ``id``: the caller's conversation id, if it
    sent one; ``reading``: the reading (:mod:`ragbound.detect.reading`); ``read_turns``: how
    many user turns the searched text joins (1: the decided turn alone)."""

    turn: int
    history: str
    id: str | None = None
    reading: str
    read_turns: int = Field(description="user turns joined into the text searched")


@dataclass(frozen=True)
class Embedded:
    """A batch ready to decide: the items as given, how each was read, and the read texts
    validated and (for a vector search) embedded."""

    items: tuple[Query, ...]
    reads: tuple[Read, ...]
    prepared: Prepared

    @property
    def texts(self) -> Sequence[str]:
        """The texts searched, one per item."""
        return self.prepared.texts


def read_batch(
    items: Sequence[Query],
    reading: str,
    vectors: TurnVectors | None,
    prepare,
    rewriter: Rewriter | None = None,
) -> Embedded:
    """Read every item, then validate and embed the read texts (through the cache when the
    knowledge is searched by vectors; ``prepare`` otherwise, the knowledge's own).
    ``rewriter``: the LLM of the ``rewrite`` reading."""
    reads = tuple(read_one(item, reading, vectors, rewriter) for item in items)
    texts = query_texts([r.text for r in reads])
    if vectors is None:
        return Embedded(tuple(items), reads, prepare(texts))
    return Embedded(tuple(items), reads, Prepared(texts, vectors(list(texts))))


def read_one(
    item: Query, reading: str, vectors: Vectors | None, rewriter: Rewriter | None = None
) -> Read:
    """How ``item`` is read (:func:`ragbound.detect.reading.read`), the ``rewrite`` reading
    through ``rewriter`` (InputError without one)."""
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
    :meth:`~ragbound.conversation.Conversation.turns`)."""
    embedder = vector_reader(kb)
    vectors = None if embedder is None else TurnVectors(embedder)
    return [read_one(item, reading, vectors, rewriter).text for item in items]


def conversation_read(item: Query, how: Read) -> ConversationRead | None:
    """The decision's ``conversation`` field for ``item`` (None for a single query)."""
    if not isinstance(item, Conversation):
        return None
    return ConversationRead(
        turn=item.turn_index,
        history=item.history_hash,
        id=item.id,
        reading=how.reading,
        read_turns=how.turns,
    )


def other_turns(item: Query, how: Read, *, instructions: bool) -> list[str]:
    """The texts the tripwires see besides the read text: every user turn (the last too when
    the read text joins it with others), the recent turns joined (a request split over
    turns; already embedded by the ``follow`` reading) and, with ``instructions``, the system
    and developer messages."""
    if not isinstance(item, Conversation):
        return []
    extra = list(item.instructions) if instructions else []
    joined = [recent_text(item)[0]] if item.turn_index > 0 else []
    return [t for t in dict.fromkeys([*item.user_turns, *joined, *extra]) if t != how.text]


def vector_reader(kb) -> Vectors | None:
    """The knowledge's query embedder when it searches vectors (None: a text search)."""
    if kb.store.query_kind != "vector":
        return None
    return kb.query_embedder()
