"""KnowledgeBase = chunks + embedder + store + manifest, persisted as a plain directory.

Layout of a knowledge-base directory::

    manifest.json                            what made it, and the SHA-256 of every file
                                             below; replacing it is the commit of every write
    segments/000001-3f9a1c2b.chunks.jsonl    one chunk per line (id, text, doc_id, source, ...)
    segments/000001-3f9a1c2b.vectors.npy     float32 or float16 (manifest ``vector_dtype``)
                                             (n_chunks_in_segment, dim); absent for BM25
    segments/000001-3f9a1c2b.units.jsonl     fine units (sentences, windows), only when indexed:
                                             one per line, {chunk (row in the segment), granularity,
                                             text}
    segments/000001-3f9a1c2b.units.npy       float32 (n_units_in_segment, dim); absent for BM25
    staging/<key>/block-000001.npy           a build's finished blocks of vectors, kept until
                                             the build commits so a rerun after a crash
                                             continues from them (see ``build(staging=)``)

Writers take the knowledge base's lock (:func:`ragbound.locking.writer_lock`, shared with
the calibration and the tripwires stored in the same folder) and write new segment files
under names no committed manifest uses (``<seq>-<random>``); one atomic replace of
``manifest.json`` commits them. So a crash at any step leaves the previous knowledge base
whole, and the files it left (referenced by no manifest) are removed by the next write.
Readers take no lock and read the last committed manifest. Segments are append-only: adding
documents embeds and writes only the new chunks.

Granularity (:mod:`ragbound.corpus.units`): besides its chunks, a knowledge base may index
finer units cut from them. A search then scores each chunk by its best unit among the
granularity searched (:class:`~ragbound.stores.PooledStore`) and still returns chunk rows.

Loading memory-maps the vector files (read-only) instead of reading them into memory, and
checks each file's SHA-256 and that it holds finite numbers in bounded-size blocks; search
walks the mapped rows in blocks (:class:`~ragbound.stores.ExactStore`), so the process holds
no copy of the vectors. The chunks stay in their files too: ``chunks`` of a loaded knowledge
base is a :class:`~ragbound.corpus.ChunkSequence` that checks every row once, keeps 16 bytes
of offsets per chunk and builds a ``Chunk`` only when one is read (a million chunks: 16 MB
instead of about 2 GB of objects).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ValidationError

from ragbound._version import __version__
from ragbound.artifacts import (
    check_sha256,
    file_sha256,
    iter_jsonl,
    read_manifest,
    read_npy,
    sha256_text,
    utc_now,
    write_json,
    write_jsonl,
    write_npy,
)
from ragbound.corpus import (
    LINE_IDS,
    Chunk,
    ChunkFile,
    ChunkingParams,
    ChunkSequence,
    Document,
    chunk_documents,
    load_documents,
    validate_query,
)
from ragbound.corpus.units import (
    Granularity,
    Unit,
    UnitParams,
    granularity_label,
    parse_granularity,
    split_units,
)
from ragbound.embedders import EmbedderInfo, canonical_spec, is_lexical, load_dense_embedder
from ragbound.embedders.base import Similarity
from ragbound.embedders.sentence import SentenceTransformerEmbedder, release_freed_memory
from ragbound.errors import ArtifactError, IncompatibleArtifactError, InputError
from ragbound.faults import crash_point
from ragbound.hnsw_kb import (
    GRAPH_DIR,
    HnswIndex,
    has_graph,
    open_store,
    remove_unreferenced_graphs,
    save_graph,
)
from ragbound.locking import writer_lock
from ragbound.progress import progress_bar
from ragbound.stores import (
    BM25Store,
    ExactStore,
    Hits,
    PooledStore,
    QueryKind,
    Retriever,
    SearchInfo,
    bm25_info,
)
from ragbound.stores.hnsw import HnswParams, HnswStore, hnsw_info
from ragbound.stores.postgres import PostgresTable

KB_FORMAT = "ragbound.kb/1"
VectorDType = Literal["float32", "float16"]
VECTOR_DTYPES: tuple[str, ...] = ("float32", "float16")
MANIFEST = "manifest.json"
SEGMENTS = "segments"
CHUNKS_SUFFIX = ".chunks.jsonl"
VECTORS_SUFFIX = ".vectors.npy"
UNITS_SUFFIX = ".units.jsonl"
UNIT_VECTORS_SUFFIX = ".units.npy"
# what the lock is called in messages; the calibration and the tripwires take the same lock
LOCK_WHAT = "knowledge base"
_LOAD_ATTEMPTS = 3  # a reader reads again when a writer replaced the knowledge base meanwhile
# Chunks are embedded in outer batches so the progress bar moves and memory stays flat.
_OUTER_BATCH = 512
STAGING = "staging"  # a build's finished blocks of vectors, under the knowledge-base folder
# Chunks per staged block: what a crash can cost to embed again (minutes at MiniLM speed).
STAGE_BLOCK = 8192
STAGE_BLOCK_ENV = "RAGBOUND_STAGE_BLOCK"
_CHECK_ROWS = 65_536  # rows per block when checking a vector file for NaN / infinity
_MAX_TOKENS = 256  # MiniLM's max_seq_length; longer models are capped the same for the budget
_TOKEN_BUDGET = 2048  # tokens per forward pass


class Segment(BaseModel):
    """One append-only slice of the knowledge base."""

    name: str
    n_chunks: int
    n_documents: int
    sources: list[str]
    created_at: str
    # SHA-256 of the segment's files as committed; None in manifests written before
    # checksums were recorded (their files are then checked by counts and shapes only)
    chunks_sha256: str | None = None
    vectors_sha256: str | None = None
    # fine units (sentences, windows) of the segment's chunks; 0 when only chunks are indexed
    n_units: int = 0
    units_sha256: str | None = None
    unit_vectors_sha256: str | None = None


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
class _NewSegment:
    """A segment to be written: its chunks, (dense) vectors and fine units (rows local)."""

    segment: Segment
    chunks: Sequence[Chunk]
    vectors: np.ndarray | None
    units: FineUnits


class KBManifest(BaseModel):
    """Everything needed to know what a knowledge base is and how it was made."""

    format: Literal["ragbound.kb/1"] = KB_FORMAT
    library_version: str = __version__
    created_at: str
    updated_at: str
    embedder_spec: str
    embedder: EmbedderInfo
    chunking: ChunkingParams
    text_field: str = "text"
    id_field: str | None = None
    # without id_field, a record's id is its id field or key, else its file and line
    # ("record"); file and line always in manifests older than that default ("line")
    record_ids: Literal["line", "record"] = "line"
    # fine units indexed beside the chunks; the default (chunks only) in older manifests
    units: UnitParams = UnitParams()
    n_chunks: int
    n_documents: int
    corpus_hash: str
    segments: list[Segment]
    # where the rows live when not in segment files: a PostgreSQL table (see postgres_kb)
    store: PostgresTable | None = None
    # local approximate search: an HNSW graph in hnsw/ (see hnsw_kb); None = exact search
    hnsw: HnswIndex | None = None
    # how segment vector files store numbers; float16 halves the files and the memory they
    # map, at a similarity error of about 1e-3 (see docs/benchmarks.md, "A million chunks")
    vector_dtype: VectorDType = "float32"

    @property
    def loader_id_field(self) -> str | None:
        """The ``id_field`` that loads documents as this knowledge base's were loaded."""
        if self.id_field is None and self.record_ids == "line":
            return LINE_IDS
        return self.id_field

    @property
    def fingerprint(self) -> str:
        """Identity of the knowledge: embedder, chunking, units and every chunk id (16 hex).

        Calibrations record it and refuse to run against a knowledge base whose
        fingerprint differs: their null distribution was measured on other similarities.
        The units enter only when fine units are indexed, so a chunks-only knowledge base
        keeps the fingerprint it had before granularity existed.
        """
        units = [self.units.model_dump_json()] if self.units.fine else []
        return sha256_text(
            self.embedder.identity(), self.chunking.model_dump_json(), self.corpus_hash, *units
        )[:16]


def corpus_hash(chunks: Sequence[Chunk]) -> str:
    """SHA-256 over chunk ids in order (ids already hash each chunk's text and position)."""
    return sha256_text(*(chunk.id for chunk in chunks))


def _hash_id(digest: Any, chunk: Chunk) -> None:
    """Add one chunk id to a running :func:`corpus_hash` (what ``sha256_text`` does per part)."""
    digest.update(chunk.id.encode())
    digest.update(b"\0")


class KnowledgeBase:
    """A searchable corpus. ``search`` returns top-k similarities, higher = closer.

    A knowledge base is itself a text :class:`~ragbound.stores.Retriever` (query texts in,
    :class:`~ragbound.stores.Hits` over ``chunks`` out): its embedder turns the texts into
    vectors when its ``store`` searches vectors.

    Example:
        >>> kb = KnowledgeBase.build(["docs/"], embedder="minilm")  # doctest: +SKIP
        >>> kb.save("kb/")  # doctest: +SKIP
        >>> hits = KnowledgeBase.load("kb/").search(["What is BM25?"], k=5)  # doctest: +SKIP
        >>> hits.similarities.shape  # doctest: +SKIP
        (1, 5)
    """

    query_kind: ClassVar[QueryKind] = "text"
    # the chunks, rows aligned with the vectors: a list when built in memory, a read-only
    # ChunkSequence over the segment files once loaded (both index, slice, iterate and +)
    chunks: Sequence[Chunk]

    def __init__(
        self,
        manifest: KBManifest,
        chunks: Sequence[Chunk],
        vectors: np.ndarray | Sequence[np.ndarray] | None,
        *,
        path: Path | None = None,
        embedder: SentenceTransformerEmbedder | None = None,
        units: FineUnits | None = None,
    ):
        self.manifest = manifest
        self.chunks = chunks
        self.path = path
        self._embedder = embedder
        dense = manifest.embedder.kind == "dense"
        self._units = units or FineUnits.empty(manifest.embedder.dimension if dense else None)
        # the units a search scores chunks by (see at_granularity)
        self._granularity: tuple[Granularity, ...] = manifest.units.granularity
        # segments added since the last load or save, and the committed segments they follow
        self._unsaved: list[_NewSegment] = []
        self._base_names: list[str] = []
        # The knowledge base owns its vectors (it writes them to disk), one matrix per part
        # (per segment once loaded: memory maps of the segment files); the store is an index
        # over them, built on first search and rebuilt after an add.
        self._parts: list[np.ndarray] | None = None
        if vectors is not None:
            dtype = np.dtype(manifest.vector_dtype)
            given = [vectors] if isinstance(vectors, np.ndarray) else list(vectors)
            self._parts = [np.ascontiguousarray(part, dtype) for part in given]
        self._store: Retriever | None = None
        self._last_graph: HnswStore | None = None  # grown, not rebuilt, after an add
        # views at other granularities (at_granularity), kept so that their search indexes
        # are built once, not per query, for the objects they were made from (see _view_cache)
        self._views: dict[tuple[Granularity, ...], KnowledgeBase] = {}
        self._views_of: tuple[object, ...] = ()

    # ----------------------------------------------------------------- building
    @classmethod
    def build(
        cls,
        paths: Sequence[str | Path],
        *,
        embedder: str = "minilm",
        chunk_words: int = 200,
        overlap: int = 40,
        text_field: str = "text",
        id_field: str | None = None,
        units: UnitParams | None = None,
        batch_size: int = 64,
        progress: bool = False,
        vector_dtype: VectorDType = "float32",
        staging: str | Path | None = None,
    ) -> KnowledgeBase:
        """Load, chunk and embed a corpus (files or folders) into an unsaved knowledge base.

        ``units`` adds fine units (sentences, windows) beside the chunks; see
        :func:`ragbound.corpus.units.unit_params`.
        ``vector_dtype`` is how the vectors are stored (``float32``, or ``float16``: half the
        disk and memory, similarities within about 1e-3; search computes in float32).
        ``staging`` is a folder (``staging_dir(target)`` for the folder it will be saved in)
        where each finished block of ``STAGE_BLOCK`` embedded chunks is written: after a
        crash, the same build with the same folder embeds only the blocks not yet there, and
        gives the same knowledge base as an uninterrupted build. Saving into the knowledge
        base folder removes its staging folder. Without ``staging``, vectors stay in memory.
        """
        documents = load_documents(paths, text_field=text_field, id_field=id_field)
        return cls.from_documents(
            documents,
            embedder=embedder,
            chunking=ChunkingParams(chunk_words=chunk_words, overlap=overlap),
            units=units,
            text_field=text_field,
            id_field=id_field,
            sources=[str(p) for p in paths],
            batch_size=batch_size,
            progress=progress,
            vector_dtype=vector_dtype,
            staging=staging,
        )

    @classmethod
    def from_documents(
        cls,
        documents: Sequence[Document],
        *,
        embedder: str = "minilm",
        chunking: ChunkingParams | None = None,
        units: UnitParams | None = None,
        text_field: str = "text",
        id_field: str | None = None,
        sources: Sequence[str] = (),
        batch_size: int = 64,
        progress: bool = False,
        vector_dtype: VectorDType = "float32",
        staging: str | Path | None = None,
    ) -> KnowledgeBase:
        """Chunk and embed documents already in memory (and their fine ``units``, if any);
        see ``build``."""
        if vector_dtype not in VECTOR_DTYPES:
            raise InputError(
                f"vector_dtype must be one of {', '.join(VECTOR_DTYPES)}, got {vector_dtype!r}"
            )
        chunking = chunking or ChunkingParams()
        chunks = _chunk(documents, chunking)
        spec = canonical_spec(embedder)
        dense = None if is_lexical(spec) else load_dense_embedder(spec)
        info = bm25_info() if dense is None else dense.info
        now = utc_now()
        manifest = KBManifest(
            created_at=now,
            updated_at=now,
            embedder_spec=spec,
            embedder=info,
            chunking=chunking,
            units=units or UnitParams(),
            text_field=text_field,
            id_field=id_field,
            record_ids="record",
            n_chunks=len(chunks),
            n_documents=len(documents),
            corpus_hash=corpus_hash(chunks),
            segments=[],
            vector_dtype=vector_dtype,
        )
        kb = cls(manifest, [], None, embedder=dense)
        stage = None if staging is None else Path(staging)
        kb._append_segment(documents, chunks, sources, batch_size, progress, stage)
        return kb

    def add(
        self,
        paths: Sequence[str | Path],
        *,
        batch_size: int = 64,
        progress: bool = False,
    ) -> int:
        """Add documents from files or folders; only the new chunks are embedded.

        New records get their ids as this knowledge base's records did
        (:attr:`KBManifest.loader_id_field`: file and line in one made before records' own
        ids became the default). Returns the number of chunks added. Call ``save()`` to
        persist them. Raises InputError (and changes nothing) when a document id is already
        present.
        """
        documents = load_documents(
            paths, text_field=self.manifest.text_field, id_field=self.manifest.loader_id_field
        )
        return self.add_documents(
            documents, sources=[str(p) for p in paths], batch_size=batch_size, progress=progress
        )

    def add_documents(
        self,
        documents: Sequence[Document],
        *,
        sources: Sequence[str] = (),
        batch_size: int = 64,
        progress: bool = False,
    ) -> int:
        """Add documents already in memory; see ``add``."""
        existing = {chunk.doc_id for chunk in self.chunks}
        clashes = sorted({doc.id for doc in documents} & existing)
        if clashes:
            shown = ", ".join(repr(c) for c in clashes[:5])
            raise InputError(
                f"{len(clashes)} document id(s) already in the knowledge base: {shown}; "
                "give the new documents other ids"
            )
        chunks = _chunk(documents, self.manifest.chunking)
        self._append_segment(documents, chunks, sources, batch_size, progress)
        return len(chunks)

    def _append_segment(
        self,
        documents: Sequence[Document],
        chunks: list[Chunk],
        sources: Sequence[str],
        batch_size: int,
        progress: bool,
        staging: Path | None = None,
    ) -> None:
        units = split_units(chunks, self.manifest.units)
        vectors, unit_vectors = None, None
        if self.manifest.embedder.kind == "dense":
            dtype = self.manifest.vector_dtype
            texts = [c.text for c in chunks]
            if staging is None:
                vectors = _stored_as(
                    _embed_texts(self.embedder, texts, batch_size, progress), dtype
                )
            else:
                stage = StagedBuild.open(staging, self.manifest, chunks, batch_size)
                vectors = stage.embed(self.embedder, texts, batch_size, progress, dtype)
            if units:
                texts = [u.text for u in units]
                unit_vectors = _embed_texts(self.embedder, texts, batch_size, progress, "units")
            else:
                unit_vectors = np.empty((0, self.manifest.embedder.dimension), np.float32)
        segment = Segment(
            # provisional: save() gives every new segment a name no committed manifest uses
            name=f"unsaved-{len(self.manifest.segments) + 1}",
            n_chunks=len(chunks),
            n_documents=len(documents),
            sources=list(sources),
            created_at=utc_now(),
            n_units=len(units),
        )
        fine = FineUnits(units, unit_vectors)
        self._unsaved.append(_NewSegment(segment, chunks, vectors, fine))
        self._set_contents(
            self.manifest.model_copy(update={"updated_at": segment.created_at}),
            [*self.manifest.segments, segment],
            self.chunks + chunks,
            _with_part(self._parts, vectors),
            self._units.concat(fine.shifted(len(self.chunks))),
        )

    def _set_contents(
        self,
        manifest: KBManifest,
        segments: list[Segment],
        chunks: Sequence[Chunk],
        parts: list[np.ndarray] | None,
        units: FineUnits,
    ) -> None:
        """Hold these segments, chunks, vectors and units, with the manifest's totals to match."""
        self.manifest = manifest.model_copy(
            update={
                "segments": segments,
                "n_chunks": len(chunks),
                "n_documents": sum(s.n_documents for s in segments),
                "corpus_hash": corpus_hash(chunks),
            }
        )
        self.chunks = chunks
        self._parts = parts
        self._units = units
        self._store = None  # rebuilt over every chunk on the next search

    # ------------------------------------------------------------- persistence
    def save(
        self,
        path: str | Path | None = None,
        *,
        overwrite: bool = False,
        delete_other_files: bool = False,
        on_wait: Callable[[str], None] | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> Path:
        """Commit to ``path`` (default: where it was loaded from); returns the directory.

        One writer at a time: the knowledge base's lock is held while saving (``on_wait`` is
        told once if another writer holds it; after ``$RAGBOUND_LOCK_TIMEOUT`` seconds it is
        an ArtifactError). New files get names no committed manifest uses and one atomic
        replace of ``manifest.json`` commits them, so a crash at any point leaves either the
        previous knowledge base or the new one; files of crashed writes are removed by the next.

        Saving into the directory it was loaded from appends the new segments to what is
        committed there *now*: documents another writer added meanwhile are kept (and a
        document id both added is an InputError, saving nothing). Saving elsewhere needs a
        new or empty folder, or ``overwrite=True`` to replace the knowledge base there in
        place; that also removes the old knowledge's calibration and tripwires (told to
        ``notify``) and refuses when the folder holds files ragbound did not write, unless
        ``delete_other_files``.
        """
        target = Path(path) if path is not None else self.path
        if target is None:
            raise InputError("no directory given to save the knowledge base to")
        with writer_lock(target, what=LOCK_WHAT, on_wait=on_wait):
            committed = _read_committed(target)
            if self.path is not None and _same_dir(target, self.path) and committed is not None:
                self._commit_append(target, committed)
            else:
                self._commit_new(target, overwrite, delete_other_files, notify or _silent)
        self.path = target
        return target

    def _commit_append(self, target: Path, committed: KBManifest) -> None:
        """Append the unsaved segments to the committed manifest (``kb.add:*`` steps)."""
        if [s.name for s in committed.segments] != self._base_names:
            self._rebase(KnowledgeBase.load(target))  # another writer committed meanwhile
        if not self._unsaved:
            if committed.hnsw != self.manifest.hnsw:  # only the search changed (use_hnsw)
                self._commit(target, committed.segments, "add")
            return
        seg_dir = target / SEGMENTS
        _remove_unreferenced(seg_dir, committed.segments)  # what crashed writes left
        taken = {s.name for s in committed.segments}
        written = [
            self._write_segment(seg_dir, new, len(taken) + i, taken, "add")
            for i, new in enumerate(self._unsaved, start=1)
        ]
        self._commit(target, [*committed.segments, *written], "add")

    def _commit_new(
        self,
        target: Path,
        overwrite: bool,
        delete_other_files: bool,
        notify: Callable[[str], None],
    ) -> None:
        """Write every segment into ``target`` and commit (``kb.index:*`` / ``kb.overwrite:*``).

        Replacing happens in place: the old manifest stays the commit until the new one
        replaces it, so the target is never empty; the old files go after the commit.
        """
        others = check_index_target(
            target, overwrite=overwrite, delete_other_files=delete_other_files
        )
        replacing = (target / MANIFEST).exists()
        step = "overwrite" if replacing else "index"
        old = _readable_segments(target) if replacing else []
        seg_dir = target / SEGMENTS
        _remove_unreferenced(seg_dir, old)  # what crashed writes left
        taken = {s.name for s in old}
        offsets = _segment_offsets(self.manifest.segments)
        vectors = self._segment_vectors()
        written = []
        for seq, segment in enumerate(self.manifest.segments, start=1):
            start, stop = offsets[segment.name]
            units = self._units.of_chunks(start, stop)
            new = _NewSegment(segment, self.chunks[start:stop], vectors[seq - 1], units)
            written.append(self._write_segment(seg_dir, new, seq, taken, step))
        self._commit(target, written, step)
        if replacing:
            crash_point("kb.overwrite:old-segments-removed")
            _remove_old_knowledge(target, notify)
        _remove_other_files(target, others, notify)

    def _write_segment(
        self, seg_dir: Path, new: _NewSegment, seq: int, taken: set[str], step: str
    ) -> Segment:
        """Write one segment's files under a fresh name; return it with their checksums."""
        name = _fresh_name(seg_dir, seq, taken)
        taken.add(name)
        chunk_file = seg_dir / f"{name}{CHUNKS_SUFFIX}"
        write_jsonl(chunk_file, (c.model_dump(mode="json") for c in new.chunks))
        crash_point(f"kb.{step}:chunks-written")
        update: dict[str, Any] = {"name": name, "chunks_sha256": file_sha256(chunk_file)}
        if self.manifest.embedder.kind == "dense":
            if new.vectors is None:
                raise ArtifactError(
                    f"segment {new.segment.name} of a dense knowledge base has no vectors"
                )
            vector_file = seg_dir / f"{name}{VECTORS_SUFFIX}"
            write_npy(vector_file, np.ascontiguousarray(new.vectors, self.manifest.vector_dtype))
            update["vectors_sha256"] = file_sha256(vector_file)
        if new.units.units:
            update |= _write_units(seg_dir, name, new.units)
        return new.segment.model_copy(update=update)

    def _commit(self, target: Path, segments: list[Segment], step: str) -> None:
        """Replace the manifest (the commit), then remove files it does not reference."""
        manifest = self.manifest.model_copy(update={"segments": segments})
        if manifest.hnsw is not None and not has_graph(target, manifest.hnsw, manifest.n_chunks):
            graph = save_graph(target, self._hnsw_store(), manifest.hnsw)
            manifest = manifest.model_copy(update={"hnsw": graph})
        crash_point(f"kb.{step}:segment-written")
        write_json(target / MANIFEST, manifest.model_dump(mode="json"))
        crash_point(f"kb.{step}:committed")
        _remove_unreferenced(target / SEGMENTS, segments)
        remove_unreferenced_graphs(target, manifest.hnsw)
        shutil.rmtree(staging_dir(target), ignore_errors=True)  # the committed build's blocks
        self.manifest = manifest
        self._base_names = [s.name for s in segments]
        self._unsaved = []

    def _rebase(self, current: KnowledgeBase) -> None:
        """Put the unsaved segments on top of ``current``, the state committed now."""
        mine, theirs = self.manifest, current.manifest
        if _build_settings(mine) != _build_settings(theirs):
            raise ArtifactError(
                f"the knowledge base {current.path} was replaced (another embedder, chunking or "
                "fields) while these documents were being added; nothing was saved: add them again"
            )
        new_chunks = [chunk for new in self._unsaved for chunk in new.chunks]
        clashes = sorted({c.doc_id for c in new_chunks} & {c.doc_id for c in current.chunks})
        if clashes:
            shown = ", ".join(repr(c) for c in clashes[:5])
            raise InputError(
                f"{len(clashes)} document id(s) were added to {current.path} by another writer "
                f"meanwhile: {shown}; nothing was saved"
            )
        parts, units, rows = current._parts, current._units, len(current.chunks)
        for new in self._unsaved:
            parts = _with_part(parts, new.vectors)
            units = units.concat(new.units.shifted(rows))
            rows += len(new.chunks)
        self._set_contents(
            theirs.model_copy(update={"updated_at": mine.updated_at}),
            [*theirs.segments, *(new.segment for new in self._unsaved)],
            current.chunks + new_chunks,
            parts,
            units,
        )
        self._base_names = [s.name for s in theirs.segments]

    @classmethod
    def load(
        cls, path: str | Path, *, embedder: SentenceTransformerEmbedder | None = None
    ) -> KnowledgeBase:
        """Open a saved knowledge base, checking its files against its manifest.

        ``embedder``: an embedder already loaded to use instead of loading the manifest's
        (to share one model between knowledge bases); it must be the one that built it.

        Takes no lock: it reads the last committed manifest. Each file's SHA-256 is checked
        when the manifest records it (manifests written before checksums were recorded are
        checked by counts, shapes and the corpus hash only). Should a writer replace the
        knowledge base while it reads, it reads again.
        """
        root = Path(path)
        if not root.is_dir():
            raise InputError(f"knowledge base {root} does not exist (build it with ragbound index)")
        for attempt in range(_LOAD_ATTEMPTS):
            stamp = _manifest_stamp(root)
            try:
                kb = cls._load_committed(root)
            except ArtifactError:
                if attempt + 1 == _LOAD_ATTEMPTS or _manifest_stamp(root) == stamp:
                    raise  # damage, not a commit that happened while reading
                continue
            if embedder is not None:
                kb._check_embedder(embedder)
            return kb
        raise AssertionError("unreachable")

    @classmethod
    def _load_committed(cls, root: Path) -> KnowledgeBase:
        manifest = read_manifest(root / MANIFEST, KBManifest, KB_FORMAT, "knowledge-base manifest")
        if manifest.store is not None:  # rows in PostgreSQL, not in segment files
            from ragbound.postgres_kb import PostgresKnowledgeBase

            return PostgresKnowledgeBase.open(root, manifest)
        files: list[ChunkFile] = []
        rows = 0
        ids = hashlib.sha256()  # the corpus hash, over every segment's ids in order
        dense = manifest.embedder.kind == "dense"
        units = FineUnits.empty(manifest.embedder.dimension if dense else None)
        for segment in manifest.segments:
            chunk_file = root / SEGMENTS / f"{segment.name}{CHUNKS_SUFFIX}"
            check_sha256(chunk_file, segment.chunks_sha256, "chunk file")
            seg_chunks = ChunkFile.open(chunk_file, lambda chunk: _hash_id(ids, chunk))
            if len(seg_chunks) != segment.n_chunks:
                raise ArtifactError(
                    f"chunk file {chunk_file} holds {len(seg_chunks)} chunks, "
                    f"the manifest says {segment.n_chunks}"
                )
            if segment.n_units:
                seg_units = _read_units(root, segment, manifest.embedder.dimension if dense else 0)
                units = units.concat(seg_units.shifted(rows))
            files.append(seg_chunks)
            rows += len(seg_chunks)
        if ids.hexdigest() != manifest.corpus_hash:
            raise ArtifactError(f"{root}: chunk files do not match the manifest's corpus hash")
        # the chunks stay in their files, read by offset when asked (see corpus.sequence)
        chunks = ChunkSequence(files)
        vectors = _read_all_vectors(root, manifest) if dense else None
        kb = cls(manifest, chunks, vectors, path=root, units=units)
        kb._base_names = [s.name for s in manifest.segments]
        return kb

    # ----------------------------------------------------------------- search
    @property
    def embedder(self) -> SentenceTransformerEmbedder:
        """The dense embedder (loaded lazily); checked against the manifest's revision."""
        if self.manifest.embedder.kind != "dense":
            raise InputError("a BM25 knowledge base has no dense embedder")
        if self._embedder is None:
            self._check_embedder(load_dense_embedder(self.manifest.embedder_spec))
            assert self._embedder is not None
        return self._embedder

    def _check_embedder(self, embedder: SentenceTransformerEmbedder) -> None:
        """Use ``embedder`` if it is the one that built this knowledge base, else refuse."""
        if embedder.info.identity() != self.manifest.embedder.identity():
            raise IncompatibleArtifactError(
                f"the embedder {self.manifest.embedder_spec!r} on this machine "
                f"({embedder.info.revision}) is not the one that built this knowledge "
                f"base ({self.manifest.embedder.revision}); rebuild it with ragbound index"
            )
        self._embedder = embedder

    @property
    def store(self) -> Retriever:
        """The chunks' search index, a :class:`~ragbound.stores.Retriever` whose rows are
        ``chunks``: exact inner product over the vectors (queries are vectors) or BM25 over
        the texts (queries are texts), built on first use. When the granularity searched
        holds fine units, a :class:`~ragbound.stores.PooledStore` over them scores each
        chunk by its best unit."""
        if self._store is None:
            if self._granularity == ("chunk",) and self._searches_hnsw():
                self._store = self._hnsw_store()
            elif self._granularity == ("chunk",):
                self._store = self._inner_store(self._parts, self.chunks)
            else:
                owners, parts, texts = self._search_rows()
                self._store = PooledStore(
                    self._inner_store(parts, texts),
                    owners,
                    len(self.chunks),
                    granularity=granularity_label(self._granularity),
                )
        return self._store

    def _inner_store(
        self, parts: list[np.ndarray] | None, rows: Sequence[Chunk | str]
    ) -> Retriever:
        """Exact search over ``parts``, or BM25 over the texts of ``rows`` (chunks or texts;
        read only for BM25, so a dense knowledge base never holds every chunk text)."""
        if parts is None:
            return BM25Store([row if isinstance(row, str) else row.text for row in rows])
        return ExactStore(parts, similarity=self.manifest.embedder.similarity)

    def _search_rows(self) -> tuple[np.ndarray, list[np.ndarray] | None, list[str]]:
        """Owner chunk rows, vector parts (dense; the chunks' own parts are not copied) and
        texts (BM25 only: empty when dense) of every unit of the granularity."""
        keep = [i for i, u in enumerate(self._units.units) if u.granularity in self._granularity]
        owners = [self._units.units[i].chunk for i in keep]
        lexical = self._parts is None
        texts = [self._units.units[i].text for i in keep] if lexical else []
        parts = None if self._units.vectors is None else [self._units.vectors[keep]]
        if "chunk" in self._granularity:
            owners = list(range(len(self.chunks))) + owners
            texts = [c.text for c in self.chunks] + texts if lexical else []
            parts = None if self._parts is None else [*self._parts, *(parts or [])]
        return np.asarray(owners, dtype=np.int64), parts, texts

    @property
    def granularity(self) -> tuple[Granularity, ...]:
        """The units a search scores chunks by (``("chunk",)`` unless fine units are used)."""
        return self._granularity

    def at_granularity(self, granularity: str | Sequence[str]) -> KnowledgeBase:
        """This knowledge base searched at another granularity (a view sharing its data).

        ``granularity`` is a unit or a comma-separated list (``"chunk,sentence"``) among the
        units it indexed; returns ``self`` when unchanged. The view is for searching: add
        documents to, and save, the knowledge base itself. IncompatibleArtifactError when a
        unit was not indexed.
        """
        wanted = parse_granularity(granularity)
        if wanted == self._granularity:
            return self
        views = self._view_cache()
        if wanted in views:
            return views[wanted]
        missing = [g for g in wanted if g not in self.manifest.units.indexed]
        if missing:
            raise IncompatibleArtifactError(
                f"the knowledge base {self.path or ''} does not index {', '.join(missing)} "
                f"units (it indexes {granularity_label(self.manifest.units.indexed)}): index "
                f"it again with ragbound index --granularity {granularity_label(wanted)}"
            )
        view = KnowledgeBase(
            self.manifest,
            self.chunks,
            self._parts,
            path=self.path,
            embedder=self._embedder,
            units=self._units,
        )
        view._granularity = wanted
        views[wanted] = view
        return view

    def _view_cache(self) -> dict[tuple[Granularity, ...], KnowledgeBase]:
        """The views made from this manifest, path and embedder. A change of contents or of
        search (an add, a save, use_hnsw, a store moved) always replaces the manifest, so a
        view never outlives what it was made from."""
        made_from = (self.manifest, self.path, self._embedder)
        if len(self._views_of) != 3 or any(
            a is not b for a, b in zip(made_from, self._views_of, strict=True)
        ):
            self._views, self._views_of = {}, made_from
        return self._views

    def index_size(self) -> tuple[int, int]:
        """Rows the search scores at this granularity and their vectors' bytes (0 for BM25)."""
        fine = sum(u.granularity in self._granularity for u in self._units.units)
        rows = fine + (len(self.chunks) if "chunk" in self._granularity else 0)
        if self.manifest.embedder.kind != "dense":
            return rows, 0
        chunk_rows = len(self.chunks) if "chunk" in self._granularity else 0
        chunk_bytes = np.dtype(self.manifest.vector_dtype).itemsize  # units are float32
        return rows, self.dimension * (chunk_rows * chunk_bytes + fine * 4)

    def restricted_to(self, doc_ids: Collection[str]) -> KnowledgeBase:
        """An unsaved knowledge base of only these documents' chunks and units, not embedded
        again (for leave-documents-out splits). Its fingerprint is that of its chunks."""
        rows = [i for i, chunk in enumerate(self.chunks) if chunk.doc_id in doc_ids]
        if not rows:
            raise InputError("none of the given document ids is in the knowledge base")
        new_row = {old: new for new, old in enumerate(rows)}
        keep = [i for i, u in enumerate(self._units.units) if u.chunk in new_row]
        kept = (self._units.units[i] for i in keep)
        units = FineUnits(
            [u.model_copy(update={"chunk": new_row[u.chunk]}) for u in kept],
            None if self._units.vectors is None else self._units.vectors[keep],
        )
        chunks = [self.chunks[i] for i in rows]
        segment = Segment(
            name="unsaved-1",
            n_chunks=len(chunks),
            n_documents=len({c.doc_id for c in chunks}),
            sources=[],
            created_at=utc_now(),
            n_units=len(units.units),
        )
        vectors = None if self._parts is None else self.vectors[rows]
        kb = KnowledgeBase(self.manifest, [], None, embedder=self._embedder)
        kb._unsaved = [_NewSegment(segment, chunks, vectors, units)]
        kb._set_contents(self.manifest, [segment], chunks, _with_part(None, vectors), units)
        kb._granularity = self._granularity
        return kb

    def _hnsw_store(self) -> HnswStore:
        """The graph over every chunk: the one in memory, else the committed one grown by
        the rows it lacks, else a new one."""
        if isinstance(self._store, HnswStore) and len(self._store) == len(self.chunks):
            return self._store
        if not self._searches_hnsw():
            raise InputError("this knowledge base does not search with HNSW")
        store = open_store(
            self.path,
            self.manifest.hnsw,
            self.vectors,
            self.manifest.embedder.similarity,
            previous=self._last_graph,
        )
        self._store = self._last_graph = store
        return store

    def use_hnsw(self, params: HnswParams | None) -> None:
        """Search through an HNSW graph with ``params`` (None: exact search again).

        Recorded in the manifest on the next ``save``. Changing only ``ef_search`` or
        ``rescore`` keeps the graph (``m``, ``ef_construction`` and ``precision`` make
        another); calibrations record the search, so calibrate again with the search you
        check with. Dense local knowledge bases only (InputError otherwise).
        """
        if self.manifest.store is not None or self.manifest.embedder.kind != "dense":
            raise InputError(
                "an HNSW graph indexes a local dense knowledge base; a PostgreSQL one searches "
                "with pgvector's HNSW (search=hnsw in the --store URL)"
            )
        current = self.manifest.hnsw
        index = None if params is None else (current or HnswIndex()).searched_with(params)
        if isinstance(self._store, HnswStore):
            self._last_graph = self._store  # reused when the graph is the same
        self.manifest = self.manifest.model_copy(update={"hnsw": index})
        self._store = None

    def describe(self) -> SearchInfo:
        """How ``search`` finds neighbours (exact or approximate, with which parameters)."""
        if self._granularity == ("chunk",) and self._searches_hnsw():
            return hnsw_info(self.manifest.hnsw.params, self.similarity)  # no graph needed
        return self.store.describe()

    def _searches_hnsw(self) -> bool:
        """Chunks are searched through a local HNSW graph; finer units are always searched
        exactly (the graph indexes chunk vectors only)."""
        return self.manifest.hnsw is not None and self._parts is not None

    @property
    def vectors(self) -> np.ndarray:
        """Dense only: all chunk vectors, (n_chunks, dim) in the manifest's ``vector_dtype``,
        rows aligned with ``chunks``. A loaded one-segment knowledge base gives its read-only
        memory map; with several segments this concatenates them in memory (search does not
        need it). Raises InputError for a BM25 knowledge base."""
        if self._parts is None:
            raise InputError("a BM25 knowledge base has no vectors")
        return self._parts[0] if len(self._parts) == 1 else np.concatenate(self._parts)

    def _segment_vectors(self) -> list[np.ndarray | None]:
        """Each segment's vectors (None for BM25): the parts themselves when they line up."""
        segments = self.manifest.segments
        if self._parts is None:
            return [None] * len(segments)
        if [len(part) for part in self._parts] == [s.n_chunks for s in segments]:
            return list(self._parts)
        whole = self.vectors
        return [whole[start:stop] for start, stop in _segment_offsets(segments).values()]

    @property
    def fingerprint(self) -> str:
        return self.manifest.fingerprint

    @property
    def dimension(self) -> int:
        """The embedding dimension (0 for BM25)."""
        return self.manifest.embedder.dimension

    @property
    def similarity(self) -> Similarity:
        return self.manifest.embedder.similarity

    def __len__(self) -> int:
        return len(self.chunks)

    def search(self, queries: Sequence[str], k: int) -> Hits:
        """Top-k chunks for each query: similarities (higher = closer) and chunk rows."""
        texts = [validate_query(q, location=f"query {i + 1}") for i, q in enumerate(queries)]
        if not texts:
            raise InputError("no queries to search")
        store = self.store
        if store.query_kind == "text":
            return store.search(texts, k)
        if len(texts) == 1:  # the request path: one query, no batching overhead
            return store.search(self.embedder.encode_one(texts[0]), k)
        return store.search(self.embedder.encode(texts), k)

    def embed(self, queries: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """Query embeddings, (n, dim) float32 (dense knowledge bases only)."""
        return self.embedder.encode(list(queries), progress=progress)

    def chunk_at(self, row: int) -> Chunk:
        return self.chunks[int(row)]


def _chunk(documents: Sequence[Document], chunking: ChunkingParams) -> list[Chunk]:
    chunks = chunk_documents(documents, chunk_words=chunking.chunk_words, overlap=chunking.overlap)
    if not chunks:
        raise InputError("the corpus produced no chunks (every document is empty)")
    return chunks


def _embed_texts(
    embedder: SentenceTransformerEmbedder,
    all_texts: list[str],
    batch_size: int,
    progress: bool,
    what: str = "chunks",
) -> np.ndarray:
    """Embed texts into one preallocated float32 matrix, longest texts batched together."""
    dim = embedder.info.dimension
    vectors = np.empty((len(all_texts), dim), dtype=np.float32)
    order = _longest_first(all_texts)
    with progress_bar(len(all_texts), f"embedding {what}", progress) as advance:
        for start in range(0, len(order), _OUTER_BATCH):
            rows = order[start : start + _OUTER_BATCH]
            texts = [all_texts[i] for i in rows]
            size = _batch_for(len(texts[0].split()), batch_size)
            vectors[rows] = embedder.encode(texts, batch_size=size)
            release_freed_memory()
            advance(len(rows))
    return vectors


def _batch_for(longest_words: int, batch_size: int) -> int:
    """Cap the batch so batch x tokens stays within a budget.

    Attention memory grows with batch x length^2: long chunks go in smaller batches, which
    keeps the peak while indexing flat without slowing short texts.
    """
    tokens = min(_MAX_TOKENS, max(8, int(longest_words * 1.4)))
    return max(4, min(batch_size, _TOKEN_BUDGET // tokens))


def _segment_offsets(segments: list[Segment]) -> dict[str, tuple[int, int]]:
    offsets, start = {}, 0
    for segment in segments:
        offsets[segment.name] = (start, start + segment.n_chunks)
        start += segment.n_chunks
    return offsets


def _with_part(parts: list[np.ndarray] | None, new: np.ndarray | None) -> list[np.ndarray] | None:
    """The vector parts with a new segment's appended (None stays None for BM25)."""
    if new is None:
        if parts is not None:
            raise ArtifactError("a dense knowledge base got a segment without vectors")
        return None
    return [new] if parts is None else [*parts, new]


def _stored_as(vectors: np.ndarray, dtype: VectorDType) -> np.ndarray:
    """Vectors in the storage type; refuses values float16 cannot hold (InputError)."""
    stored = np.ascontiguousarray(vectors, dtype)
    if stored.dtype != vectors.dtype and not _all_finite(stored):
        raise InputError(
            f"the embeddings exceed what {dtype} can hold (|x| > 65504): index with "
            "vector_dtype float32 (--vector-dtype float32)"
        )
    return stored


def _all_finite(vectors: np.ndarray) -> bool:
    """No NaN or infinity, checked ``_CHECK_ROWS`` rows at a time (bounded memory)."""
    return all(
        np.isfinite(vectors[start : start + _CHECK_ROWS]).all()
        for start in range(0, len(vectors), _CHECK_ROWS)
    )


def _build_settings(manifest: KBManifest) -> tuple[str, str, str, str, str | None]:
    """What new chunks must share with a knowledge base to be appended to it."""
    return (
        manifest.embedder.identity(),
        manifest.chunking.model_dump_json(),
        manifest.units.model_dump_json(),
        manifest.text_field,
        manifest.loader_id_field,
    )


def _silent(message: str) -> None:
    """The default ``notify``: the Python API stays quiet."""


def _same_dir(a: Path, b: Path) -> bool:
    return a.absolute() == b.absolute() or (a.exists() and b.exists() and a.samefile(b))


def _manifest_stamp(root: Path) -> tuple[int, int] | None:
    """Identity of the committed manifest file: every commit replaces it by a new inode."""
    try:
        stat = (root / MANIFEST).stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def _read_committed(target: Path) -> KBManifest | None:
    path = target / MANIFEST
    if not path.exists():
        return None
    return read_manifest(path, KBManifest, KB_FORMAT, "knowledge-base manifest")


def _readable_segments(target: Path) -> list[Segment]:
    """The committed segments of a knowledge base being replaced (none if its manifest is bad)."""
    try:
        committed = _read_committed(target)
    except ArtifactError:
        return []
    return [] if committed is None else committed.segments


def _fresh_name(seg_dir: Path, seq: int, taken: set[str]) -> str:
    """``<seq>-<random>``: a name no manifest uses and no file on disk has."""
    while True:
        name = f"{seq:06d}-{secrets.token_hex(4)}"
        if name not in taken and not any(seg_dir.glob(f"{name}.*")):
            return name


def _is_temporary(name: str) -> bool:
    """An atomic write's temporary file (``.<name>.<random>.tmp``) that a crash left."""
    return name.startswith(".") and name.endswith(".tmp")


def _written_by_ragbound() -> frozenset[str]:
    """Names ragbound writes at the top of a knowledge-base folder."""
    from ragbound.detect.calibration import CALIBRATION_DIR
    from ragbound.tripwires.store import TRIPWIRE_DIR, TRIPWIRE_MANIFEST

    return frozenset(
        {MANIFEST, SEGMENTS, STAGING, GRAPH_DIR, CALIBRATION_DIR, TRIPWIRE_MANIFEST, TRIPWIRE_DIR}
    )


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
    ours = _written_by_ragbound()
    others = sorted(p for p in target.iterdir() if p.name not in ours and not _is_temporary(p.name))
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


def _remove_unreferenced(seg_dir: Path, segments: list[Segment]) -> None:
    """Delete segment files no manifest references (crashed writes, a replaced knowledge base)."""
    if not seg_dir.is_dir():
        return
    suffixes = (CHUNKS_SUFFIX, VECTORS_SUFFIX, UNITS_SUFFIX, UNIT_VECTORS_SUFFIX)
    keep = {f"{s.name}{suffix}" for s in segments for suffix in suffixes}
    for path in seg_dir.iterdir():
        if path.name not in keep and path.is_file():
            path.unlink(missing_ok=True)
    for path in seg_dir.parent.iterdir():
        if _is_temporary(path.name) and path.is_file():
            path.unlink(missing_ok=True)  # a crashed manifest write


def _remove_old_knowledge(target: Path, notify: Callable[[str], None]) -> None:
    """Remove the replaced knowledge's calibration and tripwires, saying so.

    They were made against the old chunks: a calibration's null distribution and the
    tripwires' vectors mean nothing for the new ones. Each commit file goes first, so a
    crash midway leaves nothing that loads half-made.
    """
    from ragbound.detect.calibration import CALIBRATION_DIR
    from ragbound.tripwires.store import TRIPWIRE_DIR, TRIPWIRE_MANIFEST

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


def _remove_other_files(target: Path, others: list[Path], notify: Callable[[str], None]) -> None:
    """Delete the files ragbound did not write (only ever with delete_other_files)."""
    for path in others:
        _remove_path(path)
    if others:
        names = ", ".join(p.name for p in others)
        notify(f"warning: deleted {len(others)} other file(s) in {target}: {names}")


def _read_all_vectors(root: Path, manifest: KBManifest) -> list[np.ndarray]:
    """Each segment's vectors as a read-only memory map, checked (nothing read into memory)."""
    if sum(s.n_chunks for s in manifest.segments) != manifest.n_chunks:
        raise ArtifactError(f"{root / MANIFEST}: segment sizes do not add up to n_chunks")
    return [_read_vectors(root, segment, manifest) for segment in manifest.segments]


def _read_vectors(root: Path, segment: Segment, manifest: KBManifest) -> np.ndarray:
    """One segment's vectors, memory-mapped and checked: SHA-256 (read in 1 MiB blocks),
    shape, dtype, and finite values (checked ``_CHECK_ROWS`` rows at a time)."""
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
        for start in range(0, len(mapped), _CHECK_ROWS):
            count = min(_CHECK_ROWS, len(mapped) - start) * row_values
            block = np.fromfile(handle, dtype=mapped.dtype, count=count)
            if len(block) != count or not np.isfinite(block).all():
                return False
    return True


def _write_units(seg_dir: Path, name: str, units: FineUnits) -> dict[str, Any]:
    """Write a segment's fine units (and vectors); return the segment fields to update."""
    unit_file = seg_dir / f"{name}{UNITS_SUFFIX}"
    write_jsonl(unit_file, (u.model_dump(mode="json") for u in units.units))
    update: dict[str, Any] = {"units_sha256": file_sha256(unit_file)}
    if units.vectors is not None:
        vector_file = seg_dir / f"{name}{UNIT_VECTORS_SUFFIX}"
        write_npy(vector_file, np.ascontiguousarray(units.vectors, np.float32))
        update["unit_vectors_sha256"] = file_sha256(vector_file)
    return update


def _read_units(root: Path, segment: Segment, dimension: int) -> FineUnits:
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


def staging_dir(target: str | Path) -> Path:
    """Where ``build(staging=...)`` keeps the finished blocks of a build of ``target``."""
    return Path(target) / STAGING


class StagedBuild:
    """A build's embedded vectors, block by block on disk, so a crash loses one block at most.

    Chunks are embedded in the order ``_embed_texts`` uses (longest first), ``STAGE_BLOCK``
    at a time; each finished block is written atomically as ``block-NNNNNN.npy`` (float32,
    rows in that order) under a folder named by a key over the embedder, chunking, chunk ids
    and batch size, so only a rerun of the same build reuses it. The blocks are then put in
    chunk order into one memory-mapped ``vectors.npy`` of the storage type.
    """

    def __init__(self, folder: Path, n_rows: int, dimension: int, block_rows: int):
        self.folder = folder
        self.n_rows, self.dimension, self.block_rows = n_rows, dimension, block_rows

    @classmethod
    def open(
        cls, staging: Path, manifest: KBManifest, chunks: Sequence[Chunk], batch_size: int
    ) -> StagedBuild:
        """The staging folder of this build (another build's folders there are removed)."""
        block_rows = _stage_block()
        key = sha256_text(
            manifest.embedder.identity(),
            manifest.chunking.model_dump_json(),
            corpus_hash(chunks),
            str(batch_size),
            str(block_rows),
        )[:16]
        if staging.is_dir():
            for other in staging.iterdir():
                if other.name != key:
                    _remove_path(other)
        folder = staging / key
        folder.mkdir(parents=True, exist_ok=True)
        return cls(folder, len(chunks), manifest.embedder.dimension, block_rows)

    def block_path(self, number: int) -> Path:
        return self.folder / f"block-{number:06d}.npy"

    def finished(self, number: int, rows: int) -> bool:
        """Whether block ``number`` is on disk whole (float32, ``rows`` rows, finite)."""
        path = self.block_path(number)
        if not path.is_file():
            return False
        try:
            block = read_npy(path, "staged block")
        except ArtifactError:
            return False
        return (
            block.dtype == np.float32
            and block.shape == (rows, self.dimension)
            and bool(np.isfinite(block).all())
        )

    def embed(
        self,
        embedder: SentenceTransformerEmbedder,
        texts: Sequence[str],
        batch_size: int,
        progress: bool,
        dtype: VectorDType,
    ) -> np.ndarray:
        """Embed the blocks not yet staged, then return all vectors in chunk order (mapped)."""
        order = _longest_first(texts)
        blocks = range(0, len(order), self.block_rows)
        with progress_bar(len(order), "embedding chunks", progress) as advance:
            for number, start in enumerate(blocks, start=1):
                rows = order[start : start + self.block_rows]
                if not self.finished(number, len(rows)):
                    block = _embed_texts(embedder, [texts[i] for i in rows], batch_size, False)
                    write_npy(self.block_path(number), block)
                    crash_point(f"kb.embed:block-{number}-staged")
                advance(len(rows))
        return self.assemble(order, dtype)

    def assemble(self, order: np.ndarray, dtype: VectorDType) -> np.ndarray:
        """All staged blocks in chunk order as one read-only memory map of ``dtype``."""
        path = self.folder / f"vectors-{dtype}.npy"
        out = np.lib.format.open_memmap(
            path, mode="w+", dtype=np.dtype(dtype), shape=(self.n_rows, self.dimension)
        )
        for number, start in enumerate(range(0, len(order), self.block_rows), start=1):
            rows = order[start : start + self.block_rows]
            block = read_npy(self.block_path(number), "staged block", mmap=True)
            out[rows] = _stored_as(block, dtype)
        out.flush()
        del out
        return read_npy(path, "staged vectors", mmap=True)


def _stage_block() -> int:
    """Chunks per staged block: ``$RAGBOUND_STAGE_BLOCK`` (tests use tiny blocks) or
    ``STAGE_BLOCK``."""
    raw = os.environ.get(STAGE_BLOCK_ENV, "")
    try:
        value = int(raw) if raw else STAGE_BLOCK
    except ValueError:
        value = 0
    if value < 1:
        raise InputError(f"${STAGE_BLOCK_ENV} must be a positive integer, got {raw!r}")
    return value


def _longest_first(texts: Sequence[str]) -> np.ndarray:
    """Rows of ``texts``, longest first (stable): similar lengths share a batch."""
    return np.argsort([-len(text) for text in texts], kind="stable")


def _remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
