"""Typed records of the corpus layer: documents as loaded, chunks as indexed."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Document(BaseModel):
    """One document of a corpus.

    ``source`` is the file it came from, relative to the folder it was found under (POSIX
    separators), so ids built from it do not depend on where the corpus lives on disk.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    source: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class Chunk(BaseModel):
    """A piece of a document that is embedded and retrieved on its own.

    ``position`` is the index of the chunk within its document (0-based) and ``n_words`` its
    number of whitespace-separated words. ``metadata`` is the document's metadata.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    doc_id: str
    source: str
    position: int
    n_words: int
    metadata: dict[str, Any] = Field(default_factory=dict)
