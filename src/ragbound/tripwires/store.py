"""Tripwires of a knowledge base, added and removed live.

A change embeds its new tripwires first (no lock held), then takes the knowledge base's
writer lock (:func:`ragbound.locking.writer_lock`, shared with ``add`` and ``calibrate``),
re-reads the committed set, applies the change to it and commits it in the set's backing: files
in the folder (:mod:`ragbound.tripwires.folder`) or records in the collection an attached
knowledge base reads (:mod:`ragbound.tripwires.collection`). Two changes at once both land,
each tripwire with its own vector. The knowledge's chunks, vectors and manifest are never
touched, so its fingerprint and every calibration made against it stay valid.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import numpy as np

from ragbound.artifacts import file_stamp, read_manifest, utc_now
from ragbound.errors import IncompatibleArtifactError, InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.layout import KB_FORMAT, LOCK_WHAT, MANIFEST, TRIPWIRE_MANIFEST
from ragbound.knowledge.manifest import KBManifest
from ragbound.knowledge.registry import imported
from ragbound.locking import writer_lock
from ragbound.stores import ExactStore, Hits, Retriever
from ragbound.tripwires.collection import CollectionTripwireBacking, TripwireCollection
from ragbound.tripwires.files import check_unique_ids
from ragbound.tripwires.folder import (
    FOLDER_POLL_S,
    FolderTripwireBacking,
    check_vectors,
    kb_root,
)
from ragbound.tripwires.models import (
    Tripwire,
    TripwireChange,
    TripwireManifest,
    TripwireSet,
    flat_text,
    set_hash,
    storable,
)


class TripwireBacking(Protocol):
    """Where a tripwire set lives: it reads the committed set and commits a new one;
    ``version`` changes whenever the set may have (asked every ``poll_s`` by a service)."""

    poll_s: float

    def describe(self, kb: KnowledgeBase) -> str: ...

    def version(self, kb: KnowledgeBase) -> Hashable: ...

    def read(self, kb: KnowledgeBase) -> TripwireSet: ...

    def tidy(self, root: Path, generation: int) -> None: ...

    def commit(
        self,
        kb: KnowledgeBase,
        new: TripwireSet,
        change: TripwireChange,
    ) -> TripwireManifest: ...


def backing_of(kb: KnowledgeBase) -> TripwireBacking:
    """The collection of an attached backing that can hold tripwires, else the folder."""
    collection = tripwire_collection(kb)
    return (
        CollectionTripwireBacking(collection) if collection is not None else FolderTripwireBacking()
    )


def tripwire_collection(kb: KnowledgeBase) -> TripwireCollection | None:
    """The tripwire records of the collection ``kb`` is attached to (Chroma, Qdrant), or None
    for a backing whose store cannot hold them."""
    records = kb.backing.capabilities.tripwires  # the class's dotted path, imported now
    if records is None:
        return None
    return imported(records)(kb.backing.location)  # type: ignore[attr-defined]


class TripwireWatch:
    """Whether the tripwire set stored for a knowledge base changed, for a long-running
    service: ``local()`` is one ``stat`` of ``tripwires.json`` (every change made through
    ragbound on this host rewrites it), ``version()`` asks the backing every ``interval``
    seconds, so that a change made elsewhere is seen. Both are None for a knowledge base that
    cannot hold tripwires.
    """

    def __init__(self, kb: KnowledgeBase):
        dense = kb.path is not None and kb.manifest.embedder.kind == "dense"
        self.kb = kb
        self.backing: TripwireBacking | None = backing_of(kb) if dense else None
        self.interval = self.backing.poll_s if self.backing is not None else FOLDER_POLL_S

    def local(self) -> tuple[int, int] | None:
        return file_stamp(kb_root(self.kb) / TRIPWIRE_MANIFEST) if self.backing else None

    def version(self) -> Hashable:
        """The backing's version (ArtifactError or InputError when a collection is unreachable)."""
        return self.backing.version(self.kb) if self.backing is not None else None


class LiveTripwires:
    """The tripwires of one saved knowledge base, wherever they live, read with their vectors
    and searched exactly in-process (they are few).

    Example:
        >>> kb = KnowledgeBase.load("kb/")  # doctest: +SKIP
        >>> store = LiveTripwires.open(kb)  # doctest: +SKIP
        >>> store.add(read_tripwires("tripwires.jsonl"))  # doctest: +SKIP
        >>> store.topics()  # doctest: +SKIP
        {'weapons': 12}
    """

    reads_search = False  # searches the query vectors it is given

    def __init__(
        self,
        kb: KnowledgeBase,
        manifest: TripwireManifest,
        tripwires: list[Tripwire],
        vectors: np.ndarray,
        backing: TripwireBacking | None = None,
    ):
        self.kb = kb
        self.manifest = manifest
        self.tripwires = tripwires
        self.vectors = vectors
        self.backing = backing or FolderTripwireBacking()
        self._index = _index(kb, vectors)

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, kb: KnowledgeBase) -> LiveTripwires:
        """The tripwires of ``kb`` (none yet: an empty store). ``kb`` must be saved.

        They live in the folder, or, on a knowledge base attached to a collection that can
        hold them (Chroma, Qdrant), in that collection (:mod:`ragbound.tripwires.collection`).
        """
        backing = backing_of(kb)
        committed = backing.read(kb)
        return cls(kb, committed.manifest, committed.tripwires, committed.vectors, backing=backing)

    @property
    def where(self) -> str:
        """Where the tripwires live, for messages."""
        return self.backing.describe(self.kb)

    # ------------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self.tripwires)

    def topics(self) -> dict[str, int]:
        """Tripwires per topic, sorted by topic."""
        return dict(sorted(Counter(t.topic for t in self.tripwires).items()))

    def search(self, query_vectors: np.ndarray, k: int) -> Hits:
        """Top-min(k, n) tripwires per query (rows into ``tripwires``), similarity descending;
        no columns while the set is empty."""
        if self._index is None:
            n = len(query_vectors)
            return Hits(np.empty((n, 0), np.float32), np.empty((n, 0), np.int64))
        return self._index.search(query_vectors, min(k, len(self._index)))

    # ------------------------------------------------------------------ changes
    def add(
        self,
        tripwires: Sequence[Tripwire],
        *,
        source: str | None = None,
        progress: bool = False,
        on_wait: Callable[[str], None] | None = None,
    ) -> TripwireChange:
        """Embed and add ``tripwires``; only they are embedded. Commits a new generation.

        Embeds without the lock, then under the knowledge base's writer lock adds them to
        the set committed by then (another process may have changed it meanwhile).
        ``on_wait`` is called once with a message if another writer holds the lock. Raises
        InputError (and changes nothing) for an empty list, duplicate ids in it, an id
        already present, or an id or topic holding a control character
        (:func:`~ragbound.tripwires.models.storable`; notes and ``source`` are put on one
        line).
        """
        new = [storable(t) for t in tripwires]
        source = flat_text(source)
        if not new:
            raise InputError("no tripwires to add")
        check_unique_ids(new, "the tripwires to add")
        _check_absent(new, self.tripwires)  # fail before embedding when we can
        vectors = self.kb.embed([t.text for t in new], progress=progress)
        with self._writing(on_wait):
            _check_absent(new, self.tripwires)
            return self._commit(
                self.tripwires + new, np.concatenate([self.vectors, vectors]), "add", new, source
            )

    def remove(
        self,
        *,
        topics: Iterable[str] = (),
        ids: Iterable[str] = (),
        on_wait: Callable[[str], None] | None = None,
    ) -> TripwireChange:
        """Remove every tripwire of ``topics`` and those with ``ids``; no vector is re-embedded.

        Works on the set committed when the lock is taken. Raises InputError (and changes
        nothing) naming a topic or id that is not present.
        """
        topics, ids = set(topics), set(ids)
        if not topics and not ids:
            raise InputError("name the tripwires to remove: a topic or an id")
        with self._writing(on_wait):
            _check_known(topics, set(self.topics()), "topic")
            _check_known(ids, {t.id for t in self.tripwires}, "id")
            keep = [t.topic not in topics and t.id not in ids for t in self.tripwires]
            removed = [t for t, kept in zip(self.tripwires, keep, strict=True) if not kept]
            kept_tripwires = [t for t, kept in zip(self.tripwires, keep, strict=True) if kept]
            return self._commit(
                kept_tripwires, self.vectors[np.asarray(keep, dtype=bool)], "remove", removed, None
            )

    @contextmanager
    def _writing(self, on_wait: Callable[[str], None] | None) -> Iterator[None]:
        """Hold the knowledge base's writer lock, with this store at the committed set."""
        root = kb_root(self.kb)
        with writer_lock(root, what=LOCK_WHAT, on_wait=on_wait):
            _check_same_embedder(self.kb)
            committed = self.backing.read(self.kb)
            self._use(committed.manifest, committed.tripwires, committed.vectors)
            self.backing.tidy(root, self.manifest.generation)
            yield

    def _commit(
        self,
        tripwires: list[Tripwire],
        vectors: np.ndarray,
        action: str,
        changed: list[Tripwire],
        source: str | None,
    ) -> TripwireChange:
        vectors = np.ascontiguousarray(vectors, np.float32)
        check_vectors(vectors, len(tripwires), self.kb, "the tripwire vectors to write")
        change = TripwireChange(
            action=action,  # type: ignore[arg-type]
            at=utc_now(),
            ids=[t.id for t in changed],
            topics=sorted({t.topic for t in changed}),
            source=source,
            n_after=len(tripwires),
            set_hash=set_hash(tripwires),
        )
        manifest = self.manifest.model_copy(
            update={
                "generation": self.manifest.generation + 1,
                "n_tripwires": len(tripwires),
                "set_hash": change.set_hash,
                "history": [*self.manifest.history, change],
            }
        )
        manifest = self.backing.commit(self.kb, TripwireSet(manifest, tripwires, vectors), change)
        self._use(manifest, tripwires, vectors)
        return change

    def _use(self, manifest: TripwireManifest, tripwires: list[Tripwire], vectors: np.ndarray):
        self.manifest, self.tripwires, self.vectors = manifest, tripwires, vectors
        self._index = _index(self.kb, vectors)


def _index(kb: KnowledgeBase, vectors: np.ndarray) -> Retriever | None:
    """An exact index over the tripwire vectors, scored like the knowledge (None when empty)."""
    if not len(vectors):
        return None
    return ExactStore(vectors, similarity=kb.manifest.embedder.similarity)


def _check_same_embedder(kb: KnowledgeBase) -> None:
    """Refuse to commit vectors when the knowledge base on disk now has another embedder."""
    root = kb_root(kb)
    on_disk = read_manifest(root / MANIFEST, KBManifest, KB_FORMAT, "knowledge-base manifest")
    if on_disk.embedder.identity() != kb.manifest.embedder.identity():
        raise IncompatibleArtifactError(
            f"{root} was rebuilt with another embedder while the tripwires were being "
            "embedded; nothing was changed: run the command again"
        )


def _check_absent(new: list[Tripwire], present: list[Tripwire]) -> None:
    clash = {t.id for t in present} & {t.id for t in new}
    if clash:
        shown = ", ".join(sorted(clash)[:5])
        raise InputError(
            f"{len(clash)} tripwire id(s) already in the knowledge base: {shown}; "
            "remove them first or give other ids"
        )


def _check_known(asked: set[str], present: set[str], what: str) -> None:
    unknown = sorted(asked - present)
    if unknown:
        shown = ", ".join(repr(u) for u in unknown[:5])
        raise InputError(f"no tripwire with {what} {shown} in this knowledge base")
