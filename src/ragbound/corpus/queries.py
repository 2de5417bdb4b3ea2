"""Load query files and validate single queries.

Oversize queries are refused, not truncated: the embedding model reads only its first ~256
tokens, so a silently truncated query would be tested on text the caller did not mean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragbound.corpus._files import (
    csv_rows,
    field_list,
    json_kind,
    jsonl_lines,
    parse_json,
    read_utf8,
)
from ragbound.errors import InputError, where

DEFAULT_QUERY_FIELDS: tuple[str, ...] = ("query", "question", "text")
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
    the query by ``location``, e.g. ``"query 3"`` or ``"queries.jsonl:3 (field 'query')"``.

    >>> validate_query("  What is RAG?  ")
    'What is RAG?'
    """
    if not isinstance(query, str):
        raise InputError(f"{location} must be a string, got {type(query).__name__}")
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise InputError(f"max_chars must be a positive integer, got {max_chars!r}")
    stripped = query.strip()
    if not stripped:
        raise InputError(f"{location} is empty")
    if len(stripped) > max_chars:
        raise InputError(
            f"{location} is {len(stripped):,} characters long; the limit is {max_chars:,} "
            "(oversize queries are refused, not truncated)"
        )
    return stripped


def load_queries(
    path: str | Path, *, field: str | None = None, max_chars: int = MAX_QUERY_CHARS
) -> list[str]:
    """Load queries from a file, in file order, each checked by :func:`validate_query`.

    ``.jsonl``: one JSON object (or string) per non-blank line. ``.csv``: a column of a file
    with a header. ``.json``: a list of strings or of objects. Any other extension (``.txt``):
    one query per line, blank lines skipped. For objects and CSV the query is ``field``, by
    default the first of "query", "question", "text" that is present.

    Raises InputError naming file, line and field for a missing path, a file that is not UTF-8
    or not valid JSON/CSV, a missing or non-string field, an empty or oversize query, and a
    file with no queries.
    """
    file = Path(path)
    display = str(path)
    if not file.exists():
        raise InputError(f"{display}: no such file")
    if not file.is_file():
        raise InputError(f"{display}: not a file")
    text = read_utf8(file, display)
    suffix = file.suffix.lower()
    if suffix == ".jsonl":
        queries = _from_jsonl(text, display, field, max_chars)
    elif suffix == ".json":
        queries = _from_json(text, display, field, max_chars)
    elif suffix == ".csv":
        queries = _from_csv(text, display, field, max_chars)
    else:
        queries = _from_lines(text, display, max_chars)
    if not queries:
        raise InputError(f"{display}: no queries found")
    return queries


def _from_lines(text: str, display: str, max_chars: int) -> list[str]:
    """One query per non-blank line."""
    return [
        validate_query(line, max_chars=max_chars, location=f"query at {where(display, number)}")
        for number, line in enumerate(text.split("\n"), start=1)
        if line.strip()
    ]


def _from_jsonl(text: str, display: str, field: str | None, max_chars: int) -> list[str]:
    """One JSON object or string per non-blank line."""
    return [
        _from_item(parse_json(line, display, number), where(display, number), field, max_chars)
        for number, line in jsonl_lines(text)
    ]


def _from_json(text: str, display: str, field: str | None, max_chars: int) -> list[str]:
    """A JSON list of strings or objects."""
    items = parse_json(text, display)
    if not isinstance(items, list):
        raise InputError(
            f"{display}: expected a JSON list of queries (strings or objects), "
            f"got {json_kind(items)}"
        )
    return [
        _from_item(item, f"{display}[{index}]", field, max_chars)
        for index, item in enumerate(items)
    ]


def _from_csv(text: str, display: str, field: str | None, max_chars: int) -> list[str]:
    """The query column of a CSV file with a header."""
    header, rows = csv_rows(text, display)
    column = _pick_field(header, display, field, what="column")
    return [
        validate_query(row[column], max_chars=max_chars, location=where(display, line, column))
        for line, row in rows
    ]


def _from_item(item: Any, location: str, field: str | None, max_chars: int) -> str:
    """The query of one JSON item: the item itself if a string, else its query field."""
    if isinstance(item, str):
        return validate_query(item, max_chars=max_chars, location=f"query at {location}")
    if not isinstance(item, dict):
        raise InputError(f"{location}: expected a string or an object, got {json_kind(item)}")
    key = _pick_field(list(item), location, field, what="field")
    value = item[key]
    where_field = f"{location} (field {key!r})"
    if not isinstance(value, str):
        raise InputError(f"{where_field}: expected a string, got {json_kind(value)}")
    return validate_query(value, max_chars=max_chars, location=where_field)


def _pick_field(names: list[str], location: str, field: str | None, *, what: str) -> str:
    """Return ``field`` if present, else the first default query field present."""
    wanted = (field,) if field is not None else DEFAULT_QUERY_FIELDS
    for name in wanted:
        if name in names:
            return name
    expected = repr(field) if field is not None else " or ".join(map(repr, DEFAULT_QUERY_FIELDS))
    raise InputError(f"{location}: no {what} {expected}; {what}s present: {field_list(names)}")
