"""What a knowledge base holds as segments are put on it: appended (a build, an add), put on
top of another writer's commit (rebased), or a subset of its documents (restricted).

Each function takes a :class:`~ragbound.knowledge.backing.Contents` snapshot and returns a
new one whose manifest totals (chunks, documents, corpus hash) match what it holds; the
knowledge base adopts it. Nothing is embedded or written here.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

import numpy as np

from ragbound.artifacts import utc_now
from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge.backing import Contents
from ragbound.knowledge.manifest import Segment, build_settings, corpus_hash
from ragbound.knowledge.segments import FineUnits, PendingSegment


def appended(
    base: Contents, new: Sequence[PendingSegment], *, holds_vectors: bool, updated_at: str
) -> Contents:
    """``base`` with the ``new`` segments after its rows, pending; ``holds_vectors``: the
    backing keeps the chunk vectors in this process (else none are held)."""
    parts, units, rows = base.vector_parts, base.units, len(base.chunks)
    for segment in new:
        parts = _with_part(parts, segment.vectors, holds_vectors)
        units = units.concat(segment.units.shifted(rows))
        rows += len(segment.chunks)
    chunks = base.chunks + [chunk for segment in new for chunk in segment.chunks]
    segments = [*base.manifest.segments, *(segment.segment for segment in new)]
    manifest = base.manifest.model_copy(
        update={
            "updated_at": updated_at,
            "segments": segments,
            "n_chunks": len(chunks),
            "n_documents": sum(s.n_documents for s in segments),
            "corpus_hash": corpus_hash(chunks),
        }
    )
    return replace(
        base,
        manifest=manifest,
        chunks=chunks,
        vector_parts=parts,
        units=units,
        pending=(*base.pending, *new),
    )


def rebased(mine: Contents, current: Contents, *, holds_vectors: bool) -> Contents:
    """``mine``'s pending segments on top of ``current``, what another writer committed in
    the folder meanwhile. ArtifactError when ``current`` was built another way (embedder,
    chunking, fields), InputError when it gained a document id ``mine`` adds."""
    if build_settings(mine.manifest) != build_settings(current.manifest):
        raise ArtifactError(
            f"the knowledge base {current.path} was replaced (another embedder, chunking or "
            "fields) while these documents were being added; nothing was saved: add them again"
        )
    refuse_clashes(
        {chunk.doc_id for new in mine.pending for chunk in new.chunks},
        {chunk.doc_id for chunk in current.chunks},
        f"were added to {current.path} by another writer meanwhile",
        "nothing was saved",
    )
    on_top = appended(
        current, mine.pending, holds_vectors=holds_vectors, updated_at=mine.manifest.updated_at
    )
    return replace(on_top, path=mine.path)


def restricted(
    contents: Contents, doc_ids: Collection[str], vectors: np.ndarray | None
) -> Contents:
    """Only these documents' chunks and units (with their rows of ``vectors``, the chunk
    vectors, None for BM25), as one unsaved segment: a subset for leave-documents-out, not
    embedded again."""
    rows = [i for i, chunk in enumerate(contents.chunks) if chunk.doc_id in doc_ids]
    if not rows:
        raise InputError("none of the given document ids is in the knowledge base")
    new_row = {old: new for new, old in enumerate(rows)}
    keep = [i for i, u in enumerate(contents.units.units) if u.chunk in new_row]
    kept = (contents.units.units[i] for i in keep)
    units = FineUnits(
        [u.model_copy(update={"chunk": new_row[u.chunk]}) for u in kept],
        None if contents.units.vectors is None else contents.units.vectors[keep],
    )
    chunks = [contents.chunks[i] for i in rows]
    segment = Segment(
        name="unsaved-1",
        n_chunks=len(chunks),
        n_documents=len({c.doc_id for c in chunks}),
        sources=[],
        created_at=utc_now(),
        n_units=len(units.units),
    )
    manifest = contents.manifest
    empty = Contents(
        manifest.model_copy(update={"segments": []}),
        [],
        FineUnits.empty(None if vectors is None else manifest.embedder.dimension),
        None,
        None,
    )
    new = PendingSegment(segment, chunks, None if vectors is None else vectors[rows], units)
    return appended(empty, [new], holds_vectors=vectors is not None, updated_at=manifest.updated_at)


def refuse_clashes(new: Collection[str], present: Collection[str], where: str, advice: str) -> None:
    """InputError naming the document ids of ``new`` that are ``present`` already."""
    clashes = sorted(set(new) & set(present))
    if clashes:
        shown = ", ".join(repr(c) for c in clashes[:5])
        raise InputError(f"{len(clashes)} document id(s) {where}: {shown}; {advice}")


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
