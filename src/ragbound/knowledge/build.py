"""Building a knowledge base's rows: the backing checked first, chunking, a new segment's
embedding by token budget, and the staged build.

Chunks are embedded in outer batches, longest first, so similar lengths share a batch and
memory stays flat. ``build(staging=...)`` writes each finished block of vectors to
``staging/<key>/block-NNNNNN.npy`` as it goes, so a rerun after a crash continues from them::

    staging/<key>/block-000001.npy   a build's finished blocks, kept until the build commits
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragbound.artifacts import read_npy, sha256_text, utc_now, write_npy
from ragbound.corpus import Chunk, ChunkingParams, Document, chunk_documents
from ragbound.corpus.units import UnitParams, split_units
from ragbound.embedders import EmbedderInfo, is_lexical
from ragbound.embedders.base import DenseEmbedder
from ragbound.embedders.sentence import release_freed_memory
from ragbound.errors import ArtifactError, InputError
from ragbound.faults import crash_point
from ragbound.knowledge.backing import Backing, EmbedderKind, refuse_missing
from ragbound.knowledge.layout import STAGING
from ragbound.knowledge.manifest import (
    VECTOR_DTYPES,
    KBManifest,
    Segment,
    VectorDType,
    corpus_hash,
)
from ragbound.knowledge.registry import local_backing
from ragbound.knowledge.segments import CHECK_ROWS, FineUnits, PendingSegment, remove_path
from ragbound.progress import progress_bar

# Chunks are embedded in outer batches so the progress bar moves and memory stays flat.
_OUTER_BATCH = 512
# Chunks per staged block: what a crash can cost to embed again (minutes at MiniLM speed).
STAGE_BLOCK = 8192
STAGE_BLOCK_ENV = "RAGBOUND_STAGE_BLOCK"
_MAX_TOKENS = 256  # MiniLM's max_seq_length; longer models are capped the same for the budget
_TOKEN_BUDGET = 2048  # tokens per forward pass


def embedder_kind(spec: str) -> EmbedderKind:
    """``lexical`` for BM25, else ``dense``."""
    return "lexical" if is_lexical(spec) else "dense"


def checked_backing(
    backing: Backing | None, spec: str, units: UnitParams | None, vector_dtype: str | None
) -> Backing:
    """``backing`` (default: local for the embedder ``spec``), refused before any work when
    it lacks what is asked: the units, the vector type, the embedder's kind, being built."""
    kind = embedder_kind(spec)
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


def new_manifest(spec: str, info: EmbedderInfo, backing: Backing, **fields: Any) -> KBManifest:
    """The manifest of a knowledge base about to get its first segment (its counts and
    corpus hash are those of no chunks until it is appended); ``fields``: the manifest's own
    (chunking, units, text_field, ...)."""
    now = utc_now()
    return KBManifest(
        created_at=now,
        updated_at=now,
        embedder_spec=spec,
        embedder=info,
        n_chunks=0,
        n_documents=0,
        corpus_hash=corpus_hash([]),
        segments=[],
        backing=backing.entry,
        **fields,
    )


def chunk_corpus(documents: Sequence[Document], chunking: ChunkingParams) -> list[Chunk]:
    chunks = chunk_documents(documents, chunk_words=chunking.chunk_words, overlap=chunking.overlap)
    if not chunks:
        raise InputError("the corpus produced no chunks (every document is empty)")
    return chunks


def embed_texts(
    embedder: DenseEmbedder,
    all_texts: list[str],
    batch_size: int,
    progress: bool,
    what: str = "chunks",
) -> np.ndarray:
    """Embed texts into one preallocated float32 matrix, longest texts batched together.

    A local model's batches are capped by a token budget; an embedder that declares no
    ``max_seq_length`` (a server) gets plain ``batch_size`` batches, since it batches and
    holds memory its own way."""
    dim = embedder.info.dimension
    budgeted = embedder.info.max_seq_length is not None
    vectors = np.empty((len(all_texts), dim), dtype=np.float32)
    order = _longest_first(all_texts)
    with progress_bar(len(all_texts), f"embedding {what}", progress) as advance:
        for start in range(0, len(order), _OUTER_BATCH):
            rows = order[start : start + _OUTER_BATCH]
            texts = [all_texts[i] for i in rows]
            size = _batch_for(len(texts[0].split()), batch_size) if budgeted else batch_size
            vectors[rows] = embedder.encode(texts, batch_size=size)
            release_freed_memory()
            advance(len(rows))
    return vectors


def new_segment(
    manifest: KBManifest,
    embedder: DenseEmbedder | None,
    documents: Sequence[Document],
    chunks: list[Chunk],
    sources: Sequence[str],
    *,
    batch_size: int,
    progress: bool,
    staging: str | Path | None = None,
) -> PendingSegment:
    """The next segment of the knowledge base ``manifest`` describes: ``chunks``, their fine
    units, and both embedded when ``embedder`` is given (a dense knowledge base), the chunks
    staged block by block in ``staging`` when given (:class:`StagedBuild`)."""
    units = split_units(chunks, manifest.units)
    vectors, unit_vectors = None, None
    if embedder is not None:
        dtype, texts = manifest.vector_dtype, [c.text for c in chunks]
        if staging is None:
            vectors = stored_as(embed_texts(embedder, texts, batch_size, progress), dtype)
        else:
            stage = StagedBuild.open(Path(staging), manifest, chunks, batch_size)
            vectors = stage.embed(embedder, texts, batch_size, progress, dtype)
        unit_vectors = np.empty((0, manifest.embedder.dimension), np.float32)
        if units:
            texts = [u.text for u in units]
            unit_vectors = embed_texts(embedder, texts, batch_size, progress, "units")
    segment = Segment(
        # provisional: save() gives every new segment a name no committed manifest uses
        name=f"unsaved-{len(manifest.segments) + 1}",
        n_chunks=len(chunks),
        n_documents=len(documents),
        sources=list(sources),
        created_at=utc_now(),
        n_units=len(units),
    )
    return PendingSegment(segment, chunks, vectors, FineUnits(units, unit_vectors))


def _batch_for(longest_words: int, batch_size: int) -> int:
    """Cap the batch so batch x tokens stays within a budget.

    Attention memory grows with batch x length^2: long chunks go in smaller batches, which
    keeps the peak while indexing flat without slowing short texts.
    """
    tokens = min(_MAX_TOKENS, max(8, int(longest_words * 1.4)))
    return max(4, min(batch_size, _TOKEN_BUDGET // tokens))


def stored_as(vectors: np.ndarray, dtype: VectorDType) -> np.ndarray:
    """Vectors in the storage type; refuses values float16 cannot hold (InputError)."""
    stored = np.ascontiguousarray(vectors, dtype)
    if stored.dtype != vectors.dtype and not _all_finite(stored):
        raise InputError(
            f"the embeddings exceed what {dtype} can hold (|x| > 65504): index with "
            "vector_dtype float32 (--vector-dtype float32)"
        )
    return stored


def _all_finite(vectors: np.ndarray) -> bool:
    """No NaN or infinity, checked ``CHECK_ROWS`` rows at a time (bounded memory)."""
    return all(
        np.isfinite(vectors[start : start + CHECK_ROWS]).all()
        for start in range(0, len(vectors), CHECK_ROWS)
    )


def staging_dir(target: str | Path) -> Path:
    """Where ``build(staging=...)`` keeps the finished blocks of a build of ``target``."""
    return Path(target) / STAGING


def tidy_staging(target: Path, *, created: bool) -> int:
    """After a build of ``target`` that stopped (an interruption, an error): remove what holds
    no finished block (a build's empty folder, the staging folder, and ``target`` itself when
    this build ``created`` it and nothing else is there). Returns the finished blocks kept,
    from which the same build continues."""
    staging = staging_dir(target)
    kept = 0
    if staging.is_dir():
        for build in staging.iterdir():
            blocks = len(list(build.glob("block-*.npy"))) if build.is_dir() else 0
            kept += blocks
            if not blocks:
                remove_path(build)
        _remove_if_empty(staging)
    if created:
        _remove_if_empty(target)
    return kept


@contextlib.contextmanager
def kept_if_stopped(target: Path, notify: Callable[[str], None] | None) -> Iterator[None]:
    """Around a build of ``target``: when it stops on an exception (a Ctrl-C, an error),
    leave only what a rerun uses (:func:`tidy_staging`) and tell ``notify`` what is kept."""
    created = not target.exists()
    try:
        yield
    except BaseException:  # an interruption or an error: leave only what a rerun uses
        kept = tidy_staging(target, created=created)
        if kept and notify is not None:
            notify(
                f"{staging_dir(target)} keeps {kept} embedded block(s): the same command "
                "continues from them (delete the folder to drop them)"
            )
        raise


def _remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` if it is an empty folder."""
    with contextlib.suppress(OSError):
        folder.rmdir()


class StagedBuild:
    """A build's embedded vectors, block by block on disk, so a crash loses one block at most.

    Chunks are embedded in the order ``embed_texts`` uses (longest first), ``STAGE_BLOCK``
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
                    remove_path(other)
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
        embedder: DenseEmbedder,
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
                    block = embed_texts(embedder, [texts[i] for i in rows], batch_size, False)
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
            out[rows] = stored_as(block, dtype)
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
