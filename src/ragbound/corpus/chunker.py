"""Pack documents' whole sentences (:mod:`ragbound.corpus.sentences`) into overlapping chunks.

Chunk ids are a hash of the document id, the chunk position and the chunk text, so the same
corpus chunked with the same parameters gives the same ids on every run and machine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ragbound.corpus.models import Chunk, Document
from ragbound.corpus.sentences import SPLITTER, SplitterName, split_sentences
from ragbound.errors import InputError

DEFAULT_CHUNK_WORDS = 200
DEFAULT_OVERLAP = 40


class ChunkingParams(BaseModel):
    """The chunking parameters, as recorded in an index manifest: bad values are an
    InputError when constructed, pydantic's ValidationError when read from stored data."""

    model_config = ConfigDict(frozen=True)

    chunk_words: int = Field(default=DEFAULT_CHUNK_WORDS, ge=1)
    overlap: int = Field(default=DEFAULT_OVERLAP, ge=0)
    splitter: SplitterName = SPLITTER

    def __init__(self, **data: Any) -> None:
        """Check chunk_words and overlap with a clear InputError, then build the model."""
        _check_params(
            data.get("chunk_words", DEFAULT_CHUNK_WORDS), data.get("overlap", DEFAULT_OVERLAP)
        )
        super().__init__(**data)

    @field_validator("splitter", mode="before")
    @classmethod
    def _this_versions_splitter(cls, value: object) -> object:
        """Refuse another splitter's name with the way out: an index chunked by an older
        ragbound (blingfire's sentences) is indexed again, not loaded."""
        if value != SPLITTER:
            raise ValueError(
                f"chunked with sentence splitter {value!r}, which this ragbound does not have "
                f"(it splits with {SPLITTER!r}); index the documents again"
            )
        return value

    @model_validator(mode="after")
    def _overlap_below_chunk_words(self) -> Self:
        """Refuse an overlap that is not smaller than the chunk size."""
        if self.overlap >= self.chunk_words:
            raise ValueError(
                f"overlap ({self.overlap}) must be smaller than chunk_words ({self.chunk_words})"
            )
        return self


def chunk_document(
    doc: Document, *, chunk_words: int = DEFAULT_CHUNK_WORDS, overlap: int = DEFAULT_OVERLAP
) -> list[Chunk]:
    """Pack a document's whole sentences greedily into chunks of at most ``chunk_words`` words.

    A chunk starts with the trailing whole sentences of the previous chunk that together have
    at most ``overlap`` words; that overlap is dropped when it would not leave room for the
    next sentence. A sentence is cut only when it alone is longer than ``chunk_words``: it
    then becomes windows of ``chunk_words`` words that overlap by ``overlap`` words, and no
    sentence overlap is carried across it. Words are whitespace-separated tokens.

    Raises InputError unless ``chunk_words >= 1`` and ``0 <= overlap < chunk_words``.
    """
    texts = pack_sentences(split_sentences(doc.text), chunk_words=chunk_words, overlap=overlap)
    return [make_chunk(doc, position, text) for position, text in enumerate(texts)]


def pack_sentences(
    sentences: Sequence[str],
    *,
    chunk_words: int = DEFAULT_CHUNK_WORDS,
    overlap: int = DEFAULT_OVERLAP,
) -> list[str]:
    """The chunk texts :func:`chunk_document` packs from a document's sentences, by its rules
    (InputError unless ``chunk_words >= 1`` and ``0 <= overlap < chunk_words``)."""
    _check_params(chunk_words, overlap)
    return _pack(list(sentences), chunk_words, overlap)


def chunk_documents(
    docs: Iterable[Document],
    *,
    chunk_words: int = DEFAULT_CHUNK_WORDS,
    overlap: int = DEFAULT_OVERLAP,
) -> list[Chunk]:
    """Chunk every document in order; see :func:`chunk_document`."""
    _check_params(chunk_words, overlap)
    chunks: list[Chunk] = []
    for doc in docs:
        chunks.extend(chunk_document(doc, chunk_words=chunk_words, overlap=overlap))
    return chunks


def chunk_id(doc_id: str, position: int, text: str) -> str:
    """The stable id of a chunk: the first 16 hex digits of a SHA-256 of its identity."""
    return hashlib.sha256(f"{doc_id}\x00{position}\x00{text}".encode()).hexdigest()[:16]


def _check_params(chunk_words: object, overlap: object) -> None:
    """Raise InputError unless chunk_words >= 1 and 0 <= overlap < chunk_words (integers)."""
    size = _check_int("chunk_words", chunk_words)
    step_back = _check_int("overlap", overlap)
    if size < 1:
        raise InputError(f"chunk_words must be at least 1, got {size}")
    if not 0 <= step_back < size:
        raise InputError(
            f"overlap must be at least 0 and smaller than chunk_words ({size}), got {step_back}"
        )


def _check_int(name: str, value: object) -> int:
    """Return value if it is an int (not a bool), else raise InputError naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{name} must be an integer, got {value!r}")
    return value


def make_chunk(doc: Document, position: int, text: str) -> Chunk:
    """Build a chunk of a document with its stable id and the document's metadata."""
    return Chunk(
        id=chunk_id(doc.id, position, text),
        text=text,
        doc_id=doc.id,
        source=doc.source,
        position=position,
        n_words=len(text.split()),
        metadata=dict(doc.metadata),
    )


def _pack(sentences: list[str], chunk_words: int, overlap: int) -> list[str]:
    """Greedily pack sentences into chunk texts (see chunk_document for the rules)."""
    texts: list[str] = []
    current: list[str] = []
    fresh = False  # does `current` hold a sentence not yet emitted in a chunk?
    for sentence in sentences:
        size = _n_words(sentence)
        if size > chunk_words:
            if fresh:
                texts.append(" ".join(current))
            texts.extend(_word_windows(sentence.split(), chunk_words, overlap))
            current, fresh = [], False
            continue
        if current and _total_words(current) + size > chunk_words:
            if fresh:
                texts.append(" ".join(current))
            current = _overlap_tail(current, overlap)
            if _total_words(current) + size > chunk_words:
                current = []
        current.append(sentence)
        fresh = True
    if fresh:
        texts.append(" ".join(current))
    return texts


def _overlap_tail(sentences: list[str], overlap: int) -> list[str]:
    """The longest run of trailing whole sentences with at most ``overlap`` words in total."""
    tail: list[str] = []
    total = 0
    for sentence in reversed(sentences):
        total += _n_words(sentence)
        if total > overlap:
            break
        tail.append(sentence)
    return tail[::-1]


def _word_windows(words: list[str], chunk_words: int, overlap: int) -> list[str]:
    """Cut a too-long word sequence into windows of chunk_words words overlapping by overlap."""
    step = chunk_words - overlap
    windows = []
    for start in range(0, len(words), step):
        windows.append(" ".join(words[start : start + chunk_words]))
        if start + chunk_words >= len(words):
            break
    return windows


def _n_words(text: str) -> int:
    """Number of whitespace-separated words."""
    return len(text.split())


def _total_words(sentences: list[str]) -> int:
    """Total number of words in a list of sentences."""
    return sum(_n_words(sentence) for sentence in sentences)
