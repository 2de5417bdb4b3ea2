"""Read tripwire files (JSONL, CSV or JSON) and labelled example requests into Tripwires."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragbound.corpus._files import csv_rows, json_kind, jsonl_lines, parse_json, read_utf8
from ragbound.errors import InputError, where
from ragbound.tripwires.models import Tripwire, tripwire_id


@dataclass(frozen=True)
class TripwireFields:
    """Which record fields hold what, and an optional label filter.

    ``topic`` is used for records without a topic field (None: such a record is an error).
    With ``label_field`` set, only records whose label equals ``label`` become tripwires:
    that is how a labelled set (for example XSTest's ``label`` = ``unsafe``) is read.
    """

    text: str = "text"
    topic_field: str = "topic"
    id: str = "id"
    topic: str | None = None
    label_field: str | None = None
    label: str = "unsafe"


def read_tripwires(
    path: str | Path, fields: TripwireFields | None = None, *, source: str | None = None
) -> list[Tripwire]:
    """Tripwires from a ``.jsonl``, ``.csv`` or ``.json`` (list of objects) file.

    Each record has ``text`` and ``topic`` (optional ``id``, ``severity``, ``note``). A record
    without an id gets :func:`tripwire_id`. Raises InputError naming file and line for a
    missing topic or text, an empty text, a bad severity, duplicate ids, and a file that
    yields no tripwires.
    """
    fields = fields or TripwireFields()
    file = Path(path)
    if not file.is_file():
        raise InputError(f"{path}: no such file")
    display = str(path)
    tripwires = []
    for line, record in _records(file, display):
        if fields.label_field is not None:
            if fields.label_field not in record:
                raise InputError(f"{where(display, line)}: no label field {fields.label_field!r}")
            if str(record[fields.label_field]).strip() != fields.label:
                continue
        tripwires.append(_tripwire(record, fields, f"{where(display, line)}", source or display))
    check_unique_ids(tripwires, display)
    if not tripwires:
        raise InputError(f"{display}: no tripwires in the file")
    return tripwires


def check_unique_ids(tripwires: list[Tripwire], display: str) -> None:
    """InputError listing ids that occur more than once (same topic and text count too)."""
    seen: set[str] = set()
    repeated: list[str] = []
    for tripwire in tripwires:
        if tripwire.id in seen:
            repeated.append(tripwire.id)
        seen.add(tripwire.id)
    if repeated:
        shown = ", ".join(sorted(set(repeated))[:5])
        raise InputError(
            f"{display}: {len(repeated)} duplicate tripwire id(s): {shown} "
            "(without an id column, the same topic and text twice)"
        )


def _records(file: Path, display: str) -> list[tuple[int | None, dict[str, Any]]]:
    text = read_utf8(file, display)
    suffix = file.suffix.lower()
    if suffix == ".csv":
        _, rows = csv_rows(text, display)
        return [(line, dict(row)) for line, row in rows]
    if suffix == ".jsonl":
        records = [(n, parse_json(raw, display, n)) for n, raw in jsonl_lines(text)]
    elif suffix == ".json":
        data = parse_json(text, display)
        if not isinstance(data, list):
            raise InputError(f"{display}: expected a JSON list of objects, got {json_kind(data)}")
        records = [(None, item) for item in data]
    else:
        raise InputError(f"{display}: tripwire files are .jsonl, .csv or .json")
    for line, record in records:
        if not isinstance(record, dict):
            raise InputError(f"{where(display, line)}: expected an object, got {json_kind(record)}")
    return records


def _tripwire(record: dict[str, Any], fields: TripwireFields, at: str, source: str) -> Tripwire:
    text = record.get(fields.text)
    if not isinstance(text, str):
        raise InputError(f"{at}: no text field {fields.text!r} (a string)")
    topic = record.get(fields.topic_field) or fields.topic
    if not isinstance(topic, str) or not topic.strip():
        raise InputError(
            f"{at}: no topic (field {fields.topic_field!r}); every tripwire needs one "
            "(or pass --topic for the whole file)"
        )
    raw_id = record.get(fields.id)
    given_id = str(raw_id).strip() if raw_id not in (None, "") else None
    try:
        return Tripwire(
            id=given_id or tripwire_id(topic.strip(), text.strip()),
            text=text,
            topic=topic,
            severity=record.get("severity") or None,
            note=record.get("note") or None,
            source=source,
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InputError(f"{at}: invalid tripwire ({problems})") from exc


UNSAFE_LABELS = frozenset({"unsafe", "harmful", "1", "true", "reject"})
SAFE_LABELS = frozenset({"safe", "harmless", "0", "false", "allow"})


def read_labelled(
    path: str | Path, *, text_field: str | None = None, label_field: str = "label"
) -> tuple[list[str], list[bool]]:
    """Queries and labels (True = unsafe) from a ``.jsonl``/``.csv``/``.json`` file.

    The query is ``text_field``, by default the first of query, question, text, prompt.
    Labels read as unsafe: unsafe, harmful, 1, true, reject; as safe: safe, harmless, 0,
    false, allow (any case). Another label is an InputError naming the line.
    """
    file = Path(path)
    if not file.is_file():
        raise InputError(f"{path}: no such file")
    display = str(path)
    queries: list[str] = []
    labels: list[bool] = []
    for line, record in _records(file, display):
        at = where(display, line)
        field = text_field or next(
            (f for f in ("query", "question", "text", "prompt") if f in record), "query"
        )
        query = record.get(field)
        if not isinstance(query, str) or not query.strip():
            raise InputError(f"{at}: no query text in field {field!r}")
        queries.append(query.strip())
        labels.append(_label(record.get(label_field), at, label_field))
    if not queries:
        raise InputError(f"{display}: no labelled queries")
    return queries, labels


def _label(value: object, at: str, field: str) -> bool:
    text = str(value).strip().casefold() if value is not None else ""
    if text in UNSAFE_LABELS:
        return True
    if text in SAFE_LABELS:
        return False
    raise InputError(
        f"{at}: label {value!r} in field {field!r} is neither safe nor unsafe "
        f"(use one of {', '.join(sorted(UNSAFE_LABELS | SAFE_LABELS))})"
    )
