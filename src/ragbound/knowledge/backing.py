"""Where a knowledge base's rows live and how they are searched: the :class:`Backing` protocol.

A :class:`~ragbound.knowledge.KnowledgeBase` is chunks + fine units + an embedder + one
backing. The backing stores the rows (segment files in the knowledge-base folder, or a
PostgreSQL table), searches them (a :class:`~ragbound.stores.Retriever` at a granularity),
and commits a write. Each declares its :class:`Capabilities`; :func:`refuse_missing` turns a
request for one it lacks into one InputError before any work (embedding, writing) is done.
The backings and the names and URLs that choose them: :mod:`ragbound.knowledge.registry`.

A backing never sees the knowledge base itself: it reads a :class:`Contents` (a snapshot of
what it holds) and returns what it committed, which the knowledge base then adopts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict

from ragbound.corpus import Chunk
from ragbound.corpus.units import GRANULARITIES, Granularity, granularity_label
from ragbound.errors import InputError
from ragbound.knowledge.manifest import BackingEntry, KBManifest
from ragbound.stores import Retriever, SearchInfo

if TYPE_CHECKING:
    from ragbound.embedders.base import Similarity
    from ragbound.knowledge.segments import FineUnits, PendingSegment

EmbedderKind = Literal["dense", "lexical"]


class Capabilities(BaseModel):
    """What a backing can do.

    ``units``: the granularities it stores and searches (``chunk`` always); ``vector_dtypes``:
    how it can store vectors (empty: it keeps none, BM25); ``embedders``: the embedder kinds it
    serves; ``index``: ragbound can build it from a corpus (an attached table is filled by
    another application); ``add``: documents can be added; ``approximate``: it can search
    approximately (a graph index); ``tripwires``: the class (its dotted path) of the tripwire
    records its store holds, made from the backing's ``location`` (None: files in the folder).
    """

    model_config = ConfigDict(frozen=True)

    units: tuple[Granularity, ...] = GRANULARITIES
    vector_dtypes: tuple[str, ...] = ("float32", "float16")
    embedders: tuple[EmbedderKind, ...] = ("dense",)
    index: bool = True
    add: bool = True
    approximate: bool = False
    tripwires: str | None = None


# a store another application fills: chunks only, searched approximately, read only here
ATTACHED = Capabilities(
    units=("chunk",), vector_dtypes=("float32",), index=False, add=False, approximate=True
)


@dataclass(frozen=True)
class Contents:
    """What a backing reads of a knowledge base, a snapshot: its manifest, chunks and fine
    units, the chunk vectors held in this process (one matrix per part; None when the
    backing keeps them elsewhere or has none), the folder it was loaded from or last saved to,
    the segments added since and the names of the committed segments they follow."""

    manifest: KBManifest
    chunks: Sequence[Chunk]
    units: FineUnits
    vector_parts: list[np.ndarray] | None
    path: Path | None
    pending: Sequence[PendingSegment] = ()
    base_names: Sequence[str] = ()

    @property
    def vectors(self) -> np.ndarray:
        """All chunk vectors, (n_chunks, dim): the one part itself, else the parts joined."""
        if self.vector_parts is None:
            raise InputError("the vectors of this knowledge base are not held in this process")
        return joined(self.vector_parts)

    @property
    def similarity(self) -> Similarity:
        return self.manifest.embedder.similarity

    @property
    def dimension(self) -> int:
        return self.manifest.embedder.dimension


def joined(parts: Sequence[np.ndarray]) -> np.ndarray:
    """One matrix of vector parts: the only part itself (a memory map stays one)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


@dataclass
class Loaded:
    """What a backing reads back from a committed knowledge base: the manifest (a backing may
    update its counts, e.g. an attached table that gained rows), the chunks, the fine units
    and the vectors held in this process (None when the backing keeps them elsewhere)."""

    manifest: KBManifest
    chunks: Sequence[Chunk]
    units: FineUnits
    vectors: list[np.ndarray] | None


class Backing(Protocol):
    """Where the rows of a knowledge base live and how they are searched.

    ``kind`` is the manifest's ``backing.kind``; ``describe_kind`` says it in words.
    """

    kind: ClassVar[str]
    describe_kind: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    @property
    def entry(self) -> BackingEntry:
        """The manifest's ``backing`` entry."""
        ...

    @property
    def holds_vectors(self) -> bool:
        """The chunk vectors are in this process (memory maps or arrays) once loaded."""
        ...

    def check_target(self, out: Path, *, overwrite: bool, delete_other_files: bool) -> None:
        """Before any work: ``out`` (and the backing's own place) can take a new knowledge
        base (InputError otherwise)."""
        ...

    def retriever(self, contents: Contents, granularity: tuple[Granularity, ...]) -> Retriever:
        """The search over the rows of ``contents`` at ``granularity``: chunk rows, higher =
        closer."""
        ...

    def describe(
        self, contents: Contents, granularity: tuple[Granularity, ...]
    ) -> SearchInfo | None:
        """What :meth:`retriever`'s ``describe()`` gives, without building it; None when it
        takes the retriever (the knowledge base then asks the one it keeps)."""
        ...

    def save(
        self,
        contents: Contents,
        target: Path,
        *,
        overwrite: bool,
        delete_other_files: bool,
        notify: Callable[[str], None],
    ) -> KBManifest | None:
        """Commit ``contents`` to ``target`` (under the writer lock, which the caller holds,
        after the knowledge base put its pending segments on what is committed there now);
        the manifest committed, or None when there was nothing to commit."""
        ...

    def load(self, root: Path, manifest: KBManifest) -> Loaded:
        """Read a committed knowledge base's rows, checked against its manifest."""
        ...


def refuse_missing(
    backing: Backing,
    *,
    units: Sequence[Granularity] = (),
    vector_dtype: str | None = None,
    embedder: EmbedderKind | None = None,
    index: bool = False,
    add: bool = False,
) -> None:
    """One InputError naming the first capability asked for that ``backing`` lacks."""
    caps, name = backing.capabilities, f"{backing.describe_kind} ({backing.kind})"
    missing_units = [u for u in units if u not in caps.units]
    if missing_units:
        raise InputError(
            f"{name} cannot store {', '.join(missing_units)} units (it stores "
            f"{granularity_label(caps.units)}): use --granularity "
            f"{granularity_label(caps.units)}, or a local knowledge base"
        )
    if vector_dtype is not None and caps.vector_dtypes and vector_dtype not in caps.vector_dtypes:
        raise InputError(
            f"{name} stores vectors as {', '.join(caps.vector_dtypes)}, not {vector_dtype}: "
            "use --vector-dtype float32, or a local knowledge base"
        )
    if embedder is not None and embedder not in caps.embedders:
        wanted = "a dense embedder (minilm, mpnet or a model folder)"
        raise InputError(f"{name} needs {wanted}, not a {embedder} one such as bm25")
    if index and not caps.index:
        raise InputError(f"{name} is filled by another application: ragbound cannot index it")
    if add and not caps.add:
        raise InputError(
            f"{name} belongs to another application: add documents there; ragbound reads its "
            "new rows on the next load (then calibrate again)"
        )
