"""Embedders: the bundled MiniLM default, optional MPNet, any local folder, a model behind an
OpenAI-compatible server, and BM25.

Names load from their submodule on first use, so a knowledge base that reads one of them
(say ``EmbedderInfo``) does not import the HTTP client of the server embedder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragbound._lazy import lazy_attributes

_SOURCES: dict[str, str] = {
    "DenseEmbedder": "ragbound.embedders.base",
    "EmbedderInfo": "ragbound.embedders.base",
    "QueryDenseEmbedder": "ragbound.embedders.base",
    "EndpointError": "ragbound.embedders.endpoint",
    "OpenAIEmbedder": "ragbound.embedders.endpoint",
    "DEFAULT_EMBEDDER": "ragbound.embedders.registry",
    "NAMED_EMBEDDERS": "ragbound.embedders.registry",
    "canonical_spec": "ragbound.embedders.registry",
    "is_endpoint": "ragbound.embedders.registry",
    "is_lexical": "ragbound.embedders.registry",
    "load_dense_embedder": "ragbound.embedders.registry",
    "SentenceTransformerEmbedder": "ragbound.embedders.sentence",
    "set_cpu_spinning": "ragbound.embedders.sentence",
    "set_cpu_threads": "ragbound.embedders.sentence",
}

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
    "set_cpu_spinning",
    "set_cpu_threads",
]

if TYPE_CHECKING:
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
    from ragbound.embedders.sentence import (
        SentenceTransformerEmbedder,
        set_cpu_spinning,
        set_cpu_threads,
    )

__getattr__, __dir__ = lazy_attributes(__name__, _SOURCES, globals())
