"""Read tripwire files and labelled example requests (any record file) into Tripwires."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ragbound.errors import InputError
from ragbound.records import DEFAULT_TEXT_FIELDS, Record, case_hint, json_kind, read_records
from ragbound.tripwires.models import Tripwire, storable, tripwire_id


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


@dataclass(frozen=True)
class TripwireFile:
    """What :func:`read_tripwire_file` read: the tripwires, and the identical rows it skipped.

    ``duplicates`` gives the location (``file:line``) of every row that repeats an earlier
    row exactly (same id, text, topic, severity and note): such a row carries no information,
    so it is skipped rather than refused. Public data sets do this (HarmfulQA repeats some
    questions word for word within a topic).
    """

    tripwires: list[Tripwire]
    duplicates: list[str] = field(default_factory=list)


def read_tripwires(
    path: str | Path, fields: TripwireFields | None = None, *, source: str | None = None
) -> list[Tripwire]:
    """The tripwires of a record file; see :func:`read_tripwire_file`, which also says how
    many identical rows were skipped."""
    return read_tripwire_file(path, fields, source=source).tripwires


def read_tripwire_file(
    path: str | Path, fields: TripwireFields | None = None, *, source: str | None = None
) -> TripwireFile:
    """Tripwires from a record file (``.jsonl``, ``.csv``, ``.tsv``, ``.json`` or text; see
    :mod:`ragbound.records`).

    Each record has ``text`` and ``topic`` (optional ``id``, ``severity``, ``note``); a line
    of a text file is a text whose topic is ``fields.topic``. A record without an id gets
    :func:`tripwire_id` (a hash of topic and text). A row identical to an earlier one is
    skipped and listed in ``duplicates``. Raises InputError ``FILE:LINE (field 'x'): problem``
    for a missing topic or text, an empty text, a bad severity, an id used by two different
    rows, and ``FILE: ...`` for a file that yields no tripwires.
    """
    fields = fields or TripwireFields()
    kept: dict[str, tuple[Tripwire, str]] = {}
    duplicates: list[str] = []
    for record in read_records(path):
        if fields.label_field is not None and not _has_label(record, fields):
            continue
        tripwire = _tripwire(record, fields, source or str(path))
        first = kept.get(tripwire.id)
        if first is None:
            kept[tripwire.id] = (tripwire, record.where())
        elif first[0] == tripwire:
            duplicates.append(record.where())
        else:
            raise record.error(
                f"duplicate tripwire id {tripwire.id!r}: {first[1]} has the same id with "
                "another text, topic, severity or note",
                fields.id if fields.id in record.fields else None,
            )
    if not kept:
        raise InputError(f"{path}: no tripwires in the file")
    return TripwireFile([tripwire for tripwire, _ in kept.values()], duplicates)


def check_unique_ids(tripwires: list[Tripwire], display: str) -> None:
    """InputError listing ids that occur more than once (same topic and text count too)."""
    counts = Counter(t.id for t in tripwires)
    repeated = sorted(key for key, n in counts.items() if n > 1)
    if repeated:
        extra = sum(n - 1 for n in counts.values())
        raise InputError(
            f"{display}: {extra} duplicate tripwire id(s): {', '.join(repeated[:5])} "
            "(without an id column, the same topic and text twice)"
        )


def _has_label(record: Record, fields: TripwireFields) -> bool:
    """Whether a labelled record carries the label that makes it a tripwire."""
    label = record.require(str(fields.label_field))
    return str(label).strip() == fields.label


def _tripwire(record: Record, fields: TripwireFields, source: str) -> Tripwire:
    """One record as a Tripwire, or the one-format InputError naming the field."""
    text = record.text(fields.text, ())
    topic = record.fields.get(fields.topic_field) or fields.topic
    if topic is None:
        raise record.error(
            "no topic; every tripwire needs one (or pass --topic for the whole file)"
            + case_hint((fields.topic_field,), record.fields),
            fields.topic_field,
        )
    if not isinstance(topic, str) or not topic.strip():
        raise record.error(f"expected a topic name, got {json_kind(topic)}", fields.topic_field)
    raw_id = record.fields.get(fields.id)
    given_id = str(raw_id).strip() if raw_id not in (None, "") else None
    try:
        return storable(
            Tripwire(
                id=given_id or tripwire_id(topic.strip(), text),
                text=text,
                topic=topic,
                severity=record.fields.get("severity") or None,
                note=record.fields.get("note") or None,
                source=source,
            )
        )
    except InputError as exc:  # an id or topic that cannot be stored
        raise record.error(str(exc)) from None
    except ValidationError as exc:
        names = {"text": fields.text, "topic": fields.topic_field, "id": fields.id}
        problems = exc.errors()
        where_field = problems[0]["loc"][0] if len(problems) == 1 and problems[0]["loc"] else None
        message = "; ".join(error["msg"] for error in problems)
        field_name = names.get(str(where_field), where_field) if where_field else None
        raise record.error(f"invalid tripwire ({message})", field_name) from exc


UNSAFE_LABELS = frozenset({"unsafe", "harmful", "forbidden", "1", "true", "reject"})
SAFE_LABELS = frozenset({"safe", "harmless", "0", "false", "allow"})


def read_labelled(
    path: str | Path, *, text_field: str | None = None, label_field: str = "label"
) -> tuple[list[str], list[bool]]:
    """Queries and labels (True = unsafe) from a record file (see :mod:`ragbound.records`).

    The query is ``text_field``, by default the first of query, question, text, prompt.
    Labels read as unsafe: unsafe, harmful, forbidden, 1, true, reject; as safe: safe,
    harmless, 0, false, allow (any case). Another label is an InputError
    ``FILE:LINE (field 'label'): ...``.
    """
    queries: list[str] = []
    labels: list[bool] = []
    for record in read_records(path):
        queries.append(record.text(text_field, DEFAULT_TEXT_FIELDS))
        labels.append(_label(record, label_field))
    if not queries:
        raise InputError(f"{path}: no labelled queries")
    return queries, labels


def _label(record: Record, label_field: str) -> bool:
    """A record's label as True (unsafe) or False (safe)."""
    value = record.require(label_field)
    text = str(value).strip().casefold() if value is not None else ""
    if text in UNSAFE_LABELS:
        return True
    if text in SAFE_LABELS:
        return False
    raise record.error(
        f"label {value!r} is neither safe nor unsafe "
        f"(use one of {', '.join(sorted(UNSAFE_LABELS | SAFE_LABELS))})",
        label_field,
    )
