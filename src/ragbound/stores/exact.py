"""Exact inner-product search over float32 vectors held in one contiguous matrix."""

from __future__ import annotations

import numpy as np

from ragbound.errors import InputError
from ragbound.stores.base import Hits, check_k

# Queries are scored in blocks so a large batch never materialises n_queries x n_chunks at once.
_BLOCK_QUERIES = 256


class ExactStore:
    """Brute-force maximum inner product search (exact, like faiss ``IndexFlatIP``).

    For unit-normalised vectors the inner product is the cosine similarity.
    Vectors are kept as one C-contiguous float32 matrix and never copied per query.

    Example:
        >>> store = ExactStore(np.eye(3, dtype=np.float32))
        >>> store.search(np.array([[1.0, 0.0, 0.0]], dtype=np.float32), k=2).indices[0, 0]
        np.int64(0)
    """

    def __init__(self, vectors: np.ndarray):
        if vectors.ndim != 2:
            raise InputError(f"vectors must be 2-D (n, dim), got shape {vectors.shape}")
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)

    @property
    def size(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def dimension(self) -> int:
        return int(self.vectors.shape[1])

    def search(self, queries: np.ndarray, k: int) -> Hits:
        """Top-k inner products for each query row; rows sorted by similarity descending."""
        check_k(k, self.size)
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dimension:
            raise InputError(
                f"query vectors must have shape (n, {self.dimension}), got {queries.shape}"
            )
        sims = np.empty((len(queries), k), dtype=np.float32)
        idx = np.empty((len(queries), k), dtype=np.int64)
        for start in range(0, len(queries), _BLOCK_QUERIES):
            block = slice(start, start + _BLOCK_QUERIES)
            sims[block], idx[block] = _top_k(queries[block] @ self.vectors.T, k)
        return Hits(similarities=sims, indices=idx)


def _top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k columns of each row, sorted descending (ties broken by lower index)."""
    if k < scores.shape[1]:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    else:
        part = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    part_scores = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -part_scores), axis=1)
    idx = np.take_along_axis(part, order, axis=1)
    return np.take_along_axis(scores, idx, axis=1), idx.astype(np.int64)
