"""Exact inner-product search over vectors held in one contiguous matrix in this process."""

from __future__ import annotations

from typing import Literal

import numpy as np

from ragbound.embedders.base import Similarity
from ragbound.errors import InputError
from ragbound.stores.base import Hits, QueryKind, SearchInfo, check_k, top_k_rows

# Queries are scored in blocks so a large batch never materialises n_queries x n_chunks at once.
_BLOCK_QUERIES = 256


class ExactStore:
    """Brute-force maximum inner product search (exact, like faiss ``IndexFlatIP``).

    A :class:`~ragbound.stores.Retriever` over vectors: ``search`` takes an (n, dimension)
    matrix of query vectors. ``similarity`` names what the inner product is: ``cosine`` when
    the caller's vectors are unit length (every bundled embedder), ``dot`` otherwise.
    Vectors are kept as one C-contiguous matrix of ``precision`` (float32 unless float64 is
    asked for) and never copied per query.

    Example:
        >>> store = ExactStore(np.eye(3, dtype=np.float32))
        >>> store.search(np.array([[1.0, 0.0, 0.0]], dtype=np.float32), k=2).indices[0, 0]
        np.int64(0)
    """

    query_kind: QueryKind = "vector"

    def __init__(
        self,
        vectors: np.ndarray,
        *,
        similarity: Similarity = "dot",
        precision: Literal["float32", "float64"] = "float32",
    ):
        if vectors.ndim != 2:
            raise InputError(f"vectors must be 2-D (n, dim), got shape {vectors.shape}")
        if similarity == "bm25":
            raise InputError("an exact vector store scores by inner product, not bm25")
        self.vectors = np.ascontiguousarray(vectors, dtype=np.dtype(precision))
        self._similarity: Similarity = similarity

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def dimension(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def similarity(self) -> Similarity:
        return self._similarity

    def describe(self) -> SearchInfo:
        return SearchInfo(
            backend="exact",
            exact=True,
            similarity=self._similarity,
            parameters={"precision": str(self.vectors.dtype)},
        )

    def search(self, queries: np.ndarray, k: int) -> Hits:
        """Top-k inner products for each query row; rows sorted by similarity descending."""
        check_k(k, len(self))
        queries = np.ascontiguousarray(queries, dtype=self.vectors.dtype)
        if queries.ndim != 2 or queries.shape[1] != self.dimension:
            raise InputError(
                f"query vectors must have shape (n, {self.dimension}), got {queries.shape}"
            )
        sims = np.empty((len(queries), k), dtype=self.vectors.dtype)
        idx = np.empty((len(queries), k), dtype=np.int64)
        for start in range(0, len(queries), _BLOCK_QUERIES):
            block = slice(start, start + _BLOCK_QUERIES)
            sims[block], idx[block] = top_k_rows(queries[block] @ self.vectors.T, k)
        return Hits(similarities=sims, indices=idx)
