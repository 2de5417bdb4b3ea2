"""Stores return top-k similarities (higher = closer) and row indices."""

from ragbound.stores.base import Hits, check_k
from ragbound.stores.exact import ExactStore
from ragbound.stores.lexical import BM25Store, bm25_info

__all__ = ["BM25Store", "ExactStore", "Hits", "bm25_info", "check_k"]
