"""Load query files and validate single queries.

Oversize queries are refused, not truncated: the embedding model reads only its first ~256
tokens, so a silently truncated query would be tested on text the caller did not mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ragbound.errors import InputError
from ragbound.records import Record, read_records

MAX_QUERY_CHARS = 10_000
"""Default longest query accepted, in characters."""


def validate_query(
    query: object, *, max_chars: int = MAX_QUERY_CHARS, location: str = "query"
) -> str:
    """One query stripped; InputError naming it by ``location`` (``"query 3"``) unless it is
    a string, not blank, of at most ``max_chars`` characters."""
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
    """Load queries from a record file (:mod:`ragbound.records`), in file order: each record's
    :meth:`~ragbound.records.Record.text` (``field``, else the first default field present).
    InputError ``FILE:LINE (field 'x'): problem`` for a bad record, and for a file without any.
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
    text = record.text(field)
    problem = query_problem(text, max_chars)
    if problem:
        raise record.error(problem, record.text_field(field))
    return text


def split_queries(
    queries: Sequence[str], fraction: float = 0.5, seed: int = 0
) -> tuple[list[str], list[str]]:
    """Seeded disjoint split (e.g. calibration / test halves) of a query list."""
    order = np.random.default_rng(seed).permutation(len(queries))
    cut = round(len(queries) * fraction)
    return [queries[i] for i in order[:cut]], [queries[i] for i in order[cut:]]
