"""Load query files and validate single queries.

Oversize queries are refused, not truncated: the embedding model reads only its first ~256
tokens, so a silently truncated query would be tested on text the caller did not mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ragbound.errors import InputError
from ragbound.records import DEFAULT_TEXT_FIELDS, Record, read_records

DEFAULT_QUERY_FIELDS: tuple[str, ...] = DEFAULT_TEXT_FIELDS
"""Fields tried, in order, when a structured query file is loaded without ``field``."""

MAX_QUERY_CHARS = 10_000
"""Default longest query accepted, in characters."""


def validate_query(
    query: object, *, max_chars: int = MAX_QUERY_CHARS, location: str = "query"
) -> str:
    """Check one query and return it stripped of surrounding whitespace.

    The query must be a string that is not empty after stripping and has at most
    ``max_chars`` characters. An oversize query is deliberately refused rather than silently
    truncated (the embedding model would read only its first ~256 tokens anyway). Errors name
    the query by ``location``, e.g. ``"query 3"``.

    >>> validate_query("  What is RAG?  ")
    'What is RAG?'
    """
    if not isinstance(query, str):
        raise InputError(f"{location} must be a string, got {type(query).__name__}")
    stripped = query.strip()
    problem = query_problem(stripped, max_chars)
    if problem:
        raise InputError(f"{location} is {problem}")
    return stripped


def query_problem(query: str, max_chars: int = MAX_QUERY_CHARS) -> str | None:
    """What is wrong with a (stripped) query, or None: ``"empty"`` or its oversize length."""
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise InputError(f"max_chars must be a positive integer, got {max_chars!r}")
    if not query:
        return "empty"
    if len(query) > max_chars:
        return (
            f"{len(query):,} characters long; the limit is {max_chars:,} "
            "(oversize queries are refused, not truncated)"
        )
    return None


def load_queries(
    path: str | Path, *, field: str | None = None, max_chars: int = MAX_QUERY_CHARS
) -> list[str]:
    """Load queries from a record file, in file order (see :mod:`ragbound.records`).

    Text: one query per non-blank line. JSONL/JSON: objects or bare strings; CSV/TSV: a
    column. For objects and rows the query is ``field``, by default the first of "query",
    "question", "text", "prompt" present. The content decides the format when the extension
    does not: ``ragbound synth`` output saved as ``queries.out`` is read as JSONL.

    Raises InputError ``FILE:LINE (field 'x'): problem`` for a missing or non-string field,
    an empty or oversize query, and ``FILE: ...`` for a missing path, a file that is not UTF-8
    or not valid JSON/CSV, and a file with no queries.
    """
    return [query for _, query in load_query_records(path, field=field, max_chars=max_chars)]


def load_query_records(
    path: str | Path, *, field: str | None = None, max_chars: int = MAX_QUERY_CHARS
) -> list[tuple[Record, str]]:
    """As :func:`load_queries`, each query with its record (line, other fields such as a log's
    timestamp)."""
    found = [(record, _query(record, field, max_chars)) for record in read_records(path)]
    if not found:
        raise InputError(f"{path}: no queries found")
    return found


def _query(record: Record, field: str | None, max_chars: int) -> str:
    """One record's query, checked, or the one-format InputError."""
    text = record.text(field, DEFAULT_QUERY_FIELDS)
    problem = query_problem(text, max_chars)
    if problem:
        raise record.error(problem, record.text_field(field, DEFAULT_QUERY_FIELDS))
    return text


def split_queries(
    queries: Sequence[str], fraction: float = 0.5, seed: int = 0
) -> tuple[list[str], list[str]]:
    """Seeded disjoint split (e.g. calibration / test halves) of a query list."""
    order = np.random.default_rng(seed).permutation(len(queries))
    cut = round(len(queries) * fraction)
    return [queries[i] for i in order[:cut]], [queries[i] for i in order[cut:]]
