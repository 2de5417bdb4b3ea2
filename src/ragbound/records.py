"""Read record files: one reader, one set of rules, one error format (docs/input-files.md).

A record is a JSON value, a CSV/TSV row (a ``dict`` of strings) or a line of text, and knows its
file and the line on which it starts. ``.jsonl``/``.ndjson``, ``.json``, ``.csv`` and ``.tsv``
name their format; any other file is sniffed, in this order:

1. every non-blank line is a JSON object → JSONL;
2. the whole text is a JSON list or object, or its first non-blank line is a lone ``[`` or
   ``{`` → JSON (a broken JSON file reports its syntax error, never reads as text);
3. some lines are JSON objects and others are not → an error naming one of each, since
   either guess could silently misread the file (``format=`` decides);
4. otherwise → text.

A ``.json`` file whose lines are each a JSON object but which is not one document reads as
JSONL, and a ``.jsonl`` file holding one document spread over lines reads as JSON. CSV is
never guessed. Every problem is an :class:`~ragbound.errors.InputError` starting
``FILE:LINE (field 'x'):``.
"""

from __future__ import annotations

import bisect
import codecs
import csv
import io
import json
import math
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ragbound.errors import InputError, where

RecordFormat = Literal["text", "jsonl", "json", "csv", "tsv"]
"""The formats :func:`read_records` reads."""

FORMAT_BY_SUFFIX: dict[str, RecordFormat] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "tsv",
}
"""Extensions (compared case-insensitively) that name a format; other files are sniffed."""

DEFAULT_TEXT_FIELDS: tuple[str, ...] = ("query", "question", "text", "prompt")
"""Fields tried, in order, for a record's text when no field is named."""

FIELDS_SHOWN = 12
"""Field names a message lists before ``... and N more``."""

MAX_JSON_DEPTH = 128
"""Deepest nesting of lists and objects read in JSON: serde_json's default, and far below the
~1,000 levels at which Python's parser (and every recursive reader after it) overflows."""

_CSV_FIELD_LIMIT = min(sys.maxsize, 2**31 - 1)
_JSON_SPACE = " \t\n\r"
# a JSON string (unrolled for speed; never across a line: JSON strings hold no raw line end)
_JSON_STRING = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")
# a \uD800-\uDFFF escape: one half of a surrogate pair, or a lone surrogate
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


@dataclass(frozen=True)
class Record:
    """One record of a file.

    ``file`` is the file as named in messages, ``line`` the 1-based line on which the record
    starts, ``index`` its 0-based position among the file's records, ``data`` the record (a
    ``dict`` for JSON objects and CSV/TSV rows, a ``str`` for text lines, any JSON value for
    JSON), ``format`` the format the file was read as, and ``key`` the member name of a record
    of a JSON object keyed by id (None otherwise).
    """

    file: str
    line: int
    index: int
    data: Any
    format: RecordFormat
    key: str | None = None

    def where(self, field: str | None = None) -> str:
        """The record's location for messages: ``file:line`` or ``file:line (field 'x')``."""
        return where(self.file, self.line, field)

    def error(self, problem: str, field: str | None = None) -> InputError:
        """An InputError ``FILE:LINE (field 'x'): problem`` about this record."""
        return InputError(f"{self.where(field)}: {problem}")

    @property
    def fields(self) -> dict[str, Any]:
        """The record's fields: ``data`` if it is an object or row, else an empty dict."""
        return self.data if isinstance(self.data, dict) else {}

    def object(self, expected: str = "an object") -> dict[str, Any]:
        """The record as a dict; InputError ``FILE:LINE: expected an object, got ...``."""
        if not isinstance(self.data, dict):
            raise self.error(f"expected {expected}, got {self.kind()}")
        return self.data

    def kind(self) -> str:
        """What the record is, for messages ("an object", "a line of text", "a number")."""
        if self.format == "text":
            return "a line of plain text"
        return json_kind(self.data)

    def require(self, field: str) -> Any:
        """The value of ``field``; InputError ``... (field 'x'): missing; fields present: ...``."""
        record = self.object()
        if field not in record:
            raise self.missing((field,))
        return record[field]

    def missing(self, wanted: Sequence[str]) -> InputError:
        """InputError ``FILE:LINE (field 'a' or 'b'): missing; fields present: ...``."""
        names = " or ".join(repr(name) for name in wanted)
        present = self.fields
        return InputError(
            f"{self.where()} (field {names}): missing; fields present: {field_list(present)}"
            + case_hint(wanted, present)
        )

    def string(self, field: str, *, allow_empty: bool = False, strip: bool = True) -> str:
        """The string value of ``field`` (stripped unless ``strip=False``); InputError when it
        is missing, not a string, or (unless ``allow_empty``) blank."""
        value = self.require(field)
        if not isinstance(value, str):
            raise self.error(f"expected a string, got {json_kind(value)}", field)
        if not allow_empty and not value.strip():
            raise self.error("empty", field)
        return value.strip() if strip else value

    def pick(self, field: str | None = None, defaults: Sequence[str] = DEFAULT_TEXT_FIELDS) -> str:
        """The field to read: ``field`` if given, else the first of ``defaults`` present."""
        record = self.object()
        wanted = (field,) if field is not None else tuple(defaults)
        for name in wanted:
            if name in record:
                return name
        raise self.missing(wanted)

    def text(self, field: str | None = None, defaults: Sequence[str] = DEFAULT_TEXT_FIELDS) -> str:
        """The record's text, stripped: a string record itself, else its :meth:`pick`-ed field
        (InputError when it is missing, not a string or empty)."""
        if isinstance(self.data, str):
            if not self.data.strip():
                raise self.error("empty")
            return self.data.strip()
        if not isinstance(self.data, dict):
            raise self.error(f"expected a string or an object, got {self.kind()}")
        return self.string(self.pick(field, defaults))

    def text_field(
        self, field: str | None = None, defaults: Sequence[str] = DEFAULT_TEXT_FIELDS
    ) -> str | None:
        """The field :meth:`text` reads (None for a string record), for locating messages."""
        return None if isinstance(self.data, str) else self.pick(field, defaults)

    def id(self, field: str) -> str:
        """The record's id from ``field`` as a string; ids are non-empty strings or numbers."""
        value = self.require(field)
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.error(f"expected a string or number id, got {json_kind(value)}", field)
        text = str(value).strip()
        if not text:
            raise self.error("the id is empty", field)
        return text


def read_records(
    path: str | Path, *, format: RecordFormat | None = None, key: str | None = None
) -> list[Record]:
    """Read the records of a file, in file order (an empty list when it has none).

    ``format`` overrides the extension and the sniffing; ``key`` names the member of a
    top-level JSON object that holds the record list.
    """
    display = str(path)
    text = read_text(path)
    chosen = format or detect_format(Path(path), text)
    records = _records(text, display, chosen, key)
    if (
        chosen == "json"
        and _SURROGATE_ESCAPE.search(text)
        and not _encodes([r.data for r in records])
    ):
        for record in records:  # a slow walk, only to name the record and field
            _check_unicode(record.data, display, record.line)
    return records


def _records(text: str, display: str, chosen: RecordFormat, key: str | None) -> list[Record]:
    """The records of ``text`` read as ``chosen`` (see :func:`read_records`)."""
    if chosen == "text":
        return [
            Record(display, line, index, content, "text")
            for index, (line, content) in enumerate(_lines(text))
        ]
    if chosen in ("csv", "tsv"):
        delimiter = "\t" if chosen == "tsv" else ","
        _, rows = csv_rows(text, display, delimiter=delimiter)
        return [Record(display, line, index, row, chosen) for index, (line, row) in enumerate(rows)]
    if chosen == "jsonl":
        return [
            Record(display, line, index, json_line(content, display, line), "jsonl")
            for index, (line, content) in enumerate(_lines(text))
        ]
    return [
        Record(display, line, index, value, "json", name)
        for index, (line, name, value) in enumerate(_json_document(text, display, key))
    ]


def read_texts(
    path: str | Path,
    field: str | None = None,
    *,
    defaults: Sequence[str] = DEFAULT_TEXT_FIELDS,
    format: RecordFormat | None = None,
    key: str | None = None,
) -> list[str]:
    """The texts of a file's records (:meth:`Record.text`), in file order; InputError for a
    file without records."""
    records = read_records(path, format=format, key=key)
    if not records:
        raise InputError(f"{path}: no records in the file")
    return [record.text(field, defaults) for record in records]


def detect_format(path: Path, text: str) -> RecordFormat:
    """The format of ``text`` read from ``path``: its extension, corrected by its content."""
    named = FORMAT_BY_SUFFIX.get(path.suffix.lower())
    if named in ("csv", "tsv"):
        return named
    lines = _lines(text)
    if named == "json":
        as_lines = len(lines) > 1 and not _parses(text)
        return "jsonl" if as_lines and all(_is_json_object(c) for _, c in lines) else "json"
    if named == "jsonl":
        spans_lines = bool(lines) and not _parses(lines[0][1])
        return "json" if spans_lines and _is_json_document(text) else "jsonl"
    objects = [line for line, content in lines if _is_json_object(content)]
    if lines and len(objects) == len(lines):
        return "jsonl"
    if _is_json_document(text) or (lines and lines[0][1].strip() in ("[", "{")):
        return "json"
    if objects:
        plain = next(line for line, content in lines if not _is_json_object(content))
        raise InputError(
            f"{where(path, plain)}: not a JSON object, but line {objects[0]} is one; the file "
            "is neither one text per line nor JSONL (fix the line, or name the format: "
            ".jsonl for JSON lines, format='text' for text)"
        )
    return "text"


def read_text(path: str | Path) -> str:
    """The UTF-8 text of a file without its byte-order mark; InputError for a missing or
    unreadable file, and one naming the line and offset of the first byte that is not UTF-8."""
    file = Path(path)
    if not file.exists():
        raise InputError(f"{path}: no such file")
    if not file.is_file():
        raise InputError(f"{path}: not a file")
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file ({exc.strerror or exc})") from exc
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) and not raw.startswith(
        codecs.BOM_UTF8
    ):
        raise InputError(f"{path}: UTF-16 text; re-encode the file as UTF-8")
    bom = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
    try:
        return raw[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start + bom
        line = raw.count(b"\n", 0, offset) + 1
        raise InputError(
            f"{where(path, line)}: not UTF-8 text (invalid byte 0x{raw[offset]:02x} at byte "
            f"offset {offset}); re-encode the file as UTF-8"
        ) from exc


def parse_json(text: str, display: str, line: int | None = None) -> Any:
    """Parse standard JSON text; InputError ``FILE:LINE: not valid JSON (...)`` when it is not.
    ``line``: the line of ``text`` in its file (one JSONL line; None: the error's own line)."""
    try:
        return standard_json(text)
    except json.JSONDecodeError as exc:
        at_line = line if line is not None else exc.lineno
        raise InputError(
            f"{where(display, at_line)}: not valid JSON ({exc.msg} at column {exc.colno})"
        ) from exc
    except TooDeepJSON as exc:
        at_line = line if line is not None else exc.line
        raise InputError(f"{where(display, at_line)}: {exc}") from exc
    except ValueError as exc:
        raise InputError(f"{where(display, line)}: not valid JSON ({exc})") from exc


def json_line(text: str, display: str, line: int) -> Any:
    """One line of a JSONL file, parsed by :func:`parse_json` and checked for lone surrogates."""
    value = parse_json(text, display, line)
    if _SURROGATE_ESCAPE.search(text):  # only a line that spells a surrogate is walked
        _check_unicode(value, display, line)
    return value


def json_kind(value: object) -> str:
    """Name the JSON type of a parsed value, for messages ("a string", "an object")."""
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


def field_list(names: Iterable[object]) -> str:
    """Field or column names for a message: ``a, b, c``, the first ``FIELDS_SHOWN`` then
    ``... and N more`` (``(none)`` when empty)."""
    listed = [str(name) for name in names]
    shown = ", ".join(listed[:FIELDS_SHOWN]) or "(none)"
    more = len(listed) - FIELDS_SHOWN
    return shown + (f", ... and {more:,} more" if more > 0 else "")


def case_hint(wanted: Iterable[str], present: Iterable[object]) -> str:
    """``"; did you mean 'Question'? ..."`` when a present field matches a wanted one but for
    case (the first wanted name that has such a match), else ``""``."""
    by_folded: dict[str, str] = {}
    for name in present:
        by_folded.setdefault(str(name).casefold(), str(name))
    for name in wanted:
        match = by_folded.get(name.casefold())
        if match is not None and match != name:
            return f"; did you mean {match!r}? (field names are case-sensitive)"
    return ""


def csv_rows(
    text: str, display: str, *, delimiter: str = ","
) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Parse CSV/TSV text with a header row into ``(header, [(line, row), ...])``, ``line``
    1-based where the row starts; blank rows skipped, malformed ones an InputError."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
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


class NonStandardJSON(ValueError):
    """JSON text that Python's parser reads but the JSON standard (RFC 8259) does not have:
    ``NaN``, ``Infinity``, ``-Infinity``, or a number beyond a 64-bit float's range."""


def _reject_constant(name: str) -> Any:
    """Refuse NaN and ±Infinity, which are not JSON and would poison JSON artifacts."""
    raise NonStandardJSON(f"{name} is not allowed in JSON")


def _finite_float(text: str) -> float:
    """A JSON number as a float; refused when it overflows one (``1e999`` would be inf)."""
    value = float(text)
    if not math.isfinite(value):
        raise NonStandardJSON(f"the number {text[:40]} is beyond the range of a 64-bit float")
    return value


class TooDeepJSON(ValueError):
    """JSON whose lists and objects nest deeper than :data:`MAX_JSON_DEPTH`; ``line`` is the
    1-based line of the text on which the level past the limit opens."""

    def __init__(self, line: int) -> None:
        super().__init__(
            f"lists and objects nested deeper than {MAX_JSON_DEPTH} levels (JSON is read to "
            f"{MAX_JSON_DEPTH} levels)"
        )
        self.line = line


def _nested_deeper(value: Any, limit: int) -> bool:
    """Whether a parsed JSON list or object nests deeper than ``limit`` levels; level by level,
    as a recursive walk would overflow on the values it is there to find."""
    level, depth = [value], 1
    while level:
        below = []
        for item in level:
            members = item.values() if type(item) is dict else item
            below += [m for m in members if type(m) is dict or type(m) is list]
        if below and depth == limit:
            return True
        level, depth = below, depth + 1
    return False


def _deep_line(text: str) -> int:
    """The 1-based line of ``text`` on which a list or object past :data:`MAX_JSON_DEPTH`
    opens (brackets inside strings do not count); 1 if none does."""
    bare = _JSON_STRING.sub('""', text)  # line ends stay where they were
    depth = 0
    for match in _JSON_BRACKET.finditer(bare):
        depth += 1 if match.group() in "[{" else -1
        if depth > MAX_JSON_DEPTH:
            return bare.count("\n", 0, match.start()) + 1
    return 1


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def standard_json(text: str) -> Any:
    """``text`` parsed as standard JSON; :class:`NonStandardJSON`, :class:`TooDeepJSON` or
    :class:`json.JSONDecodeError` (all ValueError) otherwise."""
    try:
        value = _DECODER.decode(text)
    except RecursionError:  # Python's parser recurses: ~1,000 levels overflow its stack
        raise TooDeepJSON(_deep_line(text)) from None
    # fewer brackets than the limit cannot nest past it: most texts are never walked
    deep = text.count("[") + text.count("{") > MAX_JSON_DEPTH
    if deep and isinstance(value, dict | list) and _nested_deeper(value, MAX_JSON_DEPTH):
        raise TooDeepJSON(_deep_line(text))
    return value


def unicode_problem(value: Any) -> tuple[str | None, str] | None:
    """Where a parsed JSON value (field names too) holds a lone surrogate, and what:
    ``(path, problem)``, the path like ``messages[0].content`` (None: the value itself), or
    None. Iterative, so any depth :func:`standard_json` returns is walked."""
    pending: list[tuple[str | None, Any]] = [(None, value)]
    while pending:
        path, item = pending.pop()
        if isinstance(item, str):
            problem = _surrogate(item)
            if problem is not None:
                return path, problem
        elif isinstance(item, dict):
            for name, member in reversed(item.items()):
                problem = _surrogate(name)
                if problem is not None:
                    return path, f"a field name {problem}"
                pending.append((name if path is None else f"{path}.{name}", member))
        elif isinstance(item, list):
            base = path or ""
            pending += [(f"{base}[{i}]", member) for i, member in reversed(list(enumerate(item)))]
    return None


def _surrogate(text: str) -> str | None:
    """``holds a lone surrogate (U+D800 at character 5) ...`` when ``text`` does, else None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"holds a lone surrogate (U+{ord(text[exc.start]):04X} at character "
            f"{exc.start + 1}), which is not Unicode text (UTF-8 cannot encode it)"
        )
    return None


def _encodes(value: Any) -> bool:
    """Whether a parsed JSON value holds no lone surrogate (JSON joins an escaped pair into
    one character, so any surrogate left is lone), at C speed."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_unicode(value: Any, display: str, line: int) -> None:
    """InputError ``FILE:LINE (field 'x'): holds a lone surrogate ...`` for a JSON value that
    holds one anywhere."""
    if _encodes(value):
        return
    found = unicode_problem(value)
    if found is not None:
        field, problem = found
        raise InputError(f"{where(display, line, field)}: {problem}")


def _lines(text: str) -> list[tuple[int, str]]:
    """``(line_number, line)`` for the non-blank lines of a text (1-based, ``\\r`` dropped).
    On ``\\n`` only: ``str.splitlines`` also splits on U+2028, legal inside a JSON string."""
    lines = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if line.strip():
            lines.append((number, line))
    return lines


def _parses(text: str) -> bool:
    """Whether ``text`` is one JSON document (NaN and too deep nesting allowed here: reading
    refuses them, with a message, so that such a file is not mistaken for text)."""
    return _sniffed(text) is not _NOT_JSON


def _is_json_object(line: str) -> bool:
    """Whether one line is a whole JSON object (cheap test first: it must start with ``{``)."""
    if not line.lstrip().startswith("{"):
        return False
    return isinstance(_sniffed(line), dict)


_NOT_JSON = object()


def _sniffed(text: str) -> Any:
    """``text`` parsed leniently to tell JSON from text: its value (an empty dict for JSON
    too deep to parse: its first bracket decides), or ``_NOT_JSON``."""
    try:
        return json.loads(text)
    except RecursionError:
        return {} if text.lstrip().startswith("{") else []
    except ValueError:
        return _NOT_JSON


def _is_json_document(text: str) -> bool:
    """Whether the whole text is one JSON list or object."""
    return text.lstrip().startswith(("[", "{")) and _parses(text)


def _json_document(text: str, display: str, key: str | None) -> list[tuple[int, str | None, Any]]:
    """``(line, member name, value)`` of the records of a JSON document: its list, the list at
    ``key``, or the members of an object keyed by id (the name is None but for those)."""
    data = parse_json(text, display)
    starts = _line_starts(text)
    position = _skip_space(text, 0)
    if isinstance(data, dict) and key is not None and isinstance(data.get(key), list):
        position = _member_position(text, position, key)
        data = data[key]
    if isinstance(data, list):
        return [(_line_of(starts, at), None, value) for at, value in _list_items(text, position)]
    if _keyed_by_id(data):
        members = _object_members(text, position)
        return [(_line_of(starts, at), name, value) for name, at, value in members]
    if isinstance(data, dict) and key is None:
        return [(_line_of(starts, position), None, data)]
    expected = "a JSON list of records, a JSON object keyed by id" + (
        f", or an object with a list under {key!r}" * bool(key)
    )
    fields = f" with fields: {field_list(data)}" if isinstance(data, dict) else ""
    raise InputError(f"{where(display, 1)}: expected {expected}, got {json_kind(data)}{fields}")


def _keyed_by_id(data: object) -> bool:
    """Whether ``data`` is a JSON object keyed by id: members, each of them an object."""
    return isinstance(data, dict) and bool(data) and all(isinstance(v, dict) for v in data.values())


def _line_starts(text: str) -> list[int]:
    """Offsets at which the lines of ``text`` start."""
    return [0] + [match.end() for match in re.finditer("\n", text)]


def _line_of(starts: list[int], offset: int) -> int:
    """The 1-based line holding character ``offset``."""
    return bisect.bisect_right(starts, offset)


def _skip_space(text: str, position: int) -> int:
    """The first position at or after ``position`` that is not JSON whitespace."""
    while position < len(text) and text[position] in _JSON_SPACE:
        position += 1
    return position


def _list_items(text: str, position: int) -> list[tuple[int, Any]]:
    """``(offset, value)`` of the items of the (already validated) JSON list at ``position``."""
    items = []
    position = _skip_space(text, position + 1)
    while text[position] != "]":
        value, end = _DECODER.raw_decode(text, position)
        items.append((position, value))
        position = _skip_space(text, end)
        if text[position] == ",":
            position = _skip_space(text, position + 1)
    return items


def _member_position(text: str, position: int, key: str) -> int:
    """The offset of the value of the last member ``key`` (the one :func:`json.loads` keeps)
    of the JSON object at ``position``."""
    found = -1
    for name, at, _ in _object_members(text, position):
        if name == key:
            found = at
    return found


def _object_members(text: str, position: int) -> list[tuple[str, int, Any]]:
    """``(name, offset, value)`` of each member of the (already validated) JSON object at
    ``position``, repeated names included."""
    members = []
    position = _skip_space(text, position + 1)
    while text[position] != "}":
        name, end = _DECODER.raw_decode(text, position)
        position = _skip_space(text, _skip_space(text, end) + 1)  # past the colon
        value, end = _DECODER.raw_decode(text, position)
        members.append((name, position, value))
        position = _skip_space(text, end)
        if text[position] == ",":
            position = _skip_space(text, position + 1)
    return members
