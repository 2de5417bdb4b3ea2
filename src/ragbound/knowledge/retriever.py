"""Knowledge from a retriever that is not a ragbound folder: :class:`RetrieverKnowledge`.

A user who already runs a search (their own index, a store a framework wraps) hands ragbound
that :class:`~ragbound.stores.Retriever`, the embedder its query vectors come from, and the
chunk behind each row; the guard, the gate and the learned score then check queries against
exactly the similarities that search returns. Nothing is copied or embedded again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Self

import numpy as np

from ragbound.artifacts import sha256_text
from ragbound.corpus import Chunk, Document
from ragbound.corpus.chunker import make_chunk
from ragbound.corpus.units import Granularity, granularity_label, parse_granularity
from ragbound.errors import IncompatibleArtifactError, InputError
from ragbound.knowledge.manifest import corpus_hash
from ragbound.knowledge.protocol import Searching
from ragbound.knowledge.query import QueryEmbedder
from ragbound.stores import Retriever, SearchInfo

CHUNK_ONLY: tuple[Granularity, ...] = ("chunk",)


class FunctionEmbedder:
    """A :class:`~ragbound.knowledge.query.QueryEmbedder` from a function of a list of texts
    to an (n, dimension) float matrix (or from an object with only ``encode``)."""

    def __init__(self, encode: Callable[[list[str]], np.ndarray]):
        self._encode = encode

    def encode(self, texts: list[str]) -> np.ndarray:
        vectors = np.asarray(self._encode(list(texts)), dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise InputError(
                f"the embedder returned shape {vectors.shape} for {len(texts)} texts; "
                "expected (number of texts, dimension)"
            )
        return vectors

    def encode_one(self, text: str) -> np.ndarray:
        return self.encode([text])


class ChunkOnly:
    """Knowledge whose rows are whole chunks of a search ragbound does not own: searched at
    chunk granularity only; ``rows_are`` says what its rows are in the refusal."""

    rows_are = "a retriever's rows are chunks"
    store: Retriever

    @property
    def granularity(self) -> tuple[Granularity, ...]:
        return CHUNK_ONLY

    @property
    def indexed(self) -> tuple[Granularity, ...]:
        return CHUNK_ONLY

    def at_granularity(self, granularity: str | Sequence[str]) -> Self:
        """Itself at chunk granularity; any other is refused (IncompatibleArtifactError)."""
        wanted = parse_granularity(granularity)
        if wanted != CHUNK_ONLY:
            raise IncompatibleArtifactError(
                f"{self.rows_are}: it cannot be searched by {granularity_label(wanted)} units"
            )
        return self

    def describe(self) -> SearchInfo:
        """How the search searches (recorded with a calibration)."""
        return self.store.describe()


class RetrieverKnowledge(ChunkOnly, Searching):
    """:class:`~ragbound.knowledge.protocol.Knowledge` over any retriever.

    ``retriever``'s row ``i`` is ``chunks[i]``; its similarities (higher = closer) are what
    the tests read. ``embedder`` turns query texts into the vectors a vector retriever takes:
    an object with ``encode(texts)`` (and, optionally, ``encode_one(text)``) or a plain
    function of a list of texts; None for a retriever that takes texts. ``name`` names the
    embedder (it enters the fingerprint, and ``tau="auto"`` looks its temperature up).

    The fingerprint covers the name, the retriever's dimension and similarity and the chunk
    ids; a calibration made against it is refused against other chunks or another embedder
    name. It is searched at chunk granularity only. It has no folder, so a guard calibrated
    on it lives in this process (``Guard.save`` is refused) and its tripwires come from a
    folder indexed with the same embedder (``TripwireTest(knowledge, tripwires=...)``).

    Example:
        >>> from ragbound.stores import ExactStore
        >>> store = ExactStore(np.eye(3, dtype=np.float32))
        >>> knowledge = RetrieverKnowledge.of_texts(
        ...     store, ["red", "green", "blue"], embedder=lambda texts: np.eye(3)[: len(texts)],
        ...     name="one-hot")
        >>> knowledge.search(["a colour"], 2).indices.tolist()
        [[0, 1]]
    """

    path: Path | None = None

    def __init__(
        self,
        retriever: Retriever,
        chunks: Sequence[Chunk],
        *,
        embedder: QueryEmbedder | Callable[[list[str]], np.ndarray] | None,
        name: str,
    ):
        if len(chunks) != len(retriever):
            raise InputError(
                f"the retriever holds {len(retriever)} rows but {len(chunks)} chunks were "
                "given: row i of the retriever must be chunk i"
            )
        if retriever.query_kind == "vector" and embedder is None:
            raise InputError("a vector retriever needs the embedder its rows were embedded with")
        if not name.strip():
            raise InputError("name the embedder: it enters the knowledge's fingerprint")
        self._store = retriever
        self._chunks = list(chunks)
        self._embedder = _as_embedder(embedder)
        self._name = name
        self._corpus = corpus_hash(self._chunks)

    @classmethod
    def of_texts(
        cls,
        retriever: Retriever,
        texts: Sequence[str],
        *,
        embedder: QueryEmbedder | Callable[[list[str]], np.ndarray] | None,
        name: str,
        doc_ids: Sequence[str] | None = None,
        source: str = "retriever",
    ) -> RetrieverKnowledge:
        """Knowledge whose row ``i`` is ``texts[i]``, one chunk of document ``doc_ids[i]``
        (default: each row its own document, ``row-i``)."""
        ids = list(doc_ids) if doc_ids is not None else [f"row-{i}" for i in range(len(texts))]
        if len(ids) != len(texts):
            raise InputError(f"{len(ids)} doc_ids for {len(texts)} texts")
        positions: dict[str, int] = {}
        chunks = []
        for doc_id, text in zip(ids, texts, strict=True):
            position = positions[doc_id] = positions.get(doc_id, -1) + 1
            chunks.append(make_chunk(Document(id=doc_id, text=text, source=source), position, text))
        return cls(retriever, chunks, embedder=embedder, name=name)

    @property
    def store(self) -> Retriever:  # type: ignore[override]
        return self._store

    @property
    def chunks(self) -> Sequence[Chunk]:  # type: ignore[override]
        return self._chunks

    @property
    def embedder_name(self) -> str:
        return self._name

    @property
    def fingerprint(self) -> str:
        store = self._store
        return sha256_text(self._name, str(store.dimension), store.similarity, self._corpus)

    @property
    def corpus_hash(self) -> str:
        return self._corpus

    def query_embedder(self) -> QueryEmbedder | None:
        return self._embedder


def _as_embedder(
    embedder: QueryEmbedder | Callable[[list[str]], np.ndarray] | None,
) -> QueryEmbedder | None:
    if embedder is None or hasattr(embedder, "encode_one"):
        return embedder  # type: ignore[return-value]
    encode = getattr(embedder, "encode", embedder)
    if not callable(encode):
        raise InputError(
            "embedder must have encode(texts), or be a function of a list of texts, "
            f"got {type(embedder).__name__}"
        )
    return FunctionEmbedder(encode)
