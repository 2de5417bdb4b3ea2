"""What checking a query needs of the knowledge it is checked against: :class:`Knowledge`.

The request path (the guard, the gate, the tripwire guard, the learned score) reads the
knowledge only through this protocol: a :class:`~ragbound.stores.Retriever` (``store``:
``search``, ``describe``, ``query_kind``, ``dimension``, ``similarity``), the embedder that
turns query texts into what it searches, and the chunk behind each row it returns. A ragbound
folder (:class:`~ragbound.knowledge.KnowledgeBase`) is one; a retriever the user already runs
is another (:class:`~ragbound.knowledge.retriever.RetrieverKnowledge`).

:class:`Searching` writes, once, what both derive from those three: validate and embed a
batch (:meth:`Searching.prepare`), search it, embed for the learned score, find a row's chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from ragbound.corpus import Chunk
from ragbound.corpus.groups import chunk_groups
from ragbound.corpus.units import Granularity
from ragbound.errors import InputError
from ragbound.knowledge.query import Prepared, QueryEmbedder, prepare
from ragbound.stores import Hits, Retriever, SearchInfo


@runtime_checkable
class Knowledge(Protocol):
    """Knowledge as the request path sees it (similarities: higher = closer).

    - ``store``: the search at ``granularity``; its row ``i`` is ``chunks[i]``.
    - ``query_embedder()``: what embeds query texts for a vector ``store`` (None for a
      lexical one); ``embedder_name`` names it (the temperature of ``tau="auto"``).
    - ``fingerprint``: changes whenever the rows or the embedder change; a calibration
      records it and is refused against other knowledge. ``corpus_hash``: the chunks alone.
    - ``indexed``: the granularities :meth:`at_granularity` can give (``("chunk",)`` unless
      fine units were indexed).
    - ``path``: the folder a calibration is saved in (None: not saved anywhere).
    - ``groups()``: per chunk row, the group leave-documents-out masks together (its
      document, or the value of the knowledge base's group field).
    """

    @property
    def store(self) -> Retriever: ...

    @property
    def embedder_name(self) -> str: ...

    @property
    def fingerprint(self) -> str: ...

    @property
    def corpus_hash(self) -> str: ...

    @property
    def granularity(self) -> tuple[Granularity, ...]: ...

    @property
    def indexed(self) -> tuple[Granularity, ...]: ...

    @property
    def chunks(self) -> Sequence[Chunk]: ...

    @property
    def path(self) -> Path | None: ...

    def query_embedder(self) -> QueryEmbedder | None: ...

    def at_granularity(self, granularity: str | Sequence[str]) -> Knowledge: ...

    def describe(self) -> SearchInfo: ...

    def __len__(self) -> int: ...

    def prepare(self, queries: Sequence[str]) -> Prepared: ...

    def search(self, queries: Sequence[str], k: int) -> Hits: ...

    def embed(self, queries: Sequence[str]) -> np.ndarray: ...

    def chunk_at(self, row: int) -> Chunk: ...

    def groups(self) -> list[str]: ...


class Searching:
    """What :class:`Knowledge` derives from ``store``, ``query_embedder()`` and ``chunks``;
    a class mixes it in and provides those three."""

    store: Retriever
    chunks: Sequence[Chunk]
    # the metadata field grouping records for leave-documents-out (a KnowledgeBase's comes
    # from its manifest; other knowledge masks each document alone)
    group_field: str | None = None

    def query_embedder(self) -> QueryEmbedder | None:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.chunks)

    def prepare(self, queries: Sequence[str]) -> Prepared:
        """The queries validated and, when the search takes vectors, embedded (see
        :func:`ragbound.knowledge.query.prepare`)."""
        store = self.store
        embedder = self.query_embedder() if store.query_kind == "vector" else None
        return prepare(queries, store, embedder)

    def search(self, queries: Sequence[str], k: int) -> Hits:
        """Top-k chunks for each query: similarities (higher = closer) and chunk rows."""
        return self.store.search(self.prepare(queries).searched, k)

    def embed(self, queries: Sequence[str]) -> np.ndarray:
        """Query embeddings, (n, dimension) float32 (vector knowledge only)."""
        embedder = self.query_embedder()
        if embedder is None:
            raise InputError("lexical knowledge has no embedder to embed queries with")
        return embedder.encode(list(queries))

    def chunk_at(self, row: int) -> Chunk:
        return self.chunks[int(row)]

    def groups(self) -> list[str]:
        """Per chunk row, its group for leave-documents-out
        (:func:`ragbound.corpus.groups.chunk_groups`)."""
        return chunk_groups(self.chunks, self.group_field)


def check_statistic(kb: object, statistic: str) -> None:
    """Refuse (InputError, one line) a statistic ``kb``'s similarities cannot give.

    Knowledge that knows its scores only up to an increasing transform (e.g. a framework's
    relevance scores) declares ``statistics`` (the names it supports) and
    ``statistics_reason`` (why the others are refused); knowledge without ``statistics``
    supports every statistic.
    """
    supported = getattr(kb, "statistics", None)
    if supported is None or statistic in supported:
        return
    reason = getattr(kb, "statistics_reason", "its scores do not support it")
    raise InputError(
        f"statistic {statistic} is refused on this knowledge: {reason}; "
        f"use one of {', '.join(supported)}"
    )
