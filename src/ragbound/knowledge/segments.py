"""Segment files: the local backings' rows in the knowledge-base folder, and the folder's care.

Layout of a local knowledge-base folder (names in :mod:`ragbound.knowledge.layout`)::

    manifest.json                            what made it, and the SHA-256 of every file
                                             below; replacing it is the commit of every write
    segments/000001-3f9a1c2b.chunks.jsonl    one chunk per line (id, text, doc_id, source, ...)
    segments/000001-3f9a1c2b.vectors.npy     float32 or float16 (manifest ``vector_dtype``)
                                             (n_chunks_in_segment, dim); absent for BM25
    segments/000001-3f9a1c2b.units.jsonl     fine units (sentences, windows), only when indexed:
                                             one per line, {chunk (row in the segment),
                                             granularity, text}
    segments/000001-3f9a1c2b.units.npy       float32 (n_units_in_segment, dim); absent for BM25

New segment files get names no committed manifest uses (``<seq>-<random>``); one atomic
replace of ``manifest.json`` commits them, so a crash at any step leaves the previous
knowledge base whole, and the files no manifest refers to are removed by the next write.
Loading memory-maps the vector files (read-only) and checks each file's SHA-256 and that it
holds finite numbers, in bounded-size blocks.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from ragbound.artifacts import (
    check_sha256,
    file_sha256,
    file_stamp,
    iter_jsonl,
    read_npy,
    write_jsonl,
    write_npy,
)
from ragbound.corpus import Chunk
from ragbound.corpus.units import Unit
from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge.layout import (
    CALIBRATION_DIR,
    CHUNKS_SUFFIX,
    MANIFEST,
    SEGMENTS,
    TRIPWIRE_DIR,
    TRIPWIRE_MANIFEST,
    UNIT_VECTORS_SUFFIX,
    UNITS_SUFFIX,
    VECTORS_SUFFIX,
    WRITTEN_BY_RAGBOUND,
    is_temporary,
)
from ragbound.knowledge.manifest import KBManifest, Segment

CHECK_ROWS = 65_536  # rows per block when checking a vector file for NaN / infinity


@dataclass
class FineUnits:
    """Fine units and their (dense) vectors, rows aligned; ``unit.chunk`` is a chunk row."""

    units: list[Unit]
    vectors: np.ndarray | None

    @classmethod
    def empty(cls, dimension: int | None) -> FineUnits:
        vectors = None if dimension is None else np.empty((0, dimension), np.float32)
        return cls([], vectors)

    def shifted(self, offset: int) -> FineUnits:
        """The same units with chunk rows moved by ``offset``."""
        units = [u.model_copy(update={"chunk": u.chunk + offset}) for u in self.units]
        return FineUnits(units, self.vectors)

    def concat(self, other: FineUnits) -> FineUnits:
        vectors = None
        if self.vectors is not None and other.vectors is not None:
            vectors = np.concatenate([self.vectors, other.vectors])
        return FineUnits(self.units + other.units, vectors)

    def of_chunks(self, start: int, stop: int) -> FineUnits:
        """The units of chunk rows [start, stop), rows renumbered from 0 (units are in
        chunk order)."""
        chunk_rows = [u.chunk for u in self.units]
        lo, hi = np.searchsorted(chunk_rows, [start, stop])
        vectors = None if self.vectors is None else self.vectors[lo:hi]
        return FineUnits(self.units[lo:hi], vectors).shifted(-start)


@dataclass
class PendingSegment:
    """A segment to be written: its chunks, (dense) vectors and fine units (rows local)."""

    segment: Segment
    chunks: Sequence[Chunk]
    vectors: np.ndarray | None
    units: FineUnits


def segment_offsets(segments: list[Segment]) -> dict[str, tuple[int, int]]:
    offsets, start = {}, 0
    for segment in segments:
        offsets[segment.name] = (start, start + segment.n_chunks)
        start += segment.n_chunks
    return offsets


def silent(message: str) -> None:
    """The default ``notify``: the Python API stays quiet."""


def same_dir(a: Path, b: Path) -> bool:
    return a.absolute() == b.absolute() or (a.exists() and b.exists() and a.samefile(b))


def manifest_stamp(root: Path) -> tuple[int, int] | None:
    """Identity of the committed manifest file: every commit replaces it by a new inode."""
    return file_stamp(root / MANIFEST)


def fresh_name(seg_dir: Path, seq: int, taken: set[str]) -> str:
    """``<seq>-<random>``: a name no manifest uses and no file on disk has."""
    while True:
        name = f"{seq:06d}-{secrets.token_hex(4)}"
        if name not in taken and not any(seg_dir.glob(f"{name}.*")):
            return name


def check_index_target(
    target: Path, *, overwrite: bool = False, delete_other_files: bool = False
) -> list[Path]:
    """Refuse a folder ``index`` must not write into; return the other files it may delete.

    A new or empty folder, or one holding only what a crashed, never-committed build left
    (segment files, temporary files), is fine. A knowledge base there needs ``overwrite``.
    Files ragbound did not write need ``delete_other_files`` (with ``overwrite``); the
    error names them.
    """
    if target.exists() and not target.is_dir():
        raise InputError(f"cannot save the knowledge base to {target}: it is a file")
    if not target.is_dir():
        return []
    if (target / MANIFEST).exists() and not overwrite:
        raise InputError(
            f"{target} already holds a knowledge base: add documents with ragbound add, "
            "or pass --overwrite (overwrite=True) to replace it"
        )
    ours = WRITTEN_BY_RAGBOUND
    others = sorted(p for p in target.iterdir() if p.name not in ours and not is_temporary(p.name))
    if not others:
        return []
    shown = ", ".join(p.name for p in others[:5]) + (" ..." if len(others) > 5 else "")
    if not overwrite:
        raise InputError(
            f"cannot save the knowledge base to {target}: the folder is not empty "
            f"and holds no knowledge base ({shown})"
        )
    if not delete_other_files:
        raise InputError(
            f"{target} holds {len(others)} file(s) ragbound did not write: {shown}; move them "
            "away, or pass --delete-other-files (delete_other_files=True) to delete them"
        )
    return others


def check_new_folder(out: Path) -> None:
    """The folder of a knowledge base whose rows live in a store (a PostgreSQL table, an
    attached collection) must be new or empty (InputError otherwise)."""
    if (Path(out) / MANIFEST).exists():
        raise InputError(
            f"{out} already holds a knowledge base: a PostgreSQL or attached knowledge base is "
            "saved into a new or empty folder"
        )
    check_index_target(Path(out))


def remove_unreferenced(seg_dir: Path, segments: list[Segment]) -> None:
    """Delete segment files no manifest references (crashed writes, a replaced knowledge base)."""
    if not seg_dir.is_dir():
        return
    suffixes = (CHUNKS_SUFFIX, VECTORS_SUFFIX, UNITS_SUFFIX, UNIT_VECTORS_SUFFIX)
    keep = {f"{s.name}{suffix}" for s in segments for suffix in suffixes}
    for path in seg_dir.iterdir():
        if path.name not in keep and path.is_file():
            path.unlink(missing_ok=True)
    for path in seg_dir.parent.iterdir():
        if is_temporary(path.name) and path.is_file():
            path.unlink(missing_ok=True)  # a crashed manifest write


def remove_old_knowledge(target: Path, notify: Callable[[str], None]) -> None:
    """Remove the replaced knowledge's calibration and tripwires, saying so.

    They were made against the old chunks: a calibration's null distribution and the
    tripwires' vectors mean nothing for the new ones. Each commit file goes first, so a
    crash midway leaves nothing that loads half-made.
    """
    calibration = target / CALIBRATION_DIR
    if calibration.exists():
        (calibration / MANIFEST).unlink(missing_ok=True)
        shutil.rmtree(calibration, ignore_errors=True)
        notify(
            f"warning: removed the calibration of the replaced knowledge base ({calibration}): "
            f"calibrate again (ragbound calibrate {target} --queries FILE)"
        )
    tripwires = [target / TRIPWIRE_MANIFEST, target / TRIPWIRE_DIR]
    if any(p.exists() for p in tripwires):
        tripwires[0].unlink(missing_ok=True)
        shutil.rmtree(tripwires[1], ignore_errors=True)
        notify(
            "warning: removed the tripwires of the replaced knowledge base "
            f"({tripwires[0].name}, {tripwires[1].name}/): add them again (ragbound tripwire add)"
        )


def remove_other_files(target: Path, others: list[Path], notify: Callable[[str], None]) -> None:
    """Delete the files ragbound did not write (only ever with delete_other_files)."""
    for path in others:
        remove_path(path)
    if others:
        names = ", ".join(p.name for p in others)
        notify(f"warning: deleted {len(others)} other file(s) in {target}: {names}")


def read_all_vectors(root: Path, manifest: KBManifest) -> list[np.ndarray]:
    """Each segment's vectors as a read-only memory map, checked (nothing read into memory)."""
    if sum(s.n_chunks for s in manifest.segments) != manifest.n_chunks:
        raise ArtifactError(f"{root / MANIFEST}: segment sizes do not add up to n_chunks")
    return [_read_vectors(root, segment, manifest) for segment in manifest.segments]


def _read_vectors(root: Path, segment: Segment, manifest: KBManifest) -> np.ndarray:
    """One segment's vectors, memory-mapped and checked: SHA-256 (read in 1 MiB blocks),
    shape, dtype, and finite values (checked ``CHECK_ROWS`` rows at a time)."""
    path = root / SEGMENTS / f"{segment.name}{VECTORS_SUFFIX}"
    check_sha256(path, segment.vectors_sha256, "vector file")
    vectors = read_npy(path, "vector file", mmap=True)
    expected = (segment.n_chunks, manifest.embedder.dimension)
    dtype = manifest.vector_dtype
    if vectors.dtype != np.dtype(dtype) or vectors.shape != expected:
        raise ArtifactError(
            f"{path}: expected {dtype} {expected}, found {vectors.dtype} {vectors.shape}"
        )
    if not _file_all_finite(path, vectors):
        raise ArtifactError(f"{path}: holds NaN or infinite values")
    return vectors


def _file_all_finite(path: Path, mapped: np.memmap) -> bool:
    """``_all_finite`` over a mapped file's values, read from the file rather than through
    the map: pages read through a map stay in this process's resident memory (a million
    float16 rows: 730 MB), which an HNSW search, reading the graph, would never touch."""
    row_values = int(np.prod(mapped.shape[1:], dtype=np.int64))
    with path.open("rb") as handle:
        handle.seek(mapped.offset)
        for start in range(0, len(mapped), CHECK_ROWS):
            count = min(CHECK_ROWS, len(mapped) - start) * row_values
            block = np.fromfile(handle, dtype=mapped.dtype, count=count)
            if len(block) != count or not np.isfinite(block).all():
                return False
    return True


def write_units(seg_dir: Path, name: str, units: FineUnits) -> dict[str, Any]:
    """Write a segment's fine units (and vectors); return the segment fields to update."""
    unit_file = seg_dir / f"{name}{UNITS_SUFFIX}"
    write_jsonl(unit_file, (u.model_dump(mode="json") for u in units.units))
    update: dict[str, Any] = {"units_sha256": file_sha256(unit_file)}
    if units.vectors is not None:
        vector_file = seg_dir / f"{name}{UNIT_VECTORS_SUFFIX}"
        write_npy(vector_file, np.ascontiguousarray(units.vectors, np.float32))
        update["unit_vectors_sha256"] = file_sha256(vector_file)
    return update


def read_units(root: Path, segment: Segment, dimension: int) -> FineUnits:
    """One segment's fine units (chunk rows local to it) and, if dense, their vectors."""
    path = root / SEGMENTS / f"{segment.name}{UNITS_SUFFIX}"
    check_sha256(path, segment.units_sha256, "unit file")
    units = []
    for number, row in enumerate(iter_jsonl(path, "unit file"), start=1):
        try:
            unit = Unit.model_validate(row)
        except ValidationError as exc:
            raise ArtifactError(f"unit file {path}:{number} is invalid: {exc}") from exc
        if not 0 <= unit.chunk < segment.n_chunks:
            raise ArtifactError(f"unit file {path}:{number}: chunk {unit.chunk} is not in it")
        units.append(unit)
    if len(units) != segment.n_units:
        raise ArtifactError(f"{path} holds {len(units)} units, the manifest says {segment.n_units}")
    if not dimension:
        return FineUnits(units, None)
    vector_path = root / SEGMENTS / f"{segment.name}{UNIT_VECTORS_SUFFIX}"
    check_sha256(vector_path, segment.unit_vectors_sha256, "unit vector file")
    vectors = read_npy(vector_path, "unit vector file", mmap=True)
    if vectors.dtype != np.float32 or vectors.shape != (segment.n_units, dimension):
        raise ArtifactError(
            f"{vector_path}: expected float32 {(segment.n_units, dimension)}, "
            f"found {vectors.dtype} {vectors.shape}"
        )
    return FineUnits(units, np.array(vectors))


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
