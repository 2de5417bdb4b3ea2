"""The retriever protocol every store implements, what a search returns, and shared top-k.

A store answers batches: a matrix of query vectors (``query_kind == "vector"``) or a list of
query texts (``query_kind == "text"``) per call, never one query per call, so a store that
lives in another process (a database) pays one round trip per batch. It hands back
similarities (higher = closer) already converted from whatever its engine computes, and it
never exposes the matrix it searches.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict

from ragbound.embedders.base import Similarity
from ragbound.errors import InputError

QueryKind = Literal["vector", "text"]
Queries_contra = TypeVar("Queries_contra", contravariant=True)


@dataclass(frozen=True)
class Hits:
    """Top-k results for a batch of queries.

    ``similarities`` (n_queries, k), each row sorted descending (higher = closer), float32
    (float64 from a float64 :class:`~ragbound.stores.ExactStore`); ``indices`` (n_queries, k)
    int64 row numbers into the store.
    """

    similarities: np.ndarray
    indices: np.ndarray


class SearchInfo(BaseModel):
    """How a store searches, recorded with a calibration so a later check can tell whether it
    runs the same search (an approximate index returns lower top similarities than exact).

    ``backend`` names the engine (``exact``, ``bm25s``, ...); ``exact`` is False for
    approximate indexes; ``parameters`` holds what changes the results (e.g. ``ef_search``).
    """

    model_config = ConfigDict(frozen=True)

    backend: str
    exact: bool
    similarity: Similarity
    parameters: dict[str, str | int | float | bool] = {}

    def same_results(self, other: SearchInfo) -> bool:
        """True when both searches return the same similarities: two exact searches (any
        backend: they agree to float rounding), or the same approximate backend with the same
        similarity and parameters."""
        if self.exact and other.exact:
            return self.similarity == other.similarity
        return self == other

    def summary(self) -> str:
        """One line for messages, e.g. ``faiss-hnsw (approximate, ef_search=10, m=16)``."""
        kind = "exact" if self.exact else "approximate"
        details = ", ".join(f"{name}={value}" for name, value in sorted(self.parameters.items()))
        return f"{self.backend} ({kind}, {self.similarity}{', ' if details else ''}{details})"


@runtime_checkable
class Retriever(Protocol[Queries_contra]):
    """A searchable collection of rows: the one interface every store implements.

    ``search(queries, k)`` takes a batch of what the store indexes (``query_kind``: "vector"
    is an (n, dimension) float matrix, "text" a sequence of strings) and returns
    :class:`Hits`: for each query the ``k`` most similar rows, similarity descending (an
    exact store breaks ties by the lower row index), as similarities the store converted from
    its engine's distances. ``k`` must be an int in [1, len(store)] (InputError otherwise).
    ``dimension`` is the vector length (0 for a lexical store); ``similarity`` names the
    score (``cosine``, ``dot``, ``bm25``); ``describe()`` says exact or approximate and with
    which parameters. Rows to leave out per query: :func:`search_excluding`.
    """

    @property
    def query_kind(self) -> QueryKind: ...

    @property
    def dimension(self) -> int: ...

    @property
    def similarity(self) -> Similarity: ...

    def __len__(self) -> int: ...

    def search(self, queries: Queries_contra, k: int) -> Hits: ...

    def describe(self) -> SearchInfo: ...


def check_k(k: int, size: int) -> None:
    """k must be a positive int no larger than the number of stored chunks."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}")
    if k > size:
        raise InputError(
            f"k={k} is larger than the knowledge base ({size} chunks); "
            f"use k <= {size} (for example --k {min(size, 32)})"
        )


def checked_queries(queries: np.ndarray, k: int, size: int, dimension: int) -> np.ndarray:
    """``queries`` as a contiguous float32 (n, dimension) matrix, after :func:`check_k`
    (InputError for another shape)."""
    check_k(k, size)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    if queries.ndim != 2 or queries.shape[1] != dimension:
        raise InputError(f"query vectors must have shape (n, {dimension}), got {queries.shape}")
    return queries


def top_k_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` highest columns of each row of ``scores`` (n, m), sorted descending, ties
    broken by the lower column index; returns (scores, int64 columns), each (n, k).

    ``argpartition`` is linear in m but picks an arbitrary column among values tied at the
    k-th place; rows with such a tie are re-ranked with a stable sort so the result is the
    same as a full stable sort of every row.
    """
    n_rows, n_cols = scores.shape
    if k < n_cols:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(scores, part, axis=1).min(axis=1)
        straddles = np.count_nonzero(scores >= kth[:, None], axis=1) > k
        if straddles.any():
            part[straddles] = np.argsort(-scores[straddles], axis=1, kind="stable")[:, :k]
    else:
        part = np.broadcast_to(np.arange(n_cols), (n_rows, n_cols))
    part_scores = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -part_scores), axis=1)
    columns = np.take_along_axis(part, order, axis=1)
    return np.take_along_axis(scores, columns, axis=1), columns.astype(np.int64)


def search_excluding(
    retriever: Retriever,
    queries: np.ndarray | Sequence[str],
    k: int,
    exclude: Sequence[Collection[int]],
) -> Hits:
    """Top-``k`` rows per query, leaving out the rows ``exclude[i]`` for query ``i``.

    One batch call that fetches ``k`` plus the largest exclusion, then drops the excluded
    rows, so every store (exact, lexical, or in another process) supports leave-one-out the
    same way. Rows outside the store are ignored; each query must keep at least ``k`` rows.
    """
    if len(exclude) != len(queries):
        raise InputError(f"{len(exclude)} exclusion sets given for {len(queries)} queries")
    size = len(retriever)
    check_k(k, size)
    excluded = [{int(row) for row in rows if 0 <= row < size} for rows in exclude]
    widest = max(map(len, excluded), default=0)
    if k > size - widest:
        raise InputError(
            f"k={k} is larger than the {size - widest} rows left after excluding {widest} of {size}"
        )
    fetched = retriever.search(queries, min(size, k + widest))
    keep = np.ones(fetched.indices.shape, dtype=bool)
    for row, rows in enumerate(excluded):
        if rows:
            keep[row] = ~np.isin(fetched.indices[row], list(rows))
    # a stable sort of "excluded" flags puts each row's kept columns first, in their order
    columns = np.argsort(~keep, axis=1, kind="stable")[:, :k]
    return Hits(
        similarities=np.take_along_axis(fetched.similarities, columns, axis=1),
        indices=np.take_along_axis(fetched.indices, columns, axis=1),
    )
