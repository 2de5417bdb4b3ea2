"""KnowledgeBase = chunks + embedder + store + manifest, persisted as a plain directory.

Layout of a knowledge-base directory::

    manifest.json                 what made it; the commit point of every save
    segments/000001.chunks.jsonl  one chunk per line (id, text, doc_id, source, ...)
    segments/000001.vectors.npy   float32 (n_chunks_in_segment, dim); absent for BM25

Adding documents writes a new segment and then replaces ``manifest.json`` atomically, so the
vectors already on disk are never re-embedded or rewritten, and a crash at any point leaves
the previous manifest (and so the previous knowledge base) intact.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ValidationError

from ragbound._version import __version__
from ragbound.artifacts import (
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
    Chunk,
    ChunkingParams,
    Document,
    chunk_documents,
    load_documents,
    validate_query,
)
from ragbound.embedders import EmbedderInfo, canonical_spec, is_lexical, load_dense_embedder
from ragbound.embedders.base import Similarity
from ragbound.embedders.sentence import SentenceTransformerEmbedder, release_freed_memory
from ragbound.errors import ArtifactError, IncompatibleArtifactError, InputError
from ragbound.progress import progress_bar
from ragbound.stores import (
    BM25Store,
    ExactStore,
    Hits,
    QueryKind,
    Retriever,
    SearchInfo,
    bm25_info,
)

KB_FORMAT = "ragbound.kb/1"
MANIFEST = "manifest.json"
SEGMENTS = "segments"
# Chunks are embedded in outer batches so the progress bar moves and memory stays flat.
_OUTER_BATCH = 512
_MAX_TOKENS = 256  # MiniLM's max_seq_length; longer models are capped the same for the budget
_TOKEN_BUDGET = 2048  # tokens per forward pass


class Segment(BaseModel):
    """One append-only slice of the knowledge base."""

    name: str
    n_chunks: int
    n_documents: int
    sources: list[str]
    created_at: str


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
    n_chunks: int
    n_documents: int
    corpus_hash: str
    segments: list[Segment]

    @property
    def fingerprint(self) -> str:
        """Identity of the knowledge: embedder, chunking and every chunk id (16 hex chars).

        Calibrations record it and refuse to run against a knowledge base whose
        fingerprint differs: their null distribution was measured on other similarities.
        """
        return sha256_text(
            self.embedder.identity(), self.chunking.model_dump_json(), self.corpus_hash
        )[:16]


def corpus_hash(chunks: Sequence[Chunk]) -> str:
    """SHA-256 over chunk ids in order (ids already hash each chunk's text and position)."""
    return sha256_text(*(chunk.id for chunk in chunks))


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

    def __init__(
        self,
        manifest: KBManifest,
        chunks: list[Chunk],
        vectors: np.ndarray | None,
        *,
        path: Path | None = None,
        embedder: SentenceTransformerEmbedder | None = None,
    ):
        self.manifest = manifest
        self.chunks = chunks
        self.path = path
        self._embedder = embedder
        self._segment_vectors: dict[str, np.ndarray] = {}
        # The knowledge base owns its vectors (it writes them to disk); the store is an index
        # over them, built on first search and rebuilt after an add.
        self._vectors = None if vectors is None else np.ascontiguousarray(vectors, np.float32)
        self._store: Retriever | None = None

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
        batch_size: int = 64,
        progress: bool = False,
    ) -> KnowledgeBase:
        """Load, chunk and embed a corpus (files or folders) into an unsaved knowledge base."""
        documents = load_documents(paths, text_field=text_field, id_field=id_field)
        return cls.from_documents(
            documents,
            embedder=embedder,
            chunking=ChunkingParams(chunk_words=chunk_words, overlap=overlap),
            text_field=text_field,
            id_field=id_field,
            sources=[str(p) for p in paths],
            batch_size=batch_size,
            progress=progress,
        )

    @classmethod
    def from_documents(
        cls,
        documents: Sequence[Document],
        *,
        embedder: str = "minilm",
        chunking: ChunkingParams | None = None,
        text_field: str = "text",
        id_field: str | None = None,
        sources: Sequence[str] = (),
        batch_size: int = 64,
        progress: bool = False,
    ) -> KnowledgeBase:
        """Chunk and embed documents already in memory."""
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
            text_field=text_field,
            id_field=id_field,
            n_chunks=len(chunks),
            n_documents=len(documents),
            corpus_hash=corpus_hash(chunks),
            segments=[],
        )
        kb = cls(manifest, [], None, embedder=dense)
        kb._append_segment(documents, chunks, sources, batch_size, progress)
        return kb

    def add(
        self,
        paths: Sequence[str | Path],
        *,
        batch_size: int = 64,
        progress: bool = False,
    ) -> int:
        """Add documents from files or folders; only the new chunks are embedded.

        Returns the number of chunks added. Call ``save()`` to persist them. Raises
        InputError (and changes nothing) when a document id is already present.
        """
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
    ) -> None:
        vectors = None
        if self.manifest.embedder.kind == "dense":
            vectors = _embed_chunks(self.embedder, chunks, batch_size, progress)
        name = f"{len(self.manifest.segments) + 1:06d}"
        segment = Segment(
            name=name,
            n_chunks=len(chunks),
            n_documents=len(documents),
            sources=list(sources),
            created_at=utc_now(),
        )
        all_chunks = self.chunks + chunks
        self.manifest = self.manifest.model_copy(
            update={
                "segments": [*self.manifest.segments, segment],
                "n_chunks": len(all_chunks),
                "n_documents": sum(s.n_documents for s in self.manifest.segments) + len(documents),
                "corpus_hash": corpus_hash(all_chunks),
                "updated_at": segment.created_at,
            }
        )
        self.chunks = all_chunks
        if vectors is not None:
            self._segment_vectors[name] = vectors
            old = self._vectors
            self._vectors = vectors if old is None else np.concatenate([old, vectors])
        self._store = None  # rebuilt over every chunk on the next search

    # ------------------------------------------------------------- persistence
    def save(self, path: str | Path | None = None, *, overwrite: bool = False) -> Path:
        """Write new segments, then atomically replace the manifest. Returns the directory.

        Saving into the directory the knowledge base was loaded from appends new segments.
        Saving elsewhere needs an empty or new folder, or ``overwrite=True`` to replace a
        knowledge base there: the new one is written beside it and swapped in, so the old
        one survives a crash.
        """
        target = Path(path) if path is not None else self.path
        if target is None:
            raise InputError("no directory given to save the knowledge base to")
        if overwrite and target != self.path and (target / MANIFEST).exists():
            return self._save_swapping(target)
        _check_save_target(target, is_own=target == self.path)
        seg_dir = target / SEGMENTS
        offsets = _segment_offsets(self.manifest.segments)
        for segment in self.manifest.segments:
            chunk_file = seg_dir / f"{segment.name}.chunks.jsonl"
            if chunk_file.exists() and target == self.path:
                continue  # segments are append-only: what is on disk is already right
            start, stop = offsets[segment.name]
            self._write_segment(seg_dir, segment.name, self.chunks[start:stop], start, stop)
        write_json(target / MANIFEST, self.manifest.model_dump(mode="json"))
        _remove_unreferenced(seg_dir, self.manifest.segments)
        self.path = target
        return target

    def _save_swapping(self, target: Path) -> Path:
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        self.save(staging)
        trash = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
        target.rename(trash / "kb")
        staging.rename(target)
        shutil.rmtree(trash, ignore_errors=True)
        self.path = target
        return target

    def _write_segment(self, seg_dir: Path, name: str, chunks: list[Chunk], start: int, stop: int):
        if self.manifest.embedder.kind == "dense":
            vectors = self._segment_vectors.get(name)
            if vectors is None:
                vectors = self.vectors[start:stop]
            write_npy(seg_dir / f"{name}.vectors.npy", vectors)
        write_jsonl(seg_dir / f"{name}.chunks.jsonl", (c.model_dump(mode="json") for c in chunks))

    @classmethod
    def load(cls, path: str | Path) -> KnowledgeBase:
        """Open a saved knowledge base, checking its manifest against the files on disk."""
        root = Path(path)
        if not root.is_dir():
            raise InputError(f"knowledge base {root} does not exist (build it with ragbound index)")
        manifest = read_manifest(root / MANIFEST, KBManifest, KB_FORMAT, "knowledge-base manifest")
        chunks: list[Chunk] = []
        for segment in manifest.segments:
            seg_chunks = _read_chunks(root / SEGMENTS / f"{segment.name}.chunks.jsonl")
            if len(seg_chunks) != segment.n_chunks:
                raise ArtifactError(
                    f"{root}: segment {segment.name} holds {len(seg_chunks)} chunks, "
                    f"the manifest says {segment.n_chunks}"
                )
            chunks.extend(seg_chunks)
        if corpus_hash(chunks) != manifest.corpus_hash:
            raise ArtifactError(f"{root}: chunk files do not match the manifest's corpus hash")
        vectors = _read_all_vectors(root, manifest) if manifest.embedder.kind == "dense" else None
        return cls(manifest, chunks, vectors, path=root)

    # ----------------------------------------------------------------- search
    @property
    def embedder(self) -> SentenceTransformerEmbedder:
        """The dense embedder (loaded lazily); checked against the manifest's revision."""
        if self.manifest.embedder.kind != "dense":
            raise InputError("a BM25 knowledge base has no dense embedder")
        if self._embedder is None:
            embedder = load_dense_embedder(self.manifest.embedder_spec)
            if embedder.info.identity() != self.manifest.embedder.identity():
                raise IncompatibleArtifactError(
                    f"the embedder {self.manifest.embedder_spec!r} on this machine "
                    f"({embedder.info.revision}) is not the one that built this knowledge "
                    f"base ({self.manifest.embedder.revision}); rebuild it with ragbound index"
                )
            self._embedder = embedder
        return self._embedder

    @property
    def store(self) -> Retriever:
        """The chunks' search index, a :class:`~ragbound.stores.Retriever` whose rows are
        ``chunks``: exact inner product over the vectors (queries are vectors) or BM25 over
        the texts (queries are texts), built on first use."""
        if self._store is None:
            if self._vectors is None:
                self._store = BM25Store([chunk.text for chunk in self.chunks])
            else:
                self._store = ExactStore(
                    self._vectors, similarity=self.manifest.embedder.similarity
                )
        return self._store

    def describe(self) -> SearchInfo:
        """How ``search`` finds neighbours (exact or approximate, with which parameters)."""
        return self.store.describe()

    @property
    def vectors(self) -> np.ndarray:
        """Dense only: all chunk vectors held in this process, (n_chunks, dim) float32, rows
        aligned with ``chunks``. Raises InputError for a BM25 knowledge base."""
        if self._vectors is None:
            raise InputError("a BM25 knowledge base has no vectors")
        return self._vectors

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


def _embed_chunks(
    embedder: SentenceTransformerEmbedder, chunks: list[Chunk], batch_size: int, progress: bool
) -> np.ndarray:
    """Embed chunk texts into one preallocated float32 matrix, longest texts batched together."""
    dim = embedder.info.dimension
    vectors = np.empty((len(chunks), dim), dtype=np.float32)
    order = np.argsort([-len(chunk.text) for chunk in chunks], kind="stable")
    with progress_bar(len(chunks), "embedding chunks", progress) as advance:
        for start in range(0, len(order), _OUTER_BATCH):
            rows = order[start : start + _OUTER_BATCH]
            texts = [chunks[i].text for i in rows]
            size = _batch_for(chunks[rows[0]].n_words, batch_size)
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


def _check_save_target(target: Path, *, is_own: bool) -> None:
    if target.exists() and not target.is_dir():
        raise InputError(f"cannot save the knowledge base to {target}: it is a file")
    if not is_own and (target / MANIFEST).exists():
        raise InputError(
            f"{target} already holds another knowledge base: pass overwrite=True "
            "(--overwrite) to replace it"
        )
    if target.is_dir() and any(target.iterdir()) and not (target / MANIFEST).exists():
        raise InputError(
            f"cannot save the knowledge base to {target}: the folder is not empty "
            "and holds no knowledge base"
        )


def _remove_unreferenced(seg_dir: Path, segments: list[Segment]) -> None:
    """Delete segment files a crashed save left behind (never referenced by a manifest)."""
    keep = {s.name for s in segments}
    for path in seg_dir.glob("*.*"):
        if path.name.split(".", 1)[0] not in keep:
            path.unlink(missing_ok=True)


def _read_chunks(path: Path) -> list[Chunk]:
    chunks = []
    for number, row in enumerate(iter_jsonl(path, "chunk file"), start=1):
        try:
            chunks.append(Chunk.model_validate(row))
        except ValidationError as exc:
            raise ArtifactError(f"chunk file {path}:{number} is invalid: {exc}") from exc
    return chunks


def _read_all_vectors(root: Path, manifest: KBManifest) -> np.ndarray:
    """All segments' vectors in one matrix, filled segment by segment (no 2x peak)."""
    dim = manifest.embedder.dimension
    if sum(s.n_chunks for s in manifest.segments) != manifest.n_chunks:
        raise ArtifactError(f"{root / MANIFEST}: segment sizes do not add up to n_chunks")
    if len(manifest.segments) == 1:
        return np.array(_read_vectors(root, manifest.segments[0], dim))
    vectors = np.empty((manifest.n_chunks, dim), dtype=np.float32)
    for segment, (start, stop) in zip(
        manifest.segments, _segment_offsets(manifest.segments).values(), strict=True
    ):
        vectors[start:stop] = _read_vectors(root, segment, dim)
    return vectors


def _read_vectors(root: Path, segment: Segment, dimension: int) -> np.ndarray:
    """One segment's vectors, memory-mapped and checked (shape, dtype, finite)."""
    path = root / SEGMENTS / f"{segment.name}.vectors.npy"
    vectors = read_npy(path, "vector file", mmap=True)
    expected = (segment.n_chunks, dimension)
    if vectors.dtype != np.float32 or vectors.shape != expected:
        raise ArtifactError(
            f"{path}: expected float32 {expected}, found {vectors.dtype} {vectors.shape}"
        )
    if not np.isfinite(vectors).all():
        raise ArtifactError(f"{path}: holds NaN or infinite values")
    return vectors
