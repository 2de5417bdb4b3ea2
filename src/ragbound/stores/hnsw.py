"""Approximate search in this process: an HNSW graph (faiss) over the knowledge base's vectors.

HNSW visits ``ef_search`` candidates per query instead of every row, so it can miss true
neighbours: the top similarities it returns are then *lower* than the exact ones and p-values
drift toward "out of knowledge". A calibration therefore records the search it was made with
(:meth:`HnswStore.describe`: backend, m, ef_construction, ef_search, rescore) and checking
with another search is refused unless forced. ``rescore = c`` asks the graph for ``k x c``
candidates and re-scores them exactly against the stored vectors, returning the exact top k
among them (recall rises, the similarities returned are exact ones).

The graph is built on one thread: faiss would otherwise insert rows in parallel and the graph,
hence the results, would depend on timing. Why faiss (against usearch): docs/stores.md. Needs
the ``hnsw`` extra; nothing here imports faiss until a graph is built or loaded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ragbound.embedders.base import Similarity
from ragbound.errors import ArtifactError, InputError
from ragbound.stores.base import Hits, QueryKind, SearchInfo, query_vectors, top_k_rows
from ragbound.stores.exact import ExactStore, widened

BACKEND = "faiss-hnsw"
DEFAULT_M = 16
DEFAULT_EF_CONSTRUCTION = 128
DEFAULT_EF_SEARCH = 64
MAX_M = 256
MAX_EF = 1000  # the bound pgvector puts on hnsw.ef_search, kept for one --ef-search range
MAX_RESCORE = 64
GraphPrecision = Literal["float32", "float16"]
GRAPH_PRECISIONS: tuple[GraphPrecision, ...] = ("float32", "float16")
INSTALL_HINT = "install the hnsw extra: pip install 'ragbound[hnsw]'"
# Rows given to faiss at a time while building: a float16 knowledge base's rows are widened to
# float32 one block at a time instead of all at once (a million 384-d rows: 1.5 GB).
ADD_ROWS = 65_536


class HnswParams(BaseModel):
    """How the graph is built (``m`` links per node, ``ef_construction`` candidates while
    inserting, ``precision`` of the vectors the graph keeps) and searched (``ef_search``
    candidates per query, at least k; ``rescore`` c >= 1 fetches k x c candidates and
    re-scores them exactly, 0 = off). Recorded in the manifest.

    A float16 graph keeps its own copy of the vectors in half the memory; the similarities
    it returns are then off by about 1e-4, unless re-scored from the float32 vectors.
    """

    model_config = ConfigDict(frozen=True)

    m: int = Field(DEFAULT_M, ge=2, le=MAX_M)
    ef_construction: int = Field(DEFAULT_EF_CONSTRUCTION, ge=1, le=MAX_EF)
    ef_search: int = Field(DEFAULT_EF_SEARCH, ge=1, le=MAX_EF)
    rescore: int = Field(0, ge=0, le=MAX_RESCORE)
    precision: GraphPrecision = "float32"

    def same_graph(self, other: HnswParams) -> bool:
        """True when a graph built with ``other`` is the one these parameters build."""
        mine = (self.m, self.ef_construction, self.precision)
        return mine == (other.m, other.ef_construction, other.precision)


def hnsw_params(
    m: int = DEFAULT_M,
    ef_construction: int = DEFAULT_EF_CONSTRUCTION,
    ef_search: int = DEFAULT_EF_SEARCH,
    rescore: int = 0,
    precision: str = "float32",
) -> HnswParams:
    """Checked :class:`HnswParams`; a value out of range is an InputError naming it."""
    if precision not in GRAPH_PRECISIONS:
        raise InputError(
            f"precision must be one of {', '.join(GRAPH_PRECISIONS)}, got {precision!r}"
        )
    limits = {
        "m": (m, 2, MAX_M),
        "ef_construction": (ef_construction, 1, MAX_EF),
        "ef_search": (ef_search, 1, MAX_EF),
        "rescore": (rescore, 0, MAX_RESCORE),
    }
    for name, (value, low, high) in limits.items():
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise InputError(f"{name} must be an integer in {low}..{high}, got {value!r}")
        if not low <= value <= high:
            raise InputError(f"{name} must be in {low}..{high}, got {value}")
    return HnswParams(
        m=m,
        ef_construction=ef_construction,
        ef_search=ef_search,
        rescore=rescore,
        precision=precision,  # type: ignore[arg-type]
    )


def hnsw_info(params: HnswParams, similarity: Similarity) -> SearchInfo:
    """What :meth:`HnswStore.describe` reports for these parameters (approximate)."""
    return SearchInfo(
        backend=BACKEND, exact=False, similarity=similarity, parameters=params.model_dump()
    )


def require_faiss() -> Any:
    """The faiss module; InputError naming the extra when it is not installed."""
    try:
        import faiss
    except ImportError as exc:
        raise InputError(f"an HNSW search needs faiss: {INSTALL_HINT}") from exc
    return faiss


@contextmanager
def _one_thread(faiss: Any) -> Iterator[None]:
    """Build with one OpenMP thread (a deterministic graph), then restore the setting."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


class HnswStore:
    """Approximate maximum inner product search over an HNSW graph (faiss ``IndexHNSWFlat``).

    A vector :class:`~ragbound.stores.Retriever`. ``vectors`` are the rows (float32, kept for
    exact re-scoring and for the rare query the graph answers with fewer than k rows, which
    is answered exactly); ``graph`` the ``.npy`` file of a graph over exactly these rows
    (None: build one). ``describe()`` reports ``exact=False`` with the parameters.
    """

    query_kind: QueryKind = "vector"

    def __init__(
        self,
        vectors: np.ndarray,
        *,
        similarity: Similarity,
        params: HnswParams | None = None,
        graph: Path | None = None,
    ):
        self._exact = ExactStore(vectors, similarity=similarity)
        self.params = params or HnswParams()
        self._index = self._load(graph) if graph is not None else self._build()

    # ----------------------------------------------------------------- the graph
    def _build(self) -> Any:
        faiss = require_faiss()
        inner_product = faiss.METRIC_INNER_PRODUCT
        if self.params.precision == "float16":
            index = faiss.IndexHNSWSQ(
                self.dimension, faiss.ScalarQuantizer.QT_fp16, self.params.m, inner_product
            )
        else:
            index = faiss.IndexHNSWFlat(self.dimension, self.params.m, inner_product)
        index.hnsw.efConstruction = self.params.ef_construction
        vectors = self._exact.vectors
        with _one_thread(faiss):
            index.train(_float32(vectors[:ADD_ROWS]))  # neither kind needs statistics
            for start in range(0, len(vectors), ADD_ROWS):
                index.add(_float32(vectors[start : start + ADD_ROWS]))
        return index

    def _load(self, graph: Path) -> Any:
        """The graph streamed from a ``.npy`` file of its bytes (no copy of the file in memory
        beside the graph)."""
        try:
            index = _read_graph_file(require_faiss(), graph)
        except RuntimeError as exc:
            raise ArtifactError(f"the HNSW graph is corrupt: {exc}") from exc
        if index.ntotal != len(self) or index.d != self.dimension:
            raise ArtifactError(
                f"the HNSW graph holds {index.ntotal} rows of {index.d} dimensions, the "
                f"knowledge base {len(self)} of {self.dimension}: rebuild it (ragbound index)"
            )
        return index

    def extend(self, vectors: np.ndarray) -> HnswStore:
        """A store over these rows plus ``vectors``: the graph grows by the new rows only."""
        grown = HnswStore.__new__(HnswStore)
        grown._exact = ExactStore(
            np.concatenate([self._exact.vectors, vectors]), similarity=self.similarity
        )
        grown.params = self.params
        faiss = require_faiss()
        grown._index = faiss.clone_index(self._index)  # this store stays searchable as it was
        with _one_thread(faiss):
            grown._index.add(np.ascontiguousarray(vectors, dtype=np.float32))
        return grown

    def with_search(self, params: HnswParams) -> HnswStore:
        """The same graph searched with other ``ef_search`` / ``rescore`` (same m,
        ef_construction and precision, else InputError: that is another graph)."""
        if not self.params.same_graph(params):
            raise InputError(
                "m, ef_construction and precision shape the graph: another graph is needed "
                "for them (build a new store)"
            )
        other = HnswStore.__new__(HnswStore)
        other._exact, other._index, other.params = self._exact, self._index, params
        return other

    def write_graph(self, handle: BinaryIO) -> None:
        """Write the graph to ``handle`` as a 1-D uint8 ``.npy`` file of its serialised bytes,
        streamed: no serialised copy beside the graph in memory (a million-row graph is about
        a gigabyte)."""
        faiss = require_faiss()
        sizes: list[int] = []
        faiss.write_index(self._index, faiss.PyCallbackIOWriter(lambda b: sizes.append(len(b))))
        header = {"descr": "|u1", "fortran_order": False, "shape": (sum(sizes),)}
        np.lib.format.write_array_header_1_0(handle, header)
        faiss.write_index(self._index, faiss.PyCallbackIOWriter(handle.write))

    @property
    def vectors(self) -> np.ndarray:
        """The rows, (n, dimension) float32 (what re-scoring computes against)."""
        return self._exact.vectors

    # --------------------------------------------------------------- the protocol
    def __len__(self) -> int:
        return len(self._exact)

    @property
    def dimension(self) -> int:
        return self._exact.dimension

    @property
    def similarity(self) -> Similarity:
        return self._exact.similarity

    def describe(self) -> SearchInfo:
        return hnsw_info(self.params, self.similarity)

    def search(self, queries: np.ndarray, k: int) -> Hits:
        """Top-k rows per query found through the graph, similarity descending: faiss's inner
        products, or with ``rescore`` c the exact ones of the k x c candidates (ties by the
        lower row)."""
        queries = query_vectors(queries, k, len(self), self.dimension)
        fetch = min(len(self), k * max(1, self.params.rescore))
        # faiss keeps ef_search candidates even when asked for more rows: widen the beam to
        # what is fetched, else k x c candidates would be no better than the top k
        self._index.hnsw.efSearch = max(self.params.ef_search, fetch)
        sims, rows = self._index.search(queries, fetch)
        if self.params.rescore:
            sims, rows = rescore(queries, self._exact.vectors, rows, k)
        hits = Hits(similarities=sims[:, :k].astype(np.float32), indices=rows[:, :k])
        return self._fill_short(queries, hits, k)

    def _fill_short(self, queries: np.ndarray, hits: Hits, k: int) -> Hits:
        """Queries the graph answered with fewer than k rows (row -1) are searched exactly."""
        short = (hits.indices < 0).any(axis=1)
        if not short.any():
            return Hits(hits.similarities, hits.indices.astype(np.int64))
        exact = self._exact.search(queries[short], k)
        sims, rows = hits.similarities.copy(), hits.indices.astype(np.int64)
        sims[short], rows[short] = exact.similarities, exact.indices
        return Hits(sims, rows)


def _float32(block: np.ndarray) -> np.ndarray:
    """Rows as the C-contiguous float32 faiss takes (no copy when they already are)."""
    if block.dtype == np.float32:
        return np.ascontiguousarray(block)
    return np.ascontiguousarray(widened(block, np.dtype(np.float32)))


def _read_graph_file(faiss: Any, path: Path) -> Any:
    """Read a graph saved as a 1-D uint8 ``.npy`` file, streaming its bytes into faiss."""
    with path.open("rb") as handle:
        try:
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
            else:
                shape, _, dtype = np.lib.format.read_array_header_2_0(handle)
        except ValueError as exc:
            raise ArtifactError(f"HNSW graph {path} is corrupt: {exc}") from exc
        if dtype != np.uint8 or len(shape) != 1:
            raise ArtifactError(f"{path}: expected a uint8 vector, found {dtype} {shape}")
        return faiss.read_index(faiss.PyCallbackIOReader(handle.read))


def rescore(
    queries: np.ndarray, vectors: np.ndarray, candidates: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner products of each query with its candidate rows, top ``k`` kept.

    ``candidates`` (n, c) are row numbers (-1 = none); the result is (similarities, rows),
    each (n, min(k, c)), similarity descending, ties by the lower row, -1 rows last.
    """
    valid = candidates >= 0
    rows = np.where(valid, candidates, 0)
    # sort candidates by row first: top_k_rows breaks ties by position, so by the lower row
    order = np.argsort(np.where(valid, rows, np.iinfo(np.int64).max), axis=1, kind="stable")
    rows = np.take_along_axis(rows, order, axis=1)
    valid = np.take_along_axis(valid, order, axis=1)
    sims = np.einsum("nd,ncd->nc", queries, vectors[rows], dtype=np.float32)
    sims = np.where(valid, sims, -np.inf).astype(np.float32)
    top, columns = top_k_rows(sims, min(k, sims.shape[1]))
    chosen = np.take_along_axis(rows, columns, axis=1)
    chosen = np.where(np.isfinite(top), chosen, -1)
    return top, chosen.astype(np.int64)
