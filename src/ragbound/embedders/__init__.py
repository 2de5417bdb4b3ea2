"""Embedders: the bundled MiniLM default, optional MPNet, any local folder, and BM25."""

from ragbound.embedders.base import DenseEmbedder, EmbedderInfo
from ragbound.embedders.registry import (
    DEFAULT_EMBEDDER,
    NAMED_EMBEDDERS,
    canonical_spec,
    is_lexical,
    load_dense_embedder,
)
from ragbound.embedders.sentence import SentenceTransformerEmbedder, set_cpu_threads

__all__ = [
    "DEFAULT_EMBEDDER",
    "NAMED_EMBEDDERS",
    "DenseEmbedder",
    "EmbedderInfo",
    "SentenceTransformerEmbedder",
    "canonical_spec",
    "is_lexical",
    "load_dense_embedder",
    "set_cpu_threads",
]
