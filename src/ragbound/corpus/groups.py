"""Groups of records for leave-documents-out (``index --group-field NAME``).

``calibrate --statistic combined | auto`` learns from calibration questions with "their
document" masked out of the search: the same question about a topic the knowledge base now
lacks. Where one topic spans many short records (an intent of a support corpus, a category
of an FAQ, the paragraphs of an article loaded one record each), masking a record leaves its
siblings behind and the question is still answered. A group field names the topic: records
that share its value are masked together. A record without the field is its own group (its
document), and so is every record of a knowledge base indexed without one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ragbound.corpus.models import Chunk, Document

# A field is suggested as a group when nearly every record has it, its values repeat (each
# shared by this many records on average) and there are at least two of them.
SUGGEST_MIN_PRESENT = 0.9
SUGGEST_MIN_PER_VALUE = 3.0
SUGGEST_MIN_VALUES = 2


def group_value(value: object) -> str | None:
    """A metadata value as a group name (text, numbers), or None (missing, empty, nested)."""
    if isinstance(value, bool | int | float | str) and value != "":
        return str(value)
    return None


def chunk_groups(chunks: Sequence[Chunk], field: str | None) -> list[str]:
    """Per chunk, its group: ``field=value`` when the chunk's record has the field, else
    its document (``doc:<id>``; every chunk when ``field`` is None)."""
    out = []
    for chunk in chunks:
        value = None if field is None else group_value(chunk.metadata.get(field))
        out.append(f"doc:{chunk.doc_id}" if value is None else f"{field}={value}")
    return out


def suggest_group_field(records: Sequence[Mapping[str, Any]]) -> tuple[str, int] | None:
    """A field of the records' metadata that looks like a grouping of them (an intent, a
    category, an article title): at least :data:`SUGGEST_MIN_PRESENT` of the records have
    it, it has at least two values, and each is shared by :data:`SUGGEST_MIN_PER_VALUE`
    records on average. The one with the most values among those (the finest grouping),
    with that number; None when no field qualifies."""
    values: dict[str, Counter[str]] = {}
    for metadata in records:
        for name, raw in metadata.items():
            value = group_value(raw)
            if value is not None:
                values.setdefault(name, Counter())[value] += 1
    best: tuple[str, int] | None = None
    for name, counts in values.items():
        present = sum(counts.values())
        if (
            present >= SUGGEST_MIN_PRESENT * len(records)
            and len(counts) >= SUGGEST_MIN_VALUES
            and present >= SUGGEST_MIN_PER_VALUE * len(counts)
            and (best is None or len(counts) > best[1])
        ):
            best = (name, len(counts))
    return best


def check_group_field(documents: Sequence[Document], field: str) -> None:
    """Refuse (InputError) a group field that no record has: a misspelt name would
    otherwise leave every record its own group without a word."""
    from ragbound.errors import InputError

    if not any(group_value(d.metadata.get(field)) is not None for d in documents):
        fields = sorted({name for d in documents[:1000] for name in d.metadata})
        known = (
            f" (their fields: {', '.join(fields)})" if fields else " (they have no other fields)"
        )
        raise InputError(f"group field {field!r}: no record has a value for it{known}")
