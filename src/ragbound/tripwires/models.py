"""Typed tripwires, the tripwire manifest and its change history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field, field_validator

from ragbound.artifacts import sha256_text
from ragbound.errors import InputError
from ragbound.labels import check_label, one_line

TRIPWIRE_FORMAT = "ragbound.tripwires/1"
Severity = Literal["low", "medium", "high"]


def tripwire_id(topic: str, text: str) -> str:
    """The default id of a tripwire: ``tw-`` and 12 hex characters of its topic and text."""
    return "tw-" + sha256_text(topic, text)[:12]


class Tripwire(BaseModel):
    """A flagged "negative" document: a query that retrieves it may be forbidden.

    ``topic`` groups tripwires (remove by topic, report by topic); ``severity`` and ``note``
    are for people reading a rejection; ``source`` says where the text came from (a file, a
    labelled set, or ``llm:<model>`` with the prompt id and version).
    """

    id: str
    text: str
    topic: str
    severity: Severity | None = None
    note: str | None = None
    source: str | None = None

    @field_validator("id", "text", "topic")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("must not be empty")
        return value


MAX_ID_CHARS = 128
"""Longest tripwire id a set takes (characters): the default id is 15, a dataset's key or a
UUID under 64. Ids are written to the gateway's ``X-Ragbound-Triggers`` header, where very
long ones make a reply head no ``openai``/``httpx`` client reads, and to log lines."""
MAX_TOPIC_CHARS = 128
"""Longest tripwire topic a set takes (characters): a topic is a name (``weapons``,
``self-harm``), written to log lines, metrics labels, tables and refusals."""


def storable(tripwire: Tripwire) -> Tripwire:
    """``tripwire`` as a tripwire set may keep it: InputError when its id or topic is longer
    than :data:`MAX_ID_CHARS` / :data:`MAX_TOPIC_CHARS` or holds a character that a header, a
    log line or a page cannot carry as it is (:func:`ragbound.labels.check_label`); its note
    and source put on one line (:func:`ragbound.labels.one_line`; None when nothing is
    left). Sets stored before the bounds still load (the gateway cuts what it writes)."""
    check_length(tripwire.id, MAX_ID_CHARS, "tripwire id")
    check_label(tripwire.id, "tripwire id")
    topic_of = f"the topic of tripwire {tripwire.id!r}"
    check_length(tripwire.topic, MAX_TOPIC_CHARS, topic_of)
    check_label(tripwire.topic, topic_of)
    flat = {name: flat_text(getattr(tripwire, name)) for name in ("note", "source")}
    return tripwire.model_copy(update=flat)


def check_length(value: str, most: int, what: str) -> None:
    """InputError naming ``what``, its length and the bound (the value's start shown) when
    ``value`` has more than ``most`` characters."""
    if len(value) > most:
        raise InputError(
            f"{what} {value[:40] + '...'!r} is {len(value):,} characters long; at most {most} "
            "(ids and topics are written to headers, log lines and pages)"
        )


def flat_text(text: str | None) -> str | None:
    """Free text (a note, a source) on one line; None for None or nothing left."""
    return (one_line(text) or None) if text is not None else None


class TripwireChange(BaseModel):
    """One add or remove, as recorded in the tripwire manifest."""

    action: Literal["add", "remove"]
    at: str
    ids: list[str]
    topics: list[str]
    source: str | None = None
    n_after: int
    set_hash: str = Field(description="hash of the tripwire set after the change")


class TripwireManifest(BaseModel):
    """What tripwires a knowledge base holds now, and every change that led there.

    The active set lives in ``tripwires/<generation>.jsonl`` and ``.npy`` (float32 vectors,
    rows aligned). ``set_hash`` identifies the set: every decision records it.
    """

    format: Literal["ragbound.tripwires/1"] = TRIPWIRE_FORMAT
    home: Literal["folder", "collection"] = Field(
        "folder",
        description="where the set lives: generation files in the folder, or records in the "
        "collection the knowledge base is attached to (this file then keeps the history)",
    )
    generation: int = 0
    n_tripwires: int = 0
    set_hash: str = ""
    embedder_identity: str
    history: list[TripwireChange] = Field(default_factory=list)
    # SHA-256 of the generation's two files, checked on load; None in manifests made before
    texts_sha256: str | None = None
    vectors_sha256: str | None = None


def set_hash(tripwires: list[Tripwire]) -> str:
    """16 hex characters over the sorted ids and texts of a tripwire set ('' when empty)."""
    if not tripwires:
        return ""
    ordered = sorted(tripwires, key=lambda t: t.id)
    return sha256_text(*(f"{t.id}\x1f{t.topic}\x1f{t.text}" for t in ordered))[:16]


@dataclass(frozen=True)
class TripwireSet:
    """A committed set as its home holds it: the manifest, the tripwires and their float32
    vectors (rows aligned)."""

    manifest: TripwireManifest
    tripwires: list[Tripwire]
    vectors: np.ndarray
