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
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, Field

from ragbound.conversation import INSTRUCTION_ROLES, Conversation, Message, Query
from ragbound.detect.reading import FOLLOW_MEAN, LAST, REWRITE, Read, Vectors, read, recent_text
from ragbound.errors import InputError
from ragbound.knowledge.query import Prepared, QueryEmbedder, query_texts

if TYPE_CHECKING:
    from ragbound.detect.rewrite import Rewriter

TURN_CACHE_SIZE = 4096
"""Embedded texts kept (about 1.5 MB at 384 dimensions)."""


class Bounded(OrderedDict):
    """A dict that keeps its ``size`` most recently added entries."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        while len(self) > self.size:
            self.popitem(last=False)


class TurnVectors:
    """Unit embeddings of texts through ``embedder``, the most recently used kept (LRU, thread
    safe: the service embeds on one thread and decides on another)."""

    def __init__(self, embedder: QueryEmbedder, size: int = TURN_CACHE_SIZE):
        self.embedder = embedder
        self.size = size
        self._kept: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        # whether each earlier turn followed the ones before it (the follow reading's
        # segments): a chat's history is read again at every later turn
        self.links: Bounded = Bounded(size)

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
    dropped: list[int] = Field(
        default_factory=list,
        description="earlier user turns (0-based) found forbidden: left out of the text read "
        "and of what goes upstream (:func:`upstream_messages`), their replies too",
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
) -> Embedded:
    """Read every item, then validate and embed the read texts (through the cache when the
    knowledge is searched by vectors; ``prepare`` otherwise, the knowledge's own).
    ``rewriter``: the LLM of the ``rewrite`` reading."""
    reads = tuple(read_one(item, reading, vectors, rewriter) for item in items)
    texts = query_texts([r.text for r in reads])
    if vectors is None:
        return Embedded(tuple(items), reads, prepare(texts))
    return Embedded(tuple(items), reads, Prepared(texts, searched_vectors(reads, texts, vectors)))


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
    :meth:`~ragbound.conversation.Conversation.turns`). Not ``follow-mean``: it searches a
    mean of vectors, not its text, so a calibration of its texts would not be its null."""
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


def other_turns(item: Query, how: Read, *, instructions: bool) -> list[str]:
    """The texts the tripwires see besides the read text: the decided turn alone (when the
    read text joins it with others), the recent turns joined (a request split over turns;
    already embedded by the ``follow`` reading) and, with ``instructions``, the system and
    developer messages. ``item`` is the conversation as read, its forbidden turns dropped
    (:func:`without_turns`): every earlier turn it keeps was found not forbidden at its own
    turn, so it is not checked again, and one false hit does not refuse the rest of a chat."""
    if not isinstance(item, Conversation):
        return []
    extra = list(item.instructions) if instructions else []
    joined = [recent_text(item)[0]] if item.turn_index > 0 else []
    return [t for t in dict.fromkeys([item.last_user, *joined, *extra]) if t != how.text]


def without_turns(chat: Conversation, dropped: Sequence[int]) -> Conversation:
    """``chat`` without the user turns ``dropped`` (0-based) and the messages that answer each
    (everything up to the next user message); the decided turn is never dropped."""
    if not dropped:
        return chat
    rows = _kept_rows([m.role for m in chat.messages], dropped)
    return Conversation(tuple(chat.messages[i] for i in rows), id=chat.id)


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


def joined_turns(turns: Sequence[str]) -> str:
    """The recent ``turns`` joined as the tripwires read a request split over turns (the
    last :data:`~ragbound.detect.reading.RECENT_TURNS`, as :func:`recent_text` joins them)."""
    return recent_text(Conversation(tuple(Message("user", t) for t in turns)))[0]


def vector_reader(kb) -> Vectors | None:
    """The knowledge's query embedder when it searches vectors (None: a text search)."""
    if kb.store.query_kind != "vector":
        return None
    return kb.query_embedder()
