"""KnowledgeBase = chunks + fine units + embedder + one backing, and a manifest.

Where the rows live and how they are searched is the backing's job
(:mod:`ragbound.knowledge.backing`: segment files searched exactly, with BM25 or through an
HNSW graph; a PostgreSQL table, owned or attached). The knowledge base builds rows
(:mod:`ragbound.knowledge.build`), holds what it has not committed yet, hands the backing
the commit under the folder's writer lock, and searches through the backing's retriever at
a granularity (chunks, or chunks scored by their best sentence or window).

Writers take the knowledge base's lock (:func:`ragbound.locking.writer_lock`, shared with
the calibration and the tripwires stored in the same folder). Readers take no lock and read
the last committed manifest; should a writer replace it while they read, they read again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ragbound.artifacts import read_manifest, utc_now
from ragbound.corpus import Chunk, ChunkingParams, Document, load_documents
from ragbound.corpus.groups import check_group_field
from ragbound.corpus.units import (
    Granularity,
    UnitParams,
    granularity_label,
    parse_granularity,
    split_units,
)
from ragbound.embedders import (
    QueryDenseEmbedder,
    canonical_spec,
    is_lexical,
    load_dense_embedder,
)
from ragbound.embedders.base import Similarity
from ragbound.errors import ArtifactError, IncompatibleArtifactError, InputError
from ragbound.knowledge.backing import Backing, Contents, joined, refuse_missing
from ragbound.knowledge.build import (
    StagedBuild,
    chunk_corpus,
    embed_texts,
    staging_dir,
    stored_as,
    tidy_staging,
)
from ragbound.knowledge.layout import KB_FORMAT, LOCK_WHAT, MANIFEST
from ragbound.knowledge.manifest import (
    VECTOR_DTYPES,
    KBManifest,
    Segment,
    VectorDType,
    build_settings,
    corpus_hash,
    read_committed,
)
from ragbound.knowledge.protocol import Searching
from ragbound.knowledge.registry import attaching, backing_for, backing_of, local_backing
from ragbound.knowledge.segments import (
    FineUnits,
    PendingSegment,
    check_new_folder,
    manifest_stamp,
    same_dir,
    silent,
)
from ragbound.locking import writer_lock
from ragbound.stores import QueryKind, Retriever, SearchInfo, bm25_info
from ragbound.stores.hnsw import HnswParams

_LOAD_ATTEMPTS = 3  # a reader reads again when a writer replaced the knowledge base meanwhile


class KnowledgeBase(Searching):
    """A searchable corpus. ``search`` returns top-k similarities, higher = closer.

    A knowledge base is itself a text :class:`~ragbound.stores.Retriever` (query texts in,
    :class:`~ragbound.stores.Hits` over ``chunks`` out): its embedder turns the texts into
    vectors when its backing searches vectors.

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
        backing: Backing | None = None,
        path: Path | None = None,
        embedder: QueryDenseEmbedder | None = None,
        units: FineUnits | None = None,
    ):
        self.backing = backing or backing_of(manifest.backing)
        self.manifest = manifest.model_copy(update={"backing": self.backing.entry})
        self.chunks = chunks
        self.path = path
        self._embedder = embedder
        dense = manifest.embedder.kind == "dense"
        self.units = units or FineUnits.empty(manifest.embedder.dimension if dense else None)
        # the units a search scores chunks by (see at_granularity)
        self._granularity: tuple[Granularity, ...] = manifest.units.granularity
        # segments added since the last load or save, and the committed segments they follow
        self.pending: list[PendingSegment] = []
        self.base_names: list[str] = [s.name for s in manifest.segments] if path else []
        # The chunk vectors held in this process, one matrix per part (per segment once
        # loaded: memory maps of the segment files); None when the backing keeps them
        # elsewhere (a database) or has none (BM25).
        self.vector_parts: list[np.ndarray] | None = None
        if vectors is not None:
            dtype = np.dtype(manifest.vector_dtype)
            given = [vectors] if isinstance(vectors, np.ndarray) else list(vectors)
            self.vector_parts = [np.ascontiguousarray(part, dtype) for part in given]
        self._store: Retriever | None = None
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
        group_field: str | None = None,
        units: UnitParams | None = None,
        batch_size: int = 64,
        progress: bool = False,
        vector_dtype: VectorDType = "float32",
        staging: str | Path | None = None,
        backing: Backing | None = None,
    ) -> KnowledgeBase:
        """Load, chunk and embed a corpus (files or folders) into an unsaved knowledge base.

        ``units`` adds fine units (sentences, windows) beside the chunks; see
        :func:`ragbound.corpus.units.unit_params`.
        ``group_field``: a metadata field (an intent, a category) whose records are one group
        for leave-documents-out (:mod:`ragbound.corpus.groups`); refused when no record has it.
        ``vector_dtype`` is how the vectors are stored (``float32``, or ``float16``: half the
        disk and memory, similarities within about 1e-3; search computes in float32).
        ``staging`` is a folder (``staging_dir(target)`` for the folder it will be saved in)
        where each finished block of ``STAGE_BLOCK`` embedded chunks is written: after a
        crash, the same build with the same folder embeds only the blocks not yet there, and
        gives the same knowledge base as an uninterrupted build. Saving into the knowledge
        base folder removes its staging folder. Without ``staging``, vectors stay in memory.
        ``backing``: where the rows will live (default: local, exact or BM25 by embedder);
        what it cannot store is refused before loading anything.
        """
        spec = canonical_spec(embedder)
        backing = _checked_backing(backing, spec, units, vector_dtype)
        documents = load_documents(paths, text_field=text_field, id_field=id_field)
        return cls.from_documents(
            documents,
            embedder=spec,
            chunking=ChunkingParams(chunk_words=chunk_words, overlap=overlap),
            units=units,
            text_field=text_field,
            id_field=id_field,
            group_field=group_field,
            sources=[str(p) for p in paths],
            batch_size=batch_size,
            progress=progress,
            vector_dtype=vector_dtype,
            staging=staging,
            backing=backing,
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
        group_field: str | None = None,
        sources: Sequence[str] = (),
        batch_size: int = 64,
        progress: bool = False,
        vector_dtype: VectorDType = "float32",
        staging: str | Path | None = None,
        backing: Backing | None = None,
    ) -> KnowledgeBase:
        """Chunk and embed documents already in memory (and their fine ``units``, if any);
        see ``build``."""
        spec = canonical_spec(embedder)
        backing = _checked_backing(backing, spec, units, vector_dtype)
        chunking = chunking or ChunkingParams()
        if group_field is not None:
            check_group_field(documents, group_field)
        chunks = chunk_corpus(documents, chunking)
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
            group_field=group_field,
            n_chunks=len(chunks),
            n_documents=len(documents),
            corpus_hash=corpus_hash(chunks),
            segments=[],
            backing=backing.entry,
            vector_dtype=vector_dtype,
        )
        kb = cls(manifest, [], None, backing=backing, embedder=dense)
        stage = None if staging is None else Path(staging)
        kb._append_segment(documents, chunks, sources, batch_size, progress, stage)
        return kb

    @classmethod
    def index(
        cls,
        paths: Sequence[str | Path],
        out: str | Path,
        *,
        store: str | None = None,
        hnsw: HnswParams | None = None,
        embedder: str = "minilm",
        overwrite: bool = False,
        delete_other_files: bool = False,
        on_wait: Callable[[str], None] | None = None,
        notify: Callable[[str], None] | None = None,
        **options: Any,
    ) -> KnowledgeBase:
        """Build a knowledge base from files or folders and commit it to ``out``: one call.

        ``store``: where the rows live: None (local segment files in ``out``) or a store URL
        (``postgresql://USER@HOST/DB[?table=NAME&search=hnsw]``: a table ragbound owns, and
        ``out`` holds the manifest). ``hnsw``: search a local knowledge base through an HNSW
        graph with these parameters. ``options``: those of :meth:`build`. Everything that
        can be refused (a capability the backing lacks, a folder or table in the way) is
        refused before the corpus is read; a local build is staged in ``out``, so the same
        call after a crash continues where it stopped. A build that stops on an exception (a
        Ctrl-C, an error) removes what holds no finished block, ``out`` too when it made it
        and left it empty, and ``notify`` says how many finished blocks it keeps.
        """
        out = Path(out)
        kind = "lexical" if is_lexical(canonical_spec(embedder)) else "dense"
        backing = backing_for(store, out=out, embedder=kind, hnsw=hnsw)
        _checked_backing(
            backing, canonical_spec(embedder), options.get("units"), options.get("vector_dtype")
        )
        backing.check_target(out, overwrite=overwrite, delete_other_files=delete_other_files)
        if backing.holds_vectors:
            options.setdefault("staging", staging_dir(out))
        created = not out.exists()
        try:
            kb = cls.build(paths, embedder=embedder, backing=backing, **options)
            kb.save(
                out,
                overwrite=overwrite,
                delete_other_files=delete_other_files,
                on_wait=on_wait,
                notify=notify,
            )
        except BaseException:  # an interruption or an error: leave only what a rerun uses
            kept = tidy_staging(out, created=created)
            if kept and notify is not None:
                notify(
                    f"{staging_dir(out)} keeps {kept} embedded block(s): the same command "
                    "continues from them (delete the folder to drop them)"
                )
            raise
        return kb

    @classmethod
    def attach(
        cls, url: str, out: str | Path, *, on_wait: Callable[[str], None] | None = None, **options
    ) -> KnowledgeBase:
        """Use another application's store as it is, and commit its manifest to ``out`` (a new
        or empty folder). The URL's scheme chooses the backing
        (:data:`ragbound.knowledge.registry.ATTACH_SCHEMES`); ``options`` are its ``attach``'s
        (for ``postgresql://``: :meth:`ragbound.knowledge.postgres.PostgresAttachedBacking.attach`,
        table, columns, filters, embedder, sample, search; for ``chroma://``:
        :meth:`ragbound.knowledge.chroma.ChromaAttachedBacking.attach`, where, doc_field,
        embedder, sample)."""
        backing_class = attaching(url)
        check_new_folder(Path(out))
        backing, manifest, chunks, dense = backing_class.attach(url, **options)
        kb = cls(manifest, chunks, None, backing=backing, embedder=dense)
        kb.save(out, on_wait=on_wait)
        return kb

    def add(
        self,
        paths: Sequence[str | Path],
        *,
        batch_size: int = 64,
        progress: bool = False,
    ) -> int:
        """Add documents from files or folders; only the new chunks are embedded.

        New records get their ids as this knowledge base's records did (its ``id_field``).
        Returns the number of chunks added. Call ``save()`` to persist them. Raises InputError
        (and changes nothing) when a document id is already present, or when the backing
        cannot add (a table another application owns).
        """
        refuse_missing(self.backing, add=True)
        documents = load_documents(
            paths, text_field=self.manifest.text_field, id_field=self.manifest.id_field
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
        refuse_missing(self.backing, add=True)
        existing = {chunk.doc_id for chunk in self.chunks}
        clashes = sorted({doc.id for doc in documents} & existing)
        if clashes:
            shown = ", ".join(repr(c) for c in clashes[:5])
            raise InputError(
                f"{len(clashes)} document id(s) already in the knowledge base: {shown}; "
                "give the new documents other ids"
            )
        chunks = chunk_corpus(documents, self.manifest.chunking)
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
                vectors = stored_as(embed_texts(self.embedder, texts, batch_size, progress), dtype)
            else:
                stage = StagedBuild.open(staging, self.manifest, chunks, batch_size)
                vectors = stage.embed(self.embedder, texts, batch_size, progress, dtype)
            if units:
                texts = [u.text for u in units]
                unit_vectors = embed_texts(self.embedder, texts, batch_size, progress, "units")
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
        self.pending.append(PendingSegment(segment, chunks, vectors, fine))
        self._set_contents(
            self.manifest.model_copy(update={"updated_at": segment.created_at}),
            [*self.manifest.segments, segment],
            self.chunks + chunks,
            _with_part(self.vector_parts, vectors, self.backing.holds_vectors),
            self.units.concat(fine.shifted(len(self.chunks))),
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
        self.vector_parts = parts
        self.units = units
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
        an ArtifactError). The backing writes its rows, then one atomic replace of
        ``manifest.json`` commits them, so a crash at any point leaves either the previous
        knowledge base or the new one.

        Saving into the directory it was loaded from appends the new segments to what is
        committed there *now*: documents another writer added meanwhile are kept (and a
        document id both added is an InputError, saving nothing). Saving elsewhere needs a
        new or empty folder, or ``overwrite=True`` to replace the knowledge base there in
        place (local backings; a PostgreSQL one replaces only a table ragbound created);
        that also removes the old knowledge's calibration and tripwires (told to ``notify``)
        and refuses when the folder holds files ragbound did not write, unless
        ``delete_other_files``.
        """
        target = Path(path) if path is not None else self.path
        if target is None:
            raise InputError("no directory given to save the knowledge base to")
        with writer_lock(target, what=LOCK_WHAT, on_wait=on_wait):
            if self._behind(target):
                self.rebase(target)  # another writer committed meanwhile
            manifest = self.backing.save(
                self.contents(),
                target,
                overwrite=overwrite,
                delete_other_files=delete_other_files,
                notify=notify or silent,
            )
            if manifest is not None:
                self.committed(manifest)
        self.path = target
        return target

    def contents(self) -> Contents:
        """What the backing reads of this knowledge base: a snapshot of what it holds."""
        return Contents(
            self.manifest,
            self.chunks,
            self.units,
            self.vector_parts,
            self.path,
            tuple(self.pending),
            tuple(self.base_names),
        )

    def _behind(self, target: Path) -> bool:
        """Saving into the folder it was loaded from appends to what is committed there now:
        True when another writer committed there since (for a backing that can add)."""
        if self.path is None or not same_dir(target, self.path):
            return False
        if not self.backing.capabilities.add:
            return False
        committed = read_committed(target)
        return committed is not None and [s.name for s in committed.segments] != self.base_names

    def committed(self, manifest: KBManifest) -> None:
        """The backing committed ``manifest``: nothing is pending any more."""
        self.manifest = manifest
        self.base_names = [s.name for s in manifest.segments]
        self.pending = []
        self._store = None

    def rebase(self, target: Path) -> None:
        """Put the pending segments on top of the knowledge base committed in ``target`` now
        (another writer committed meanwhile)."""
        current = KnowledgeBase.load(target)
        mine, theirs = self.manifest, current.manifest
        if build_settings(mine) != build_settings(theirs):
            raise ArtifactError(
                f"the knowledge base {current.path} was replaced (another embedder, chunking or "
                "fields) while these documents were being added; nothing was saved: add them again"
            )
        new_chunks = [chunk for new in self.pending for chunk in new.chunks]
        clashes = sorted({c.doc_id for c in new_chunks} & {c.doc_id for c in current.chunks})
        if clashes:
            shown = ", ".join(repr(c) for c in clashes[:5])
            raise InputError(
                f"{len(clashes)} document id(s) were added to {current.path} by another writer "
                f"meanwhile: {shown}; nothing was saved"
            )
        parts, units, rows = current.vector_parts, current.units, len(current.chunks)
        for new in self.pending:
            parts = _with_part(parts, new.vectors, self.backing.holds_vectors)
            units = units.concat(new.units.shifted(rows))
            rows += len(new.chunks)
        self._set_contents(
            theirs.model_copy(update={"updated_at": mine.updated_at}),
            [*theirs.segments, *(new.segment for new in self.pending)],
            current.chunks + new_chunks,
            parts,
            units,
        )
        self.base_names = [s.name for s in theirs.segments]

    @classmethod
    def load(cls, path: str | Path, *, embedder: QueryDenseEmbedder | None = None) -> KnowledgeBase:
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
            stamp = manifest_stamp(root)
            try:
                kb = cls._load_committed(root)
            except ArtifactError:
                if attempt + 1 == _LOAD_ATTEMPTS or manifest_stamp(root) == stamp:
                    raise  # damage, not a commit that happened while reading
                continue
            if embedder is not None:
                kb._check_embedder(embedder)
            return kb
        raise AssertionError("unreachable")

    @classmethod
    def _load_committed(cls, root: Path) -> KnowledgeBase:
        manifest = read_manifest(root / MANIFEST, KBManifest, KB_FORMAT, "knowledge-base manifest")
        backing = backing_of(manifest.backing)
        loaded = backing.load(root, manifest)
        return cls(
            loaded.manifest,
            loaded.chunks,
            loaded.vectors,
            backing=backing,
            path=root,
            units=loaded.units,
        )

    # ----------------------------------------------------------------- search
    @property
    def embedder(self) -> QueryDenseEmbedder:
        """The dense embedder (loaded lazily); checked against the manifest's revision."""
        if self.manifest.embedder.kind != "dense":
            raise InputError("a BM25 knowledge base has no dense embedder")
        if self._embedder is None:
            self._check_embedder(load_dense_embedder(self.manifest.embedder_spec))
            assert self._embedder is not None
        return self._embedder

    def _check_embedder(self, embedder: QueryDenseEmbedder) -> None:
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
        """The search over the chunks at this granularity, a
        :class:`~ragbound.stores.Retriever` whose rows are ``chunks`` (built by the backing
        on first use, rebuilt after an add)."""
        if self._store is None:
            self._store = self.backing.retriever(self.contents(), self._granularity)
        return self._store

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
        refuse_missing(self.backing, units=wanted)
        view = KnowledgeBase(
            self.manifest,
            self.chunks,
            self.vector_parts,
            backing=self.backing,
            path=self.path,
            embedder=self._embedder,
            units=self.units,
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
        fine = sum(u.granularity in self._granularity for u in self.units.units)
        rows = fine + (len(self.chunks) if "chunk" in self._granularity else 0)
        if self.manifest.embedder.kind != "dense":
            return rows, 0
        chunk_rows = len(self.chunks) if "chunk" in self._granularity else 0
        chunk_bytes = np.dtype(self.manifest.vector_dtype).itemsize  # units are float32
        return rows, self.dimension * (chunk_rows * chunk_bytes + fine * 4)

    def restricted_to(self, doc_ids: Collection[str]) -> KnowledgeBase:
        """An unsaved local knowledge base of only these documents' chunks and units, not
        embedded again (for leave-documents-out splits), searched exactly (or with BM25).
        Its fingerprint is that of its chunks."""
        rows = [i for i, chunk in enumerate(self.chunks) if chunk.doc_id in doc_ids]
        if not rows:
            raise InputError("none of the given document ids is in the knowledge base")
        new_row = {old: new for new, old in enumerate(rows)}
        keep = [i for i, u in enumerate(self.units.units) if u.chunk in new_row]
        kept = (self.units.units[i] for i in keep)
        units = FineUnits(
            [u.model_copy(update={"chunk": new_row[u.chunk]}) for u in kept],
            None if self.units.vectors is None else self.units.vectors[keep],
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
        backing = local_backing(self.manifest.embedder.kind)
        dense = self.manifest.embedder.kind == "dense"
        vectors = self.vectors[rows] if dense else None
        kb = KnowledgeBase(self.manifest, [], None, backing=backing, embedder=self._embedder)
        kb.pending = [PendingSegment(segment, chunks, vectors, units)]
        kb._set_contents(kb.manifest, [segment], chunks, _with_part(None, vectors, dense), units)
        kb._granularity = self._granularity
        return kb

    def use_hnsw(self, params: HnswParams | None) -> None:
        """Search through an HNSW graph with ``params`` (None: exact search again).

        Recorded in the manifest on the next ``save``. Changing only ``ef_search`` or
        ``rescore`` keeps the graph (``m``, ``ef_construction`` and ``precision`` make
        another); calibrations record the search, so calibrate again with the search you
        check with. Local dense knowledge bases only (InputError otherwise).
        """
        searched_with = getattr(self.backing, "searched_with", None)  # a local dense backing's
        if searched_with is None:
            raise InputError(
                "an HNSW graph indexes a local dense knowledge base; a PostgreSQL one searches "
                "with pgvector's HNSW index (search=hnsw in the --backing URL)"
            )
        backing = searched_with(params)
        self.backing = backing
        self.manifest = self.manifest.model_copy(update={"backing": backing.entry})
        self._store = None

    def describe(self) -> SearchInfo:
        """How ``search`` finds neighbours (exact or approximate, with which parameters)."""
        info = self.backing.describe(self.contents(), self._granularity)
        return info if info is not None else self.store.describe()

    @property
    def vectors(self) -> np.ndarray:
        """Dense local only: all chunk vectors, (n_chunks, dim) in the manifest's
        ``vector_dtype``, rows aligned with ``chunks``. A loaded one-segment knowledge base
        gives its read-only memory map; with several segments this concatenates them in
        memory (search does not need it). InputError when they are not held here (BM25, or
        a database keeps them)."""
        if self.vector_parts is None:
            if self.manifest.embedder.kind != "dense":
                raise InputError("a BM25 knowledge base has no vectors")
            raise InputError(
                f"the vectors of this knowledge base stay in {self.backing.describe_kind}; "
                "search it instead"
            )
        return joined(self.vector_parts)

    @property
    def fingerprint(self) -> str:
        return self.manifest.fingerprint

    @property
    def group_field(self) -> str | None:
        """The metadata field grouping records for leave-documents-out (None: documents)."""
        return self.manifest.group_field

    @property
    def dimension(self) -> int:
        """The embedding dimension (0 for BM25)."""
        return self.manifest.embedder.dimension

    @property
    def similarity(self) -> Similarity:
        return self.manifest.embedder.similarity

    @property
    def embedder_name(self) -> str:
        return self.manifest.embedder.name

    @property
    def corpus_hash(self) -> str:
        return self.manifest.corpus_hash

    @property
    def indexed(self) -> tuple[Granularity, ...]:
        return self.manifest.units.indexed

    def query_embedder(self) -> QueryDenseEmbedder | None:
        """The dense embedder (None for BM25, which searches the query texts)."""
        return self.embedder if self.manifest.embedder.kind == "dense" else None

    def embed(self, queries: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """Query embeddings, (n, dim) float32 (dense knowledge bases only)."""
        return self.embedder.encode(list(queries), progress=progress)


def _checked_backing(
    backing: Backing | None,
    spec: str,
    units: UnitParams | None,
    vector_dtype: str | None,
) -> Backing:
    """``backing`` (default: local for the embedder), refused before any work when it lacks
    what is asked: the units, the vector type, the embedder's kind, being built here."""
    kind = "lexical" if is_lexical(spec) else "dense"
    if vector_dtype is not None and vector_dtype not in VECTOR_DTYPES:
        raise InputError(
            f"vector_dtype must be one of {', '.join(VECTOR_DTYPES)}, got {vector_dtype!r}"
        )
    backing = backing or local_backing(kind)
    refuse_missing(
        backing,
        units=(units or UnitParams()).indexed,
        vector_dtype=vector_dtype,
        embedder=kind,
        index=True,
    )
    return backing


def _with_part(
    parts: list[np.ndarray] | None, new: np.ndarray | None, held: bool
) -> list[np.ndarray] | None:
    """The vector parts with a new segment's appended, when this process holds the vectors
    (a local dense backing); None otherwise."""
    if not held:
        return None
    if new is None:
        raise ArtifactError("a dense knowledge base got a segment without vectors")
    return [new] if parts is None else [*parts, new]
