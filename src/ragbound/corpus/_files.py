"""Private helpers shared by the document and query loaders: reading and parsing files."""

from __future__ import annotations

import codecs
import csv
import io
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ragbound.errors import InputError, where

_CSV_FIELD_LIMIT = min(sys.maxsize, 2**31 - 1)


def read_utf8(path: Path, display: str) -> str:
    """Read ``path`` as UTF-8, dropping a leading byte-order mark.

    Raises InputError naming the file (``display``) and the byte offset of the first byte that
    is not UTF-8, or the reason the file cannot be read.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{display}: cannot read the file ({exc.strerror or exc})") from exc
    bom = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
    try:
        return raw[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start + bom
        raise InputError(
            f"{display}: not UTF-8 text (invalid byte 0x{raw[offset]:02x} at byte offset "
            f"{offset}); re-encode the file as UTF-8"
        ) from exc


def _reject_constant(name: str) -> Any:
    """Refuse NaN and ±Infinity, which are not JSON and would poison JSON artifacts."""
    raise ValueError(f"{name} is not allowed in JSON")


def parse_json(text: str, display: str, line: int | None = None) -> Any:
    """Parse JSON text; on failure raise InputError naming the file and line."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        at_line = line if line is not None else exc.lineno
        raise InputError(
            f"{where(display, at_line)}: not valid JSON ({exc.msg} at column {exc.colno})"
        ) from exc
    except ValueError as exc:
        raise InputError(f"{where(display, line)}: not valid JSON ({exc})") from exc


def json_kind(value: object) -> str:
    """Name the JSON type of a parsed value, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def jsonl_lines(text: str) -> list[tuple[int, str]]:
    """Return ``(line_number, line)`` for the non-blank lines of a JSONL text (1-based).

    Splits on ``\\n`` only: ``str.splitlines`` would also split on characters such as U+2028
    that may legally appear inside a JSON string.
    """
    lines = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if line.strip():
            lines.append((number, line))
    return lines


def field_list(names: Iterable[object]) -> str:
    """Format the field names of a record or header for an error message."""
    return ", ".join(str(name) for name in names) or "(none)"


def csv_rows(text: str, display: str) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Parse CSV text with a header row into ``(header, [(line_number, row), ...])``.

    ``line_number`` is the 1-based line on which the row starts (the header is line 1). Blank
    lines are skipped. A row whose number of fields differs from the header's, a missing or
    duplicated header and malformed CSV are InputErrors naming the file and line.
    """
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    old_limit = csv.field_size_limit()
    csv.field_size_limit(_CSV_FIELD_LIMIT)  # long document texts exceed the 128 KiB default
    try:
        header = _csv_header(reader, display)
        rows: list[tuple[int, dict[str, str]]] = []
        while True:
            start = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                return header, rows
            except csv.Error as exc:
                raise InputError(f"{where(display, start)}: malformed CSV ({exc})") from exc
            if not row or not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise InputError(
                    f"{where(display, start)}: row has {len(row)} fields but the header has "
                    f"{len(header)} ({field_list(header)})"
                )
            rows.append((start, dict(zip(header, row, strict=True))))
    finally:
        csv.field_size_limit(old_limit)


def _csv_header(reader: Any, display: str) -> list[str]:
    """Read and check the header row of a CSV file."""
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise InputError(f"{where(display, 1)}: malformed CSV header ({exc})") from exc
    if not header:
        raise InputError(f"{display}: empty CSV file; a header row is required")
    header = [name.strip() for name in header]
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise InputError(
            f"{where(display, 1)}: duplicate column(s) in header: {field_list(duplicates)}"
        )
    return header
