"""Tripwires kept as files in the knowledge-base folder (the home of every knowledge base whose
store cannot hold them itself): ``tripwires.json`` (the manifest: generation, set hash,
history) and the active generation's ``tripwires/g000003.jsonl`` and ``.npy`` (float32
vectors, rows aligned).

A commit writes the next generation's files and then replaces ``tripwires.json`` atomically,
so a crash at any step leaves the previous set intact; the next change removes what it left.
The manifest records both files' SHA-256, checked on load.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ragbound.artifacts import (
    check_sha256,
    file_sha256,
    file_stamp,
    iter_jsonl,
    read_json,
    read_npy,
    write_json,
    write_jsonl,
    write_npy,
)
from ragbound.errors import ArtifactError, IncompatibleArtifactError, InputError
from ragbound.faults import crash_point
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.layout import TRIPWIRE_DIR, TRIPWIRE_MANIFEST
from ragbound.tripwires.models import (
    TRIPWIRE_FORMAT,
    Tripwire,
    TripwireChange,
    TripwireManifest,
    TripwireSet,
    set_hash,
)

FOLDER_POLL_S = 0.5  # between looks at tripwires.json by a service (one stat)


class FolderTripwireBacking:
    """Tripwires as generation files in the knowledge-base folder."""

    poll_s = FOLDER_POLL_S

    def version(self, kb: KnowledgeBase) -> tuple[int, int] | None:
        """The identity of ``tripwires.json`` (None: no tripwires were ever added)."""
        return file_stamp(kb_root(kb) / TRIPWIRE_MANIFEST)

    def describe(self, kb: KnowledgeBase) -> str:
        return str(kb_root(kb))

    def read(self, kb: KnowledgeBase) -> TripwireSet:
        """The committed manifest, tripwires and vectors of ``kb`` (an empty set when none)."""
        path = kb_root(kb) / TRIPWIRE_MANIFEST
        if not path.exists():
            return TripwireSet(read_history(kb), [], empty_vectors(kb))
        manifest = read_tripwire_manifest(path)
        if manifest.home != "folder":
            raise ArtifactError(
                f"{path}: the tripwires live in the collection this knowledge base was "
                "attached to, not in the folder; attach the collection again"
            )
        if manifest.embedder_identity != kb.manifest.embedder.identity():
            raise IncompatibleArtifactError(
                f"{path}: the tripwires were embedded by another model than this knowledge "
                "base's; remove tripwires.json and the tripwires folder, then add them again"
            )
        return TripwireSet(manifest, *_read_generation(kb, manifest))

    def tidy(self, root: Path, generation: int) -> None:
        """Remove what an interrupted change left (called with the writer lock held)."""
        _remove_uncommitted(root, generation)

    def commit(
        self,
        kb: KnowledgeBase,
        new: TripwireSet,
        change: TripwireChange,
    ) -> TripwireManifest:
        """Write ``manifest.generation``'s files, then replace ``tripwires.json`` (the commit
        point); returns the manifest written."""
        root = kb_root(kb)
        (root / TRIPWIRE_DIR).mkdir(exist_ok=True)
        texts_path, vectors_path = _paths(root, new.manifest.generation)
        rows = (t.model_dump(mode="json", exclude_none=True) for t in new.tripwires)
        write_jsonl(texts_path, rows)
        crash_point(f"tripwires.{change.action}:texts-written")
        write_npy(vectors_path, new.vectors)
        crash_point(f"tripwires.{change.action}:generation-written")
        manifest = new.manifest.model_copy(
            update={
                "texts_sha256": file_sha256(texts_path),
                "vectors_sha256": file_sha256(vectors_path),
            }
        )
        write_json(root / TRIPWIRE_MANIFEST, manifest.model_dump(mode="json"))  # commit point
        crash_point(f"tripwires.{change.action}:committed")
        _remove_uncommitted(root, manifest.generation)  # the generation it replaced
        return manifest


def kb_root(kb: KnowledgeBase) -> Path:
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


def read_tripwire_manifest(path: Path) -> TripwireManifest:
    data = read_json(path, "tripwire manifest")
    if not isinstance(data, dict) or data.get("format") != TRIPWIRE_FORMAT:
        raise ArtifactError(f"{path}: not a ragbound tripwire manifest ({TRIPWIRE_FORMAT})")
    try:
        return TripwireManifest.model_validate(data)
    except ValueError as exc:
        raise ArtifactError(f"{path}: invalid tripwire manifest: {exc}") from exc


def read_history(kb: KnowledgeBase) -> TripwireManifest:
    """``tripwires.json`` of ``kb``'s folder (a new, empty manifest when there is none)."""
    path = kb_root(kb) / TRIPWIRE_MANIFEST
    if not path.exists():
        return TripwireManifest(embedder_identity=kb.manifest.embedder.identity())
    return read_tripwire_manifest(path)


def empty_vectors(kb: KnowledgeBase) -> np.ndarray:
    return np.empty((0, kb.manifest.embedder.dimension), dtype=np.float32)


def _read_generation(
    kb: KnowledgeBase, manifest: TripwireManifest
) -> tuple[list[Tripwire], np.ndarray]:
    texts_path, vectors_path = _paths(kb_root(kb), manifest.generation)
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
    check_vectors(vectors, len(tripwires), kb, f"tripwire vectors {vectors_path}")
    return tripwires, np.ascontiguousarray(vectors, dtype=np.float32)


def check_vectors(vectors: np.ndarray, rows: int, kb: KnowledgeBase, what: str) -> None:
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
