"""A retriever over groups of rows: each group (a chunk) scores as its best-matching row (unit).

Fine units (sentences, sentence windows) are searched in an inner store; every unit belongs to
one chunk. :class:`PooledStore` returns the top-k chunks by max-pooling: a chunk's similarity
is the highest similarity of any of its units, and each chunk appears once per query.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ragbound.embedders.base import Similarity
from ragbound.errors import InputError
from ragbound.stores.base import Hits, QueryKind, Retriever, SearchInfo, check_k

# units fetched per wanted chunk on the first try (more when one chunk's units crowd the top)
_FIRST_FANOUT = 4


class PooledStore:
    """Top-k groups of an inner retriever's rows, each group scored by its best row.

    ``owners[i]`` is the group (chunk row, 0..n_groups-1) of the inner store's row ``i``.
    ``search`` takes what the inner store takes and returns :class:`Hits` whose ``indices``
    are group rows, distinct within a query, and whose ``similarities`` are each group's
    best row similarity, descending; exact when the inner store is exact (it fetches more
    rows until ``k`` distinct groups are in hand). ``len`` is the number of groups.
    """

    def __init__(
        self, inner: Retriever[Any], owners: np.ndarray, n_groups: int, *, granularity: str
    ):
        owners = np.asarray(owners, dtype=np.int64)
        if owners.shape != (len(inner),):
            raise InputError(f"{len(owners)} owners given for a store of {len(inner)} rows")
        if len(owners) and (owners.min() < 0 or owners.max() >= n_groups):
            raise InputError(f"owners must be group rows in 0..{n_groups - 1}")
        self.inner = inner
        self.owners = owners
        self.n_groups = n_groups
        self.granularity = granularity

    @property
    def query_kind(self) -> QueryKind:
        return self.inner.query_kind

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def similarity(self) -> Similarity:
        return self.inner.similarity

    def __len__(self) -> int:
        return self.n_groups

    def describe(self) -> SearchInfo:
        """The inner store's search, with the units it pools as ``granularity``."""
        info = self.inner.describe()
        return info.model_copy(
            update={"parameters": {**info.parameters, "granularity": self.granularity}}
        )

    def search(self, queries: Any, k: int) -> Hits:
        check_k(k, self.n_groups)
        size = len(self.inner)
        fetch = min(size, k * _FIRST_FANOUT)
        while True:
            hits = self.inner.search(queries, fetch)
            pooled = _first_distinct(hits, self.owners, k)
            if pooled is not None or fetch == size:
                break
            fetch = min(size, fetch * _FIRST_FANOUT)
        if pooled is None:  # every row fetched and still too few groups: cannot happen
            raise InputError(f"k={k} is more than the {self.n_groups} chunks the units cover")
        return pooled


def _first_distinct(hits: Hits, owners: np.ndarray, k: int) -> Hits | None:
    """Per query, the first ``k`` distinct groups in rank order (None if a query has fewer).

    Rows come sorted by similarity, so a group's first appearance carries its best row.
    """
    groups = owners[hits.indices]
    n = len(groups)
    sims = np.empty((n, k), dtype=hits.similarities.dtype)
    rows = np.empty((n, k), dtype=np.int64)
    for i in range(n):
        _, first = np.unique(groups[i], return_index=True)
        if len(first) < k:
            return None
        keep = np.sort(first)[:k]
        sims[i], rows[i] = hits.similarities[i, keep], groups[i, keep]
    return Hits(similarities=sims, indices=rows)
