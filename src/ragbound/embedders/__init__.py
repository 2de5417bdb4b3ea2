"""Embedders: the bundled MiniLM default, optional MPNet, any local folder, a model behind an
OpenAI-compatible server, and BM25."""

from ragbound.embedders.base import DenseEmbedder, EmbedderInfo, QueryDenseEmbedder
from ragbound.embedders.endpoint import EndpointError, OpenAIEmbedder
from ragbound.embedders.registry import (
    DEFAULT_EMBEDDER,
    NAMED_EMBEDDERS,
    canonical_spec,
    is_endpoint,
    is_lexical,
    load_dense_embedder,
)
from ragbound.embedders.sentence import SentenceTransformerEmbedder, set_cpu_threads

__all__ = [
    "DEFAULT_EMBEDDER",
    "NAMED_EMBEDDERS",
    "DenseEmbedder",
    "EmbedderInfo",
    "EndpointError",
    "OpenAIEmbedder",
    "QueryDenseEmbedder",
    "SentenceTransformerEmbedder",
    "canonical_spec",
    "is_endpoint",
    "is_lexical",
    "load_dense_embedder",
    "set_cpu_threads",
]
