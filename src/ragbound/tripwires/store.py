"""Tripwires stored inside a knowledge-base directory, added and removed live.

Layout, beside the knowledge base's own files::

    tripwires.json                 the tripwire manifest: generation, set hash, history
    tripwires/g000003.jsonl        the active tripwires, one per line
    tripwires/g000003.npy          their float32 vectors, rows aligned

A change writes the next generation's two files (new tripwires are embedded, the others'
vectors are copied, never re-embedded), then replaces ``tripwires.json`` atomically: a crash
at any point leaves the previous set intact. The knowledge's chunks, vectors and manifest are
never touched, so its fingerprint and every calibration made against it stay valid.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from ragbound.artifacts import (
    iter_jsonl,
    read_json,
    read_npy,
    utc_now,
    write_json,
    write_jsonl,
    write_npy,
)
from ragbound.errors import ArtifactError, IncompatibleArtifactError, InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.stores import ExactStore, Hits, Retriever
from ragbound.tripwires.files import check_unique_ids
from ragbound.tripwires.models import (
    TRIPWIRE_FORMAT,
    Tripwire,
    TripwireChange,
    TripwireManifest,
    set_hash,
)

TRIPWIRE_MANIFEST = "tripwires.json"
TRIPWIRE_DIR = "tripwires"


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
        root = _root(kb)
        identity = kb.manifest.embedder.identity()
        path = root / TRIPWIRE_MANIFEST
        if not path.exists():
            empty = np.empty((0, kb.manifest.embedder.dimension), dtype=np.float32)
            return cls(kb, TripwireManifest(embedder_identity=identity), [], empty)
        manifest = _read_manifest(path)
        if manifest.embedder_identity != identity:
            raise IncompatibleArtifactError(
                f"{path}: the tripwires were embedded by another model than this knowledge "
                "base's; remove tripwires.json and the tripwires folder, then add them again"
            )
        tripwires, vectors = _read_generation(root, manifest)
        return cls(kb, manifest, tripwires, vectors)

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
    ) -> TripwireChange:
        """Embed and add ``tripwires``; only they are embedded. Commits a new generation.

        Raises InputError (and changes nothing) for an empty list, duplicate ids in it, or
        an id already present.
        """
        new = list(tripwires)
        if not new:
            raise InputError("no tripwires to add")
        check_unique_ids(new, "the tripwires to add")
        present = {t.id for t in self.tripwires} & {t.id for t in new}
        if present:
            shown = ", ".join(sorted(present)[:5])
            raise InputError(
                f"{len(present)} tripwire id(s) already in the knowledge base: {shown}; "
                "remove them first or give other ids"
            )
        vectors = self.kb.embed([t.text for t in new], progress=progress)
        return self._commit(
            self.tripwires + new, np.concatenate([self.vectors, vectors]), "add", new, source
        )

    def remove(self, *, topics: Iterable[str] = (), ids: Iterable[str] = ()) -> TripwireChange:
        """Remove every tripwire of ``topics`` and those with ``ids``; no vector is re-embedded.

        Raises InputError (and changes nothing) naming a topic or id that is not present.
        """
        topics, ids = set(topics), set(ids)
        if not topics and not ids:
            raise InputError("name the tripwires to remove: a topic or an id")
        _check_known(topics, set(self.topics()), "topic")
        _check_known(ids, {t.id for t in self.tripwires}, "id")
        keep = [t.topic not in topics and t.id not in ids for t in self.tripwires]
        removed = [t for t, kept in zip(self.tripwires, keep, strict=True) if not kept]
        kept_tripwires = [t for t, kept in zip(self.tripwires, keep, strict=True) if kept]
        return self._commit(
            kept_tripwires, self.vectors[np.asarray(keep, dtype=bool)], "remove", removed, None
        )

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
        write_jsonl(
            folder / f"{_name(generation)}.jsonl",
            (t.model_dump(mode="json", exclude_none=True) for t in tripwires),
        )
        write_npy(folder / f"{_name(generation)}.npy", np.ascontiguousarray(vectors, np.float32))
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
            }
        )
        write_json(root / TRIPWIRE_MANIFEST, manifest.model_dump(mode="json"))  # commit point
        _remove_stale(folder, generation)
        self.manifest, self.tripwires, self.vectors = manifest, tripwires, vectors
        self._index = _index(self.kb, vectors)
        return change


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


def _read_generation(root: Path, manifest: TripwireManifest) -> tuple[list[Tripwire], np.ndarray]:
    folder = root / TRIPWIRE_DIR
    name = _name(manifest.generation)
    rows = list(iter_jsonl(folder / f"{name}.jsonl", "tripwire file"))
    try:
        tripwires = [Tripwire.model_validate(row) for row in rows]
    except ValueError as exc:
        raise ArtifactError(f"{folder / name}.jsonl: invalid tripwire: {exc}") from exc
    vectors = read_npy(folder / f"{name}.npy", "tripwire vectors")
    if len(tripwires) != manifest.n_tripwires or vectors.shape[0] != len(tripwires):
        raise ArtifactError(
            f"{folder}: generation {name} holds {len(tripwires)} tripwires and "
            f"{vectors.shape[0]} vectors; the manifest says {manifest.n_tripwires}"
        )
    if set_hash(tripwires) != manifest.set_hash:
        raise ArtifactError(f"{folder / name}.jsonl does not match the manifest's set hash")
    return tripwires, np.ascontiguousarray(vectors, dtype=np.float32)


def _check_known(asked: set[str], present: set[str], what: str) -> None:
    unknown = sorted(asked - present)
    if unknown:
        shown = ", ".join(repr(u) for u in unknown[:5])
        raise InputError(f"no tripwire with {what} {shown} in this knowledge base")


def _remove_stale(folder: Path, generation: int) -> None:
    """Delete every other generation's files (older ones, or a crashed change's leftovers)."""
    current = _name(generation)
    for path in folder.glob("g*.*"):
        if path.name.split(".", 1)[0] != current:
            path.unlink(missing_ok=True)
