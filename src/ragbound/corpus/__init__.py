"""The corpus layer: load documents and queries, split sentences, make stable chunks.

Names load from their submodule on first use, so importing a light submodule (say
``corpus.origins``) does not import the loaders (numpy, pydantic).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragbound._lazy import lazy_attributes

_SOURCES: dict[str, str] = {
    "ChunkingParams": "ragbound.corpus.chunker",
    "chunk_document": "ragbound.corpus.chunker",
    "chunk_documents": "ragbound.corpus.chunker",
    "chunk_id": "ragbound.corpus.chunker",
    "LINE_IDS": "ragbound.corpus.loader",
    "SUPPORTED_EXTENSIONS": "ragbound.corpus.loader",
    "LoadReport": "ragbound.corpus.loader",
    "load_documents": "ragbound.corpus.loader",
    "load_documents_with_report": "ragbound.corpus.loader",
    "Chunk": "ragbound.corpus.models",
    "Document": "ragbound.corpus.models",
    "MAX_QUERY_CHARS": "ragbound.corpus.queries",
    "load_queries": "ragbound.corpus.queries",
    "load_query_records": "ragbound.corpus.queries",
    "validate_query": "ragbound.corpus.queries",
    "split_sentences": "ragbound.corpus.sentences",
    "ChunkFile": "ragbound.corpus.sequence",
    "ChunkSequence": "ragbound.corpus.sequence",
}

__all__ = [
    "LINE_IDS",
    "MAX_QUERY_CHARS",
    "SUPPORTED_EXTENSIONS",
    "Chunk",
    "ChunkFile",
    "ChunkSequence",
    "ChunkingParams",
    "Document",
    "LoadReport",
    "chunk_document",
    "chunk_documents",
    "chunk_id",
    "load_documents",
    "load_documents_with_report",
    "load_queries",
    "load_query_records",
    "split_sentences",
    "validate_query",
]

if TYPE_CHECKING:
    from ragbound.corpus.chunker import (
        ChunkingParams,
        chunk_document,
        chunk_documents,
        chunk_id,
    )
    from ragbound.corpus.loader import (
        LINE_IDS,
        SUPPORTED_EXTENSIONS,
        LoadReport,
        load_documents,
        load_documents_with_report,
    )
    from ragbound.corpus.models import Chunk, Document
    from ragbound.corpus.queries import (
        MAX_QUERY_CHARS,
        load_queries,
        load_query_records,
        validate_query,
    )
    from ragbound.corpus.sentences import split_sentences
    from ragbound.corpus.sequence import ChunkFile, ChunkSequence

__getattr__, __dir__ = lazy_attributes(__name__, _SOURCES, globals())
