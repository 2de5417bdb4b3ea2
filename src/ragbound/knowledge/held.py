"""Knowledge held in a backing: a manifest, its chunks, fine units and chunk vectors, searched
at a granularity (:class:`HeldKnowledge`).

:class:`~ragbound.knowledge.KnowledgeBase` is one that is also made, added to, saved and
loaded; this part only holds and searches, so it is built from rows already made (a
benchmark's, a test's) and tested alone. The backing (:mod:`ragbound.knowledge.backing`)
searches the rows; views at other granularities share them (:mod:`ragbound.knowledge.views`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path
from typing import ClassVar, Self

import numpy as np

from ragbound.corpus import Chunk
from ragbound.corpus.units import Granularity, parse_granularity
from ragbound.embedders import QueryDenseEmbedder, load_dense_embedder
from ragbound.embedders.base import Similarity
from ragbound.errors import IncompatibleArtifactError, InputError
from ragbound.knowledge.appending import restricted
from ragbound.knowledge.backing import Backing, Contents, joined, refuse_missing
from ragbound.knowledge.manifest import KBManifest
from ragbound.knowledge.protocol import Searching
from ragbound.knowledge.registry import backing_of, local_backing
from ragbound.knowledge.segments import FineUnits, PendingSegment
from ragbound.knowledge.views import Views, check_indexed, index_size
from ragbound.stores import QueryKind, Retriever, SearchInfo
from ragbound.stores.hnsw import HnswParams


class HeldKnowledge(Searching):
    """Rows held in a backing and searched there: ``search`` returns top-k similarities,
    higher = closer, over ``chunks``.

    It is a text :class:`~ragbound.stores.Retriever` (query texts in,
    :class:`~ragbound.stores.Hits` over ``chunks`` out): its embedder turns the texts into
    vectors when its backing searches vectors. ``vectors``: the chunk vectors (one matrix,
    or one per segment; None when the backing keeps them elsewhere or has none).
    """

    query_kind: ClassVar[QueryKind] = "text"
    # the chunks, rows aligned with the vectors: a list when built in memory, a read-only
    # ChunkSequence over the segment files once loaded (both index, slice, iterate and +)
    chunks: Sequence[Chunk]
    manifest: KBManifest
    units: FineUnits
    path: Path | None
    # The chunk vectors held in this process, one matrix per part (per segment once loaded:
    # memory maps of the segment files); None when the backing keeps them elsewhere (a
    # database) or has none (BM25).
    vector_parts: list[np.ndarray] | None
    # segments added since the last load or save, and the committed segments they follow
    pending: tuple[PendingSegment, ...]
    base_names: tuple[str, ...]

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
        granularity: tuple[Granularity, ...] | None = None,
    ):
        self.backing = backing or backing_of(manifest.backing)
        self._embedder = embedder
        # the units a search scores chunks by (see at_granularity)
        self._granularity = granularity or manifest.units.granularity
        self._views: Views[Self] = Views()
        parts = None
        if vectors is not None:
            given = [vectors] if isinstance(vectors, np.ndarray) else list(vectors)
            parts = [np.ascontiguousarray(p, np.dtype(manifest.vector_dtype)) for p in given]
        dense = manifest.embedder.kind == "dense"
        self._hold(
            Contents(
                manifest.model_copy(update={"backing": self.backing.entry}),
                chunks,
                units or FineUnits.empty(manifest.embedder.dimension if dense else None),
                parts,
                path,
                (),
                tuple(s.name for s in manifest.segments) if path else (),
            )
        )

    def _hold(self, contents: Contents) -> None:
        """Hold what ``contents`` holds; the search is built again on its next use."""
        self.manifest, self.chunks, self.units = contents.manifest, contents.chunks, contents.units
        self.vector_parts, self.path = contents.vector_parts, contents.path
        self.pending, self.base_names = tuple(contents.pending), tuple(contents.base_names)
        self._store: Retriever | None = None

    def committed(self, manifest: KBManifest) -> None:
        """The backing committed ``manifest``: nothing is pending any more."""
        names = tuple(s.name for s in manifest.segments)
        self._hold(replace(self.contents(), manifest=manifest, pending=(), base_names=names))

    def contents(self) -> Contents:
        """What the backing reads of this knowledge base: a snapshot of what it holds."""
        return Contents(
            self.manifest,
            self.chunks,
            self.units,
            self.vector_parts,
            self.path,
            self.pending,
            self.base_names,
        )

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

    def at_granularity(self, granularity: str | Sequence[str]) -> Self:
        """This knowledge base searched at another granularity (a view sharing its data).

        ``granularity`` is a unit or a comma-separated list (``"chunk,sentence"``) among the
        units it indexed; returns ``self`` when unchanged. The view is for searching: add
        documents to, and save, the knowledge base itself. IncompatibleArtifactError when a
        unit was not indexed.
        """
        wanted = parse_granularity(granularity)
        if wanted == self._granularity:
            return self
        made_from = (self.manifest, self.path, self._embedder)
        return self._views.get(made_from, wanted, lambda: self._view(wanted))

    def _view(self, wanted: tuple[Granularity, ...]) -> Self:
        """A knowledge base sharing this one's data, searched at ``wanted``."""
        check_indexed(self.manifest, self.path, wanted)
        refuse_missing(self.backing, units=wanted)
        return type(self)(
            self.manifest,
            self.chunks,
            self.vector_parts,
            backing=self.backing,
            path=self.path,
            embedder=self._embedder,
            units=self.units,
            granularity=wanted,
        )

    def index_size(self) -> tuple[int, int]:
        """Rows the search scores at this granularity and their vectors' bytes (0 for BM25)."""
        return index_size(self.contents(), self._granularity)

    def restricted_to(self, doc_ids: Collection[str]) -> Self:
        """An unsaved local knowledge base of only these documents' chunks and units, not
        embedded again (for leave-documents-out splits), searched exactly (or with BM25).
        Its fingerprint is that of its chunks."""
        kind = self.manifest.embedder.kind
        subset = restricted(self.contents(), doc_ids, self.vectors if kind == "dense" else None)
        kb = type(self)(
            subset.manifest,
            [],
            None,
            backing=local_backing(kind),
            embedder=self._embedder,
            granularity=self._granularity,
        )
        kb._hold(replace(subset, manifest=kb.manifest))  # with the local backing's entry
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
