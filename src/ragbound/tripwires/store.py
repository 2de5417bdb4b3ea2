"""Tripwires stored inside a knowledge-base directory, added and removed live.

Layout, beside the knowledge base's own files::

    tripwires.json                 the tripwire manifest: generation, set hash, history
    tripwires/g000003.jsonl        the active tripwires, one per line
    tripwires/g000003.npy          their float32 vectors, rows aligned

A change embeds its new tripwires first (no lock held), then takes the knowledge base's
writer lock (:func:`ragbound.locking.writer_lock`, shared with ``add`` and ``calibrate``),
re-reads the committed set, applies the change to it, writes the next generation's two files
(the others' vectors are copied, never re-embedded) and replaces ``tripwires.json``
atomically. Two changes at once both land, each tripwire with its own vector; a crash at any
step leaves the previous set intact, and the next change removes what it left (files of an
uncommitted generation, temporary files). ``tripwires.json`` records the SHA-256 of both
files, checked on load; vectors must be finite and of the knowledge's dimension. The
knowledge's chunks, vectors and manifest are never touched, so its fingerprint and every
calibration made against it stay valid.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ragbound.artifacts import (
    check_sha256,
    file_sha256,
    iter_jsonl,
    read_json,
    read_manifest,
    read_npy,
    utc_now,
    write_json,
    write_jsonl,
    write_npy,
)
from ragbound.errors import ArtifactError, IncompatibleArtifactError, InputError
from ragbound.faults import crash_point
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.layout import (
    KB_FORMAT,
    LOCK_WHAT,
    MANIFEST,
    TRIPWIRE_DIR,
    TRIPWIRE_MANIFEST,
)
from ragbound.knowledge.manifest import KBManifest
from ragbound.locking import writer_lock
from ragbound.stores import ExactStore, Hits, Retriever
from ragbound.tripwires.files import check_unique_ids
from ragbound.tripwires.models import (
    TRIPWIRE_FORMAT,
    Tripwire,
    TripwireChange,
    TripwireManifest,
    set_hash,
)


class TripwireStore:
    """The tripwires of one saved knowledge base; ``search`` is exact inner product.

    Tripwires are few (hundreds to thousands) and live as files beside the knowledge base,
    so they are always searched by an in-process exact :class:`~ragbound.stores.Retriever`,
    whatever store holds the knowledge's chunks.

    Example:
        >>> kb = KnowledgeBase.load("kb/")  # doctest: +SKIP
        >>> store = TripwireStore.open(kb)  # doctest: +SKIP
        >>> store.add(read_tripwires("tripwires.jsonl"))  # doctest: +SKIP
        >>> store.topics()  # doctest: +SKIP
        {'weapons': 12}
    """

    def __init__(
        self,
        kb: KnowledgeBase,
        manifest: TripwireManifest,
        tripwires: list[Tripwire],
        vectors: np.ndarray,
    ):
        self.kb = kb
        self.manifest = manifest
        self.tripwires = tripwires
        self.vectors = vectors
        self._index = _index(kb, vectors)

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, kb: KnowledgeBase) -> TripwireStore:
        """The tripwires saved with ``kb`` (none yet: an empty store). ``kb`` must be saved."""
        return cls(kb, *_read_committed(kb))

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
        batch_size: int = 64,
        progress: bool = False,
        on_wait: Callable[[str], None] | None = None,
    ) -> TripwireChange:
        """Embed and add ``tripwires``; only they are embedded. Commits a new generation.

        Embeds without the lock, then under the knowledge base's writer lock adds them to
        the set committed by then (another process may have changed it meanwhile).
        ``on_wait`` is called once with a message if another writer holds the lock. Raises
        InputError (and changes nothing) for an empty list, duplicate ids in it, or an id
        already present.
        """
        new = list(tripwires)
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
        root = _root(self.kb)
        with writer_lock(root, what=LOCK_WHAT, on_wait=on_wait):
            _check_same_embedder(self.kb)
            self._use(*_read_committed(self.kb))
            _remove_uncommitted(root, self.manifest.generation)
            yield

    def _commit(
        self,
        tripwires: list[Tripwire],
        vectors: np.ndarray,
        action: str,
        changed: list[Tripwire],
        source: str | None,
    ) -> TripwireChange:
        root = _root(self.kb)
        generation = self.manifest.generation + 1
        folder = root / TRIPWIRE_DIR
        folder.mkdir(exist_ok=True)
        vectors = np.ascontiguousarray(vectors, np.float32)
        _check_vectors(vectors, len(tripwires), self.kb, "the tripwire vectors to write")
        texts_path, vectors_path = _paths(root, generation)
        write_jsonl(texts_path, (t.model_dump(mode="json", exclude_none=True) for t in tripwires))
        crash_point(f"tripwires.{action}:texts-written")
        write_npy(vectors_path, vectors)
        crash_point(f"tripwires.{action}:generation-written")
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
                "generation": generation,
                "n_tripwires": len(tripwires),
                "set_hash": change.set_hash,
                "history": [*self.manifest.history, change],
                "texts_sha256": file_sha256(texts_path),
                "vectors_sha256": file_sha256(vectors_path),
            }
        )
        write_json(root / TRIPWIRE_MANIFEST, manifest.model_dump(mode="json"))  # commit point
        crash_point(f"tripwires.{action}:committed")
        _remove_uncommitted(root, generation)  # the generation it replaced
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


def _root(kb: KnowledgeBase) -> Path:
    if kb.path is None:
        raise InputError("save the knowledge base before adding tripwires (they live beside it)")
    if kb.manifest.embedder.kind != "dense":
        raise InputError(
            "tripwires need a dense knowledge base (minilm, mpnet or a local model): BM25 "
            "scores of tripwires and documents are not comparable"
        )
    return kb.path


def _name(generation: int) -> str:
    return f"g{generation:06d}"


def _read_manifest(path: Path) -> TripwireManifest:
    data = read_json(path, "tripwire manifest")
    if not isinstance(data, dict) or data.get("format") != TRIPWIRE_FORMAT:
        raise ArtifactError(f"{path}: not a ragbound tripwire manifest ({TRIPWIRE_FORMAT})")
    try:
        return TripwireManifest.model_validate(data)
    except ValueError as exc:
        raise ArtifactError(f"{path}: invalid tripwire manifest: {exc}") from exc


def _read_committed(kb: KnowledgeBase) -> tuple[TripwireManifest, list[Tripwire], np.ndarray]:
    """The committed manifest, tripwires and vectors of ``kb`` (an empty set when none)."""
    root = _root(kb)
    identity = kb.manifest.embedder.identity()
    path = root / TRIPWIRE_MANIFEST
    if not path.exists():
        empty = np.empty((0, kb.manifest.embedder.dimension), dtype=np.float32)
        return TripwireManifest(embedder_identity=identity), [], empty
    manifest = _read_manifest(path)
    if manifest.embedder_identity != identity:
        raise IncompatibleArtifactError(
            f"{path}: the tripwires were embedded by another model than this knowledge "
            "base's; remove tripwires.json and the tripwires folder, then add them again"
        )
    return manifest, *_read_generation(kb, manifest)


def _read_generation(
    kb: KnowledgeBase, manifest: TripwireManifest
) -> tuple[list[Tripwire], np.ndarray]:
    texts_path, vectors_path = _paths(_root(kb), manifest.generation)
    check_sha256(texts_path, manifest.texts_sha256, "tripwire file")
    check_sha256(vectors_path, manifest.vectors_sha256, "tripwire vectors")
    rows = list(iter_jsonl(texts_path, "tripwire file"))
    try:
        tripwires = [Tripwire.model_validate(row) for row in rows]
    except ValueError as exc:
        raise ArtifactError(f"{texts_path}: invalid tripwire: {exc}") from exc
    if len(tripwires) != manifest.n_tripwires:
        raise ArtifactError(
            f"{texts_path} holds {len(tripwires)} tripwires; the manifest says "
            f"{manifest.n_tripwires}"
        )
    if set_hash(tripwires) != manifest.set_hash:
        raise ArtifactError(f"{texts_path} does not match the manifest's set hash")
    vectors = read_npy(vectors_path, "tripwire vectors")
    _check_vectors(vectors, len(tripwires), kb, f"tripwire vectors {vectors_path}")
    return tripwires, np.ascontiguousarray(vectors, dtype=np.float32)


def _check_vectors(vectors: np.ndarray, rows: int, kb: KnowledgeBase, what: str) -> None:
    """ArtifactError unless ``vectors`` are finite floats, one row of the KB's dimension each."""
    shape = (rows, kb.manifest.embedder.dimension)
    if vectors.shape != shape or vectors.dtype.kind != "f":
        raise ArtifactError(
            f"{what}: {vectors.dtype} of shape {vectors.shape}, expected floats of shape {shape}"
        )
    if not np.isfinite(vectors).all():
        raise ArtifactError(f"{what}: hold NaN or inf")


def _paths(root: Path, generation: int) -> tuple[Path, Path]:
    """A generation's tripwire file and vector file."""
    folder = root / TRIPWIRE_DIR
    return folder / f"{_name(generation)}.jsonl", folder / f"{_name(generation)}.npy"


def _check_same_embedder(kb: KnowledgeBase) -> None:
    """Refuse to commit vectors when the knowledge base on disk now has another embedder."""
    root = _root(kb)
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


def _remove_uncommitted(root: Path, generation: int) -> None:
    """Delete every file in the tripwires folder but ``generation``'s, and temporary files
    of interrupted writes of ``tripwires.json``.

    Called with the writer lock held: no other writer is midway through any of them, so
    what is found is an older generation or what a crashed change left.
    """
    folder = root / TRIPWIRE_DIR
    current = _name(generation)
    stale = (
        [p for p in folder.iterdir() if p.name.split(".", 1)[0] != current]
        if folder.is_dir()
        else []
    )
    stale += root.glob(f".{TRIPWIRE_MANIFEST}.*.tmp")
    for path in stale:
        if path.is_file():
            path.unlink(missing_ok=True)
