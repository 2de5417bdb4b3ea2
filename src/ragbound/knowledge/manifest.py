"""The knowledge-base manifest: what made it, its segments, and which backing holds its rows.

``backing`` is one discriminated field: ``{"kind": "exact" | "bm25" | "hnsw" | "postgres" |
"postgres-attached", ...that backing's settings}``. Each backing reads its own settings
(:mod:`ragbound.knowledge.registry`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializeAsAny

from ragbound._version import __version__
from ragbound.artifacts import read_manifest, sha256_text
from ragbound.corpus import Chunk, ChunkingParams
from ragbound.corpus.units import UnitParams
from ragbound.embedders import EmbedderInfo
from ragbound.errors import ArtifactError
from ragbound.knowledge.layout import KB_FORMAT, MANIFEST

VectorDType = Literal["float32", "float16"]
VECTOR_DTYPES: tuple[str, ...] = ("float32", "float16")


class BackingEntry(BaseModel):
    """A backing's entry in the manifest: its ``kind`` and its own settings (kept as given;
    the backing of that kind validates them)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    kind: str


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


class KBManifest(BaseModel):
    """Everything needed to know what a knowledge base is, how it was made and where its rows
    live (``backing``)."""

    format: Literal["ragbound.kb/1"] = KB_FORMAT
    library_version: str = __version__
    created_at: str
    updated_at: str
    embedder_spec: str
    embedder: EmbedderInfo
    chunking: ChunkingParams
    text_field: str = "text"
    id_field: str | None = None
    # the metadata field whose value groups records for leave-documents-out (an intent, a
    # category; ragbound.corpus.groups); None: each document alone
    group_field: str | None = None
    # fine units indexed beside the chunks (the default: chunks only)
    units: UnitParams = UnitParams()
    n_chunks: int
    n_documents: int
    corpus_hash: str
    segments: list[Segment]
    backing: SerializeAsAny[BackingEntry]
    # how segment vector files store numbers; float16 halves the files and the memory they
    # map, at a similarity error of about 1e-3 (see docs/benchmarks.md, "A million chunks")
    vector_dtype: VectorDType = "float32"

    @property
    def fingerprint(self) -> str:
        """Identity of the knowledge: embedder, chunking, units and every chunk id (16 hex).

        Calibrations record it and refuse to run against a knowledge base whose
        fingerprint differs: their null distribution was measured on other similarities.
        The units enter only when fine units are indexed (a chunks-only knowledge base is
        identified by its embedder, chunking and chunks alone). Where the rows live (the
        backing) does not enter: the same chunks and vectors kept locally or in PostgreSQL
        are the same knowledge.
        """
        units = [self.units.model_dump_json()] if self.units.fine else []
        return sha256_text(
            self.embedder.identity(), self.chunking.model_dump_json(), self.corpus_hash, *units
        )[:16]


def corpus_hash(chunks: Sequence[Chunk]) -> str:
    """SHA-256 over chunk ids in order (ids already hash each chunk's text and position)."""
    return sha256_text(*(chunk.id for chunk in chunks))


def hash_id(digest: Any, chunk: Chunk) -> None:
    """Add one chunk id to a running :func:`corpus_hash` (what ``sha256_text`` does per part)."""
    digest.update(chunk.id.encode())
    digest.update(b"\0")


def read_committed(target: Path) -> KBManifest | None:
    """The manifest committed in ``target`` (None when there is none)."""
    path = target / MANIFEST
    if not path.exists():
        return None
    return read_manifest(path, KBManifest, KB_FORMAT, "knowledge-base manifest")


def readable_segments(target: Path) -> list[Segment]:
    """The committed segments of a knowledge base being replaced (none if its manifest is bad)."""
    try:
        committed = read_committed(target)
    except ArtifactError:
        return []
    return [] if committed is None else committed.segments


def build_settings(manifest: KBManifest) -> tuple[str, str, str, str, str | None]:
    """What new chunks must share with a knowledge base to be appended to it."""
    return (
        manifest.embedder.identity(),
        manifest.chunking.model_dump_json(),
        manifest.units.model_dump_json(),
        manifest.text_field,
        manifest.id_field,
    )
