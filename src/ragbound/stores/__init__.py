"""Stores: the :class:`Retriever` protocol and its implementations.

Every store returns top-k similarities (higher = closer) and row indices for a batch of
queries; :func:`search_excluding` leaves rows out per query (leave-one-out).
"""

from ragbound.stores.base import (
    Hits,
    QueryKind,
    Retriever,
    SearchInfo,
    check_k,
    search_excluding,
    top_k_rows,
)
from ragbound.stores.exact import ExactStore
from ragbound.stores.lexical import BM25Store, bm25_info
from ragbound.stores.pooled import PooledStore

__all__ = [
    "BM25Store",
    "ExactStore",
    "Hits",
    "PooledStore",
    "QueryKind",
    "Retriever",
    "SearchInfo",
    "bm25_info",
    "check_k",
    "search_excluding",
    "top_k_rows",
]
