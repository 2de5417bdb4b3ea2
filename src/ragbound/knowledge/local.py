"""The local backings: rows in segment files of the knowledge-base folder.

- ``exact`` (dense embedders): exact inner product over the memory-mapped vectors;
- ``bm25``: BM25 over the chunk texts (no vectors; rebuilt from the texts on load);
- ``hnsw`` (dense): an HNSW graph saved beside the segments answers chunk searches,
  approximately (:mod:`ragbound.knowledge.hnsw`); finer units are searched exactly.

They share the segment commit protocol (:mod:`ragbound.knowledge.segments`) and differ only
in how they search. Fine units (sentences, windows) are scored by a
:class:`~ragbound.stores.PooledStore` that gives each chunk its best unit's similarity.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np

from ragbound.artifacts import check_sha256, file_sha256, write_json, write_jsonl, write_npy
from ragbound.corpus import Chunk, ChunkFile, ChunkSequence
from ragbound.corpus.units import Granularity, granularity_label
from ragbound.errors import ArtifactError
from ragbound.faults import crash_point
from ragbound.knowledge.backing import Backing, Capabilities, Contents, Loaded
from ragbound.knowledge.build import staging_dir
from ragbound.knowledge.hnsw import (
    HnswIndex,
    has_graph,
    open_store,
    remove_unreferenced_graphs,
    save_graph,
)
from ragbound.knowledge.layout import CHUNKS_SUFFIX, MANIFEST, SEGMENTS, VECTORS_SUFFIX
from ragbound.knowledge.manifest import (
    BackingEntry,
    KBManifest,
    Segment,
    hash_id,
    read_committed,
    readable_segments,
)
from ragbound.knowledge.segments import (
    FineUnits,
    PendingSegment,
    check_index_target,
    fresh_name,
    read_all_vectors,
    read_units,
    remove_old_knowledge,
    remove_other_files,
    remove_unreferenced,
    same_dir,
    segment_offsets,
    write_units,
)
from ragbound.stores import BM25Store, ExactStore, PooledStore, Retriever, SearchInfo
from ragbound.stores.hnsw import HnswParams, HnswStore, hnsw_info


class SegmentBacking:
    """What the local backings share: segment files, their commit and their loading."""

    kind: ClassVar[str]
    describe_kind: ClassVar[str] = "a local knowledge base"
    capabilities: ClassVar[Capabilities]
    holds_vectors: ClassVar[bool] = True

    @property
    def entry(self) -> BackingEntry:
        return BackingEntry(kind=self.kind)

    def check_target(self, out: Path, *, overwrite: bool, delete_other_files: bool) -> None:
        check_index_target(out, overwrite=overwrite, delete_other_files=delete_other_files)

    # ------------------------------------------------------------------ search
    def retriever(self, contents: Contents, granularity: tuple[Granularity, ...]) -> Retriever:
        if granularity == ("chunk",):
            return self._inner(contents.vector_parts, contents.chunks, contents)
        owners, parts, texts = _search_rows(contents, granularity, self.holds_vectors)
        return PooledStore(
            self._inner(parts, texts, contents),
            owners,
            len(contents.chunks),
            granularity=granularity_label(granularity),
        )

    def _inner(
        self, parts: list[np.ndarray] | None, rows: Sequence[Chunk | str], contents: Contents
    ) -> Retriever:
        """Exact search over ``parts`` (dense backings)."""
        if parts is None:
            raise ArtifactError("a dense knowledge base holds no vectors")
        return ExactStore(parts, similarity=contents.manifest.embedder.similarity)

    def describe(
        self, contents: Contents, granularity: tuple[Granularity, ...]
    ) -> SearchInfo | None:
        return None  # the retriever's (an exact or BM25 search over the rows)

    # ------------------------------------------------------------- persistence
    def save(
        self,
        contents: Contents,
        target: Path,
        *,
        overwrite: bool,
        delete_other_files: bool,
        notify: Callable[[str], None],
    ) -> KBManifest | None:
        """Append to the knowledge base ``contents`` was loaded from, or write a new one (a
        manifest already in ``target`` is read only to append: replacing a folder whose
        manifest this version cannot read, one chunked otherwise say, needs ``overwrite``)."""
        loaded_here = contents.path is not None and same_dir(target, contents.path)
        committed = read_committed(target) if loaded_here else None
        if committed is not None:
            return self._commit_append(contents, target, committed)
        return self._commit_new(contents, target, overwrite, delete_other_files, notify)

    def _commit_append(
        self, contents: Contents, target: Path, committed: KBManifest
    ) -> KBManifest | None:
        """Append the pending segments to the committed manifest (``kb.add:*`` steps)."""
        if not contents.pending:
            if committed.backing.model_dump() != contents.manifest.backing.model_dump():
                return self._commit(contents, target, committed.segments, "add")  # search only
            return None
        seg_dir = target / SEGMENTS
        remove_unreferenced(seg_dir, committed.segments)  # what crashed writes left
        taken = {s.name for s in committed.segments}
        written = [
            self._write_segment(contents, seg_dir, new, len(taken) + i, taken, "add")
            for i, new in enumerate(contents.pending, start=1)
        ]
        return self._commit(contents, target, [*committed.segments, *written], "add")

    def _commit_new(
        self,
        contents: Contents,
        target: Path,
        overwrite: bool,
        delete_other_files: bool,
        notify: Callable[[str], None],
    ) -> KBManifest:
        """Write every segment into ``target`` and commit (``kb.index:*`` / ``kb.overwrite:*``).

        Replacing happens in place: the old manifest stays the commit until the new one
        replaces it, so the target is never empty; the old files go after the commit.
        """
        others = check_index_target(
            target, overwrite=overwrite, delete_other_files=delete_other_files
        )
        replacing = (target / MANIFEST).exists()
        step = "overwrite" if replacing else "index"
        old = readable_segments(target) if replacing else []
        seg_dir = target / SEGMENTS
        remove_unreferenced(seg_dir, old)  # what crashed writes left
        taken = {s.name for s in old}
        offsets = segment_offsets(contents.manifest.segments)
        vectors = _segment_vectors(contents)
        written = []
        for seq, segment in enumerate(contents.manifest.segments, start=1):
            start, stop = offsets[segment.name]
            units = contents.units.of_chunks(start, stop)
            new = PendingSegment(segment, contents.chunks[start:stop], vectors[seq - 1], units)
            written.append(self._write_segment(contents, seg_dir, new, seq, taken, step))
        manifest = self._commit(contents, target, written, step)
        if replacing:
            crash_point("kb.overwrite:old-segments-removed")
            remove_old_knowledge(target, notify)
        remove_other_files(target, others, notify)
        return manifest

    def _write_segment(
        self,
        contents: Contents,
        seg_dir: Path,
        new: PendingSegment,
        seq: int,
        taken: set[str],
        step: str,
    ) -> Segment:
        """Write one segment's files under a fresh name; return it with their checksums."""
        name = fresh_name(seg_dir, seq, taken)
        taken.add(name)
        chunk_file = seg_dir / f"{name}{CHUNKS_SUFFIX}"
        write_jsonl(chunk_file, (c.model_dump(mode="json") for c in new.chunks))
        crash_point(f"kb.{step}:chunks-written")
        update: dict = {"name": name, "chunks_sha256": file_sha256(chunk_file)}
        if self.holds_vectors:
            if new.vectors is None:
                raise ArtifactError(
                    f"segment {new.segment.name} of a dense knowledge base has no vectors"
                )
            vector_file = seg_dir / f"{name}{VECTORS_SUFFIX}"
            write_npy(
                vector_file, np.ascontiguousarray(new.vectors, contents.manifest.vector_dtype)
            )
            update["vectors_sha256"] = file_sha256(vector_file)
        if new.units.units:
            update |= write_units(seg_dir, name, new.units)
        return new.segment.model_copy(update=update)

    def _commit(
        self, contents: Contents, target: Path, segments: list[Segment], step: str
    ) -> KBManifest:
        """Replace the manifest (the commit), then remove files it does not reference."""
        record = self.before_commit(contents, target)
        manifest = contents.manifest.model_copy(update={"segments": segments, "backing": record})
        crash_point(f"kb.{step}:segment-written")
        write_json(target / MANIFEST, manifest.model_dump(mode="json"))
        crash_point(f"kb.{step}:committed")
        remove_unreferenced(target / SEGMENTS, segments)
        remove_unreferenced_graphs(target, record if isinstance(record, HnswIndex) else None)
        shutil.rmtree(staging_dir(target), ignore_errors=True)  # the committed build's blocks
        return manifest

    def before_commit(self, contents: Contents, target: Path) -> BackingEntry:
        """Write what the backing keeps beside the segments; the record to commit."""
        return self.entry

    def load(self, root: Path, manifest: KBManifest) -> Loaded:
        """Every segment's chunks (left in their files), units and vectors (memory maps)."""
        files: list[ChunkFile] = []
        rows = 0
        ids = hashlib.sha256()  # the corpus hash, over every segment's ids in order
        dimension = manifest.embedder.dimension if self.holds_vectors else 0
        units = FineUnits.empty(dimension if self.holds_vectors else None)
        for segment in manifest.segments:
            chunk_file = root / SEGMENTS / f"{segment.name}{CHUNKS_SUFFIX}"
            check_sha256(chunk_file, segment.chunks_sha256, "chunk file")
            seg_chunks = ChunkFile.open(chunk_file, lambda chunk: hash_id(ids, chunk))
            if len(seg_chunks) != segment.n_chunks:
                raise ArtifactError(
                    f"chunk file {chunk_file} holds {len(seg_chunks)} chunks, "
                    f"the manifest says {segment.n_chunks}"
                )
            if segment.n_units:
                units = units.concat(read_units(root, segment, dimension).shifted(rows))
            files.append(seg_chunks)
            rows += len(seg_chunks)
        if ids.hexdigest() != manifest.corpus_hash:
            raise ArtifactError(f"{root}: chunk files do not match the manifest's corpus hash")
        vectors = read_all_vectors(root, manifest) if self.holds_vectors else None
        # the chunks stay in their files, read by offset when asked (see corpus.sequence)
        return Loaded(manifest, ChunkSequence(files), units, vectors)


class ExactBacking(SegmentBacking):
    """Segment files searched exactly (numpy inner product over memory-mapped rows)."""

    kind: ClassVar[str] = "exact"
    capabilities: ClassVar[Capabilities] = Capabilities()

    def searched_with(self, params: HnswParams | None) -> Backing:
        """Searched through an HNSW graph with ``params`` (None: exactly, as now)."""
        return self if params is None else HnswBacking().searched_with(params)


class Bm25Backing(SegmentBacking):
    """Segment files of chunk texts searched with BM25 (no vectors)."""

    kind: ClassVar[str] = "bm25"
    capabilities: ClassVar[Capabilities] = Capabilities(vector_dtypes=(), embedders=("lexical",))
    holds_vectors: ClassVar[bool] = False

    def _inner(
        self, parts: list[np.ndarray] | None, rows: Sequence[Chunk | str], contents: Contents
    ) -> Retriever:
        """BM25 over the texts of ``rows`` (chunks or unit texts)."""
        return BM25Store([row if isinstance(row, str) else row.text for row in rows])


class HnswBacking(SegmentBacking):
    """Segment files whose chunk vectors an HNSW graph (saved in ``hnsw/``) searches,
    approximately; finer units are searched exactly (the graph indexes chunk vectors)."""

    kind: ClassVar[str] = "hnsw"
    capabilities: ClassVar[Capabilities] = Capabilities(approximate=True)

    def __init__(self, index: HnswIndex | None = None, previous: HnswStore | None = None):
        self.index = index or HnswIndex()
        # the graph last searched, grown rather than rebuilt after an add or a new ef_search
        self._graph: HnswStore | None = previous

    @classmethod
    def from_record(cls, record: BackingEntry) -> HnswBacking:
        return cls(HnswIndex.model_validate(record.model_dump()))

    @property
    def entry(self) -> BackingEntry:
        return self.index

    def searched_with(self, params: HnswParams | None) -> Backing:
        """This backing with other search parameters (the graph kept when it is the same);
        None: searched exactly."""
        if params is None:
            return ExactBacking()
        return HnswBacking(self.index.searched_with(params), previous=self._graph)

    @property
    def params(self) -> HnswParams:
        return self.index.params

    def retriever(self, contents: Contents, granularity: tuple[Granularity, ...]) -> Retriever:
        if granularity != ("chunk",):
            return super().retriever(contents, granularity)
        return self.graph(contents)

    def describe(
        self, contents: Contents, granularity: tuple[Granularity, ...]
    ) -> SearchInfo | None:
        if granularity == ("chunk",):
            return hnsw_info(self.params, contents.similarity)  # no graph needed
        return super().describe(contents, granularity)

    def graph(self, contents: Contents) -> HnswStore:
        """The graph over every chunk: the one in memory, else the committed one grown by
        the rows it lacks, else a new one."""
        current = self._graph
        if (
            current is not None
            and len(current) == len(contents.chunks)
            and current.params == self.params
        ):
            return current
        store = open_store(
            contents.path, self.index, contents.vectors, contents.similarity, previous=self._graph
        )
        self._graph = store
        return store

    def before_commit(self, contents: Contents, target: Path) -> BackingEntry:
        if not has_graph(target, self.index, contents.manifest.n_chunks):
            self.index = save_graph(target, self.graph(contents), self.index)
        return self.index


def _search_rows(
    contents: Contents, granularity: tuple[Granularity, ...], dense: bool
) -> tuple[np.ndarray, list[np.ndarray] | None, list[str]]:
    """Owner chunk rows, vector parts (dense; the chunks' own parts are not copied) and
    texts (BM25 only: empty when dense) of every unit of the granularity."""
    units = contents.units
    keep = [i for i, u in enumerate(units.units) if u.granularity in granularity]
    owners = [units.units[i].chunk for i in keep]
    texts = [] if dense else [units.units[i].text for i in keep]
    parts = None if units.vectors is None else [units.vectors[keep]]
    if "chunk" in granularity:
        owners = list(range(len(contents.chunks))) + owners
        texts = [] if dense else [c.text for c in contents.chunks] + texts
        parts = None if contents.vector_parts is None else [*contents.vector_parts, *(parts or [])]
    return np.asarray(owners, dtype=np.int64), parts, texts


def _segment_vectors(contents: Contents) -> list[np.ndarray | None]:
    """Each segment's vectors (None for BM25): the parts themselves when they line up."""
    segments = contents.manifest.segments
    parts = contents.vector_parts
    if parts is None:
        return [None] * len(segments)
    if [len(part) for part in parts] == [s.n_chunks for s in segments]:
        return list(parts)
    whole = contents.vectors
    return [whole[start:stop] for start, stop in segment_offsets(segments).values()]
