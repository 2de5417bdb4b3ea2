"""Query preparation, once per request: validate the texts, then embed them if the retriever
searches vectors.

Every path that searches (the knowledge base, the guard, the gate, the tripwires, the
learned score) goes through :func:`prepare`, and a batch validated once
(:func:`query_texts`) is not validated again further down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ragbound.corpus import validate_query
from ragbound.errors import InputError
from ragbound.stores import Retriever

SEARCH_BATCH = 256
"""Queries embedded and searched together: the unit of work of every engine."""


class QueryTexts(tuple[str, ...]):
    """Query texts already validated (stripped, non-empty, within the length limit)."""


def query_texts(queries: Sequence[str], *, max_chars: int | None = None) -> QueryTexts:
    """``queries`` validated, numbered from 1 in errors (InputError); an already validated
    batch is returned as it is. ``max_chars`` overrides the default length limit."""
    if isinstance(queries, QueryTexts):
        return queries
    limit = {} if max_chars is None else {"max_chars": max_chars}
    texts = [validate_query(q, location=f"query {i + 1}", **limit) for i, q in enumerate(queries)]
    if not texts:
        raise InputError("no queries given")
    return QueryTexts(texts)


class QueryEmbedder(Protocol):
    """What preparing a vector search needs of an embedder."""

    def encode(self, texts: list[str]) -> np.ndarray: ...

    def encode_one(self, text: str) -> np.ndarray: ...


@dataclass(frozen=True)
class Prepared:
    """A batch ready to search: the validated texts and, for a vector retriever, their
    vectors (n, dimension) float32."""

    texts: QueryTexts
    vectors: np.ndarray | None

    @property
    def searched(self) -> np.ndarray | QueryTexts:
        """What the retriever takes: the vectors, or the texts (a lexical retriever)."""
        return self.texts if self.vectors is None else self.vectors


def prepare(
    queries: Sequence[str], retriever: Retriever, embedder: QueryEmbedder | None
) -> Prepared:
    """Validate ``queries`` and, when ``retriever`` searches vectors, embed them with
    ``embedder`` (one query: the embedder's single-query path, no batching overhead)."""
    texts = query_texts(queries)
    if retriever.query_kind == "text":
        return Prepared(texts, None)
    if embedder is None:
        raise InputError("a vector retriever needs an embedder to search with query texts")
    vectors = embedder.encode_one(texts[0]) if len(texts) == 1 else embedder.encode(list(texts))
    return Prepared(texts, vectors)
