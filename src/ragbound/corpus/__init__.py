"""The corpus layer: load documents and queries, split sentences, make stable chunks."""

from __future__ import annotations

from ragbound.corpus.chunker import (
    ChunkingParams,
    chunk_document,
    chunk_documents,
    chunk_id,
    split_sentences,
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
from ragbound.corpus.sequence import ChunkFile, ChunkSequence

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
