"""KnowledgeBase: held knowledge (:class:`~ragbound.knowledge.held.HeldKnowledge`) made from a
corpus or attached, added to, saved and loaded, handing the work to its parts: building
(:mod:`~ragbound.knowledge.build`), appending and rebasing segments
(:mod:`~ragbound.knowledge.appending`), commits (:mod:`~ragbound.knowledge.commits`) and the
backing (:mod:`~ragbound.knowledge.backing`).

Writers take the knowledge base's lock (:func:`ragbound.locking.writer_lock`, shared with
the calibration and the tripwires stored in the same folder). Readers take no lock and read
the last committed manifest; should a writer replace it while they read, they read again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ragbound.corpus import Chunk, ChunkingParams, Document, load_documents
from ragbound.corpus.groups import check_group_field
from ragbound.corpus.units import UnitParams
from ragbound.embedders import QueryDenseEmbedder, canonical_spec, load_dense_embedder
from ragbound.errors import InputError
from ragbound.knowledge.appending import appended, rebased, refuse_clashes
from ragbound.knowledge.backing import Backing, refuse_missing
from ragbound.knowledge.build import (
    checked_backing,
    chunk_corpus,
    embedder_kind,
    kept_if_stopped,
    new_manifest,
    new_segment,
    staging_dir,
)
from ragbound.knowledge.commits import behind, load_committed
from ragbound.knowledge.held import HeldKnowledge
from ragbound.knowledge.layout import LOCK_WHAT
from ragbound.knowledge.manifest import VectorDType
from ragbound.knowledge.registry import attaching, backing_for
from ragbound.knowledge.segments import check_new_folder, silent
from ragbound.locking import writer_lock
from ragbound.stores import bm25_info
from ragbound.stores.hnsw import HnswParams


class KnowledgeBase(HeldKnowledge):
    """A searchable corpus (:class:`~ragbound.knowledge.held.HeldKnowledge`) made from files,
    documents or another application's store, added to, saved and loaded.

    Example:
        >>> kb = KnowledgeBase.build(["docs/"], embedder="minilm")  # doctest: +SKIP
        >>> kb.save("kb/")  # doctest: +SKIP
        >>> hits = KnowledgeBase.load("kb/").search(["What is BM25?"], k=5)  # doctest: +SKIP
        >>> hits.similarities.shape  # doctest: +SKIP
        (1, 5)
    """

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
        backing = checked_backing(backing, spec, units, vector_dtype)
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
        backing = checked_backing(backing, spec, units, vector_dtype)
        chunking = chunking or ChunkingParams()
        if group_field is not None:
            check_group_field(documents, group_field)
        chunks = chunk_corpus(documents, chunking)
        dense = None if embedder_kind(spec) == "lexical" else load_dense_embedder(spec)
        manifest = new_manifest(
            spec,
            bm25_info() if dense is None else dense.info,
            backing,
            chunking=chunking,
            units=units or UnitParams(),
            text_field=text_field,
            id_field=id_field,
            group_field=group_field,
            vector_dtype=vector_dtype,
        )
        kb = cls(manifest, [], None, backing=backing, embedder=dense)
        kb._append(
            documents, chunks, sources, batch_size=batch_size, progress=progress, staging=staging
        )
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

        ``store``: where the rows live: None (segment files in ``out``) or a store URL
        (``postgresql://USER@HOST/DB[?table=NAME&search=hnsw]``: a table ragbound owns, and
        ``out`` holds the manifest). ``hnsw``: search a local knowledge base through an HNSW
        graph with these parameters. ``options``: :meth:`build`'s. What can be refused (a
        capability the backing lacks, a folder or table in the way) is refused before the
        corpus is read. A local build is staged in ``out``: the same call after a crash
        continues where it stopped, and one stopped by an exception keeps only its finished
        blocks (:func:`~ragbound.knowledge.build.kept_if_stopped`, told to ``notify``).
        """
        out, spec = Path(out), canonical_spec(embedder)
        backing = backing_for(store, out=out, embedder=embedder_kind(spec), hnsw=hnsw)
        checked_backing(backing, spec, options.get("units"), options.get("vector_dtype"))
        backing.check_target(out, overwrite=overwrite, delete_other_files=delete_other_files)
        if backing.holds_vectors:
            options.setdefault("staging", staging_dir(out))
        with kept_if_stopped(out, notify):
            kb = cls.build(paths, embedder=embedder, backing=backing, **options)
            kb.save(
                out,
                overwrite=overwrite,
                delete_other_files=delete_other_files,
                on_wait=on_wait,
                notify=notify,
            )
        return kb

    @classmethod
    def attach(
        cls, url: str, out: str | Path, *, on_wait: Callable[[str], None] | None = None, **options
    ) -> KnowledgeBase:
        """Use another application's store as it is, and commit its manifest to ``out`` (a new
        or empty folder). The URL's scheme chooses the backing
        (:data:`ragbound.knowledge.registry.ATTACH_SCHEMES`); ``options`` are its ``attach``'s,
        e.g. :meth:`ragbound.knowledge.postgres.PostgresAttachedBacking.attach` (table,
        columns, filters, embedder, sample, search)."""
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
        refuse_clashes(
            {doc.id for doc in documents},
            {chunk.doc_id for chunk in self.chunks},
            "already in the knowledge base",
            "give the new documents other ids",
        )
        chunks = chunk_corpus(documents, self.manifest.chunking)
        self._append(documents, chunks, sources, batch_size=batch_size, progress=progress)
        return len(chunks)

    def _append(
        self, documents: Sequence[Document], chunks: list[Chunk], sources: Sequence[str], **options
    ) -> None:
        """Embed ``chunks`` as a new pending segment (``options``: :func:`new_segment`'s)."""
        new = new_segment(
            self.manifest, self.query_embedder(), documents, chunks, sources, **options
        )
        held, at = self.backing.holds_vectors, new.segment.created_at
        self._hold(appended(self.contents(), [new], holds_vectors=held, updated_at=at))

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
        ``manifest.json`` commits them: a crash leaves the previous knowledge base or the new
        one. Saving into the folder it was loaded from appends to what is committed there
        *now* (another writer's documents are kept; a document id both added is an
        InputError, saving nothing). Elsewhere it needs a new or empty folder, or
        ``overwrite=True`` to replace the knowledge base there (a PostgreSQL one: only a
        table ragbound created) with its calibration and tripwires (told to ``notify``); a
        folder holding files ragbound did not write is refused unless ``delete_other_files``.
        """
        target = Path(path) if path is not None else self.path
        if target is None:
            raise InputError("no directory given to save the knowledge base to")
        with writer_lock(target, what=LOCK_WHAT, on_wait=on_wait):
            if behind(self.contents(), self.backing, target):
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

    def rebase(self, target: Path) -> None:
        """Put the pending segments on top of the knowledge base committed in ``target`` now
        (another writer committed meanwhile; :func:`ragbound.knowledge.appending.rebased`)."""
        current = KnowledgeBase.load(target).contents()
        self._hold(rebased(self.contents(), current, holds_vectors=self.backing.holds_vectors))

    @classmethod
    def load(cls, path: str | Path, *, embedder: QueryDenseEmbedder | None = None) -> KnowledgeBase:
        """Open a saved knowledge base, checking its files against its manifest (each file's
        SHA-256 when the manifest records it; older manifests: counts, shapes and the corpus
        hash). Takes no lock: it reads the last committed manifest, again should a writer
        replace it meanwhile (:func:`ragbound.knowledge.commits.load_committed`).

        ``embedder``: an embedder already loaded to use instead of loading the manifest's
        (to share one model between knowledge bases); it must be the one that built it.
        """
        backing, loaded = load_committed(Path(path))
        kb = cls(
            loaded.manifest,
            loaded.chunks,
            loaded.vectors,
            backing=backing,
            path=Path(path),
            units=loaded.units,
        )
        if embedder is not None:
            kb._check_embedder(embedder)
        return kb
