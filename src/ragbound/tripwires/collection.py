"""Tripwires kept in the collection an attached knowledge base reads (Chroma, Qdrant), as the
RAR paper designed them: each is a record of its own, its text, vector and metadata flagging
it (``ragbound_tripwire``: the topic; ``ragbound_tripwire_id``, ``_severity``, ``_note``,
``_source``), so a record the application adds with that flag is a tripwire too.

The collection is the source of truth, read whenever the tripwires are opened; the folder
keeps only ``tripwires.json``, the history of changes made through ragbound. The tripwires
are read with their vectors and searched exactly in-process (they are few).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ragbound.artifacts import sha256_text, write_json
from ragbound.errors import ArtifactError, InputError
from ragbound.faults import crash_point
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.layout import TRIPWIRE_MANIFEST
from ragbound.knowledge.tripwire_flags import TRIPWIRE_FLAG, StoredRecords
from ragbound.tripwires.folder import check_vectors, empty_vectors, kb_root, read_history
from ragbound.tripwires.models import (
    Tripwire,
    TripwireChange,
    TripwireManifest,
    TripwireSet,
    set_hash,
)

_FIELDS = ("id", "severity", "note", "source")  # Tripwire fields kept as flag-prefixed keys
COLLECTION_POLL_S = 2.0  # between reads of a collection's tripwire records by a service


class TripwireCollection(Protocol):
    """The tripwire records of one collection, as an attached backing reaches them."""

    def describe(self) -> str:
        """The collection, for messages."""
        ...

    def read(self, vectors: bool = True) -> StoredRecords:
        """Every record flagged ``ragbound_tripwire``, with its stored vector (when
        ``vectors``)."""
        ...

    def write(self, records: StoredRecords) -> None:
        """Insert these records (ids not present yet)."""
        ...

    def delete(self, keys: Sequence[str]) -> None:
        """Delete the records with these ids."""
        ...

    def key_of(self, tripwire_id: str) -> str:
        """The record id a tripwire written by ragbound gets."""
        ...


def tripwire_metadata(tripwire: Tripwire) -> dict[str, str]:
    """The metadata flagging ``tripwire``'s record (no None values: stores refuse them)."""
    metadata = {TRIPWIRE_FLAG: tripwire.topic}
    for field in _FIELDS:
        value = getattr(tripwire, field)
        if value is not None:
            metadata[f"{TRIPWIRE_FLAG}_{field}"] = value
    return metadata


def tripwire_of(key: str, text: str, metadata: dict[str, Any], where: str) -> Tripwire:
    """The tripwire a flagged record holds (InputError naming the record when it is not one)."""
    fields = {field: metadata.get(f"{TRIPWIRE_FLAG}_{field}") for field in _FIELDS}
    fields = {name: str(value) for name, value in fields.items() if value not in (None, "")}
    fields.setdefault("id", key)
    try:
        return Tripwire(text=text or "", topic=str(metadata[TRIPWIRE_FLAG]), **fields)
    except ValueError as exc:
        reason = str(exc).splitlines()[-1].strip()
        raise InputError(f"{where}: record {key!r} is flagged as a tripwire but {reason}") from None


def records_of(
    collection: TripwireCollection, tripwires: Sequence[Tripwire], vectors: np.ndarray
) -> StoredRecords:
    """The records that hold ``tripwires`` (their vectors rows aligned)."""
    return StoredRecords(
        keys=[collection.key_of(t.id) for t in tripwires],
        texts=[t.text for t in tripwires],
        metadatas=[tripwire_metadata(t) for t in tripwires],
        vectors=np.ascontiguousarray(vectors, dtype=np.float32),
    )


def read_set(collection: TripwireCollection) -> tuple[list[Tripwire], np.ndarray, list[str]]:
    """The collection's tripwires in id order, their vectors and record ids (rows aligned).

    InputError when two records carry one tripwire id.
    """
    stored = collection.read()
    where = collection.describe()
    tripwires = [
        tripwire_of(key, text, metadata, where)
        for key, text, metadata in zip(stored.keys, stored.texts, stored.metadatas, strict=True)
    ]
    order = sorted(range(len(tripwires)), key=lambda i: tripwires[i].id)
    repeated = sorted(i for i, n in Counter(t.id for t in tripwires).items() if n > 1)
    if repeated:
        raise InputError(f"{where}: several records hold tripwire id {repeated[0]!r}")
    vectors = stored.vectors[order] if len(order) else stored.vectors
    return [tripwires[i] for i in order], vectors, [stored.keys[i] for i in order]


class CollectionTripwireBacking:
    """Tripwires as flagged records of the collection a knowledge base is attached to;
    ``tripwires.json`` in the folder keeps the history of changes made through ragbound."""

    # a version is a read of the flagged records (Chroma: a scan of every record's metadata)
    poll_s = COLLECTION_POLL_S

    def __init__(self, collection: TripwireCollection):
        self.collection = collection
        self._keys: dict[str, str] = {}  # tripwire id -> record id, as last read

    def describe(self, kb: KnowledgeBase) -> str:
        return self.collection.describe()

    def read(self, kb: KnowledgeBase) -> TripwireSet:
        """The set the collection holds now; the manifest is the folder's history with the
        collection's count and set hash."""
        history = read_history(kb)
        if history.home == "folder" and history.n_tripwires:
            raise ArtifactError(
                f"{kb_root(kb)} holds {history.n_tripwires} tripwires as files, added before "
                f"they were kept in {self.collection.describe()}: remove tripwires.json and "
                "the tripwires folder, then add them again (they go into the collection)"
            )
        tripwires, vectors, keys = read_set(self.collection)
        vectors = vectors if tripwires else empty_vectors(kb)
        check_vectors(vectors, len(tripwires), kb, f"tripwire vectors in {self.describe(kb)}")
        self._keys = {t.id: key for t, key in zip(tripwires, keys, strict=True)}
        manifest = history.model_copy(
            update={
                "home": "collection",
                "n_tripwires": len(tripwires),
                "set_hash": set_hash(tripwires),
                "texts_sha256": None,
                "vectors_sha256": None,
            }
        )
        return TripwireSet(manifest, tripwires, vectors)

    def version(self, kb: KnowledgeBase) -> str:
        """A digest of the flagged records' ids, texts and metadata (no vectors read): it
        changes with the set, whoever changed it (a replica on another host, the
        application itself)."""
        stored = self.collection.read(vectors=False)
        rows = sorted(
            f"{key}\x1f{text}\x1f{json.dumps(metadata, sort_keys=True, default=str)}"
            for key, text, metadata in zip(stored.keys, stored.texts, stored.metadatas, strict=True)
        )
        return sha256_text(*rows)

    def tidy(self, root: Path, generation: int) -> None:
        """Nothing to tidy: a change is one write to the collection."""

    def commit(
        self,
        kb: KnowledgeBase,
        new: TripwireSet,
        change: TripwireChange,
    ) -> TripwireManifest:
        """Write the added records (or delete the removed ones), then the history."""
        changed = set(change.ids)
        if change.action == "add":
            rows = [i for i, t in enumerate(new.tripwires) if t.id in changed]
            added = [new.tripwires[i] for i in rows]
            self.collection.write(records_of(self.collection, added, new.vectors[rows]))
            self._keys |= {t.id: self.collection.key_of(t.id) for t in added}
        else:
            self.collection.delete([self._keys.pop(i) for i in change.ids])
        crash_point(f"tripwires.{change.action}:collection-written")
        manifest = new.manifest.model_copy(update={"home": "collection"})
        write_json(kb_root(kb) / TRIPWIRE_MANIFEST, manifest.model_dump(mode="json"))
        return manifest
