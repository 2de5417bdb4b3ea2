"""The HNSW backing's record and graph file: a local knowledge base searched through a graph.

Selected at index time (``ragbound index ... --search hnsw``); the manifest's ``backing`` field
records the parameters, the graph file and its SHA-256. The graph is saved beside the
segments::

    hnsw/<random>.graph.npy     faiss's serialised graph (uint8), covering every chunk

Like a segment, a graph is written under a name no committed manifest uses, before the
manifest replace that commits it, and the graphs no manifest names are removed after each
commit, so a crash leaves the previous knowledge base whole. ``add`` grows the committed
graph by the new rows (no rebuild); changing ``ef_search`` or ``rescore`` keeps the graph,
changing ``m`` or ``ef_construction`` builds another.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Literal

import numpy as np

from ragbound.artifacts import check_sha256, file_sha256, write_atomically
from ragbound.embedders.base import Similarity
from ragbound.knowledge.layout import GRAPH_DIR, GRAPH_SUFFIX
from ragbound.knowledge.manifest import BackingEntry
from ragbound.stores.hnsw import HnswParams, HnswStore


class HnswIndex(BackingEntry):
    """The manifest's record of an HNSW search (``backing`` of kind ``hnsw``): its parameters
    and the committed graph (``graph`` a file name in ``hnsw/``, None before the first save;
    ``n_rows`` it covers)."""

    kind: Literal["hnsw"] = "hnsw"
    params: HnswParams = HnswParams()
    graph: str | None = None
    n_rows: int = 0
    graph_sha256: str | None = None

    def searched_with(self, params: HnswParams) -> HnswIndex:
        """This record with other parameters; the graph is kept when it is the same one."""
        if self.params.same_graph(params):
            return self.model_copy(update={"params": params})
        return HnswIndex(params=params)


def open_store(
    root: Path | None,
    index: HnswIndex,
    vectors: np.ndarray,
    similarity: Similarity,
    previous: HnswStore | None = None,
) -> HnswStore:
    """An :class:`HnswStore` over ``vectors``, reusing the most graph it can.

    ``previous`` (a store over a prefix of these rows, e.g. before an ``add``) or else the
    committed graph in ``root`` is grown by the rows it lacks; otherwise the graph is built.
    """
    base = previous if _covers_prefix(previous, index.params, vectors) else None
    if base is None and root is not None and index.graph is not None:
        base = HnswStore(
            vectors[: index.n_rows],
            similarity=similarity,
            params=index.params,
            graph=_read_graph(root, index),
        )
    if base is None:
        return HnswStore(vectors, similarity=similarity, params=index.params)
    base = base.with_search(index.params)
    return base if len(base) == len(vectors) else base.extend(vectors[len(base) :])


def _covers_prefix(store: HnswStore | None, params: HnswParams, vectors: np.ndarray) -> bool:
    if store is None or not store.params.same_graph(params) or len(store) > len(vectors):
        return False
    return bool(np.array_equal(store.vectors, vectors[: len(store)]))


def _read_graph(root: Path, index: HnswIndex) -> Path:
    """The committed graph file, its SHA-256 checked (the store streams it from disk)."""
    path = root / GRAPH_DIR / str(index.graph)
    check_sha256(path, index.graph_sha256, "HNSW graph")
    return path


def has_graph(target: Path, index: HnswIndex, n_rows: int) -> bool:
    """True when ``target`` already holds the graph ``index`` names, over ``n_rows`` rows
    (only the search parameters changed: nothing to write)."""
    return (
        index.graph is not None
        and index.n_rows == n_rows
        and (target / GRAPH_DIR / index.graph).is_file()
    )


def save_graph(target: Path, store: HnswStore, index: HnswIndex) -> HnswIndex:
    """Write ``store``'s graph under a fresh name in ``target/hnsw``; the record naming it."""
    folder = target / GRAPH_DIR
    name = f"{secrets.token_hex(8)}{GRAPH_SUFFIX}"
    while (folder / name).exists():
        name = f"{secrets.token_hex(8)}{GRAPH_SUFFIX}"
    write_atomically(folder / name, store.write_graph)
    return index.model_copy(
        update={"graph": name, "n_rows": len(store), "graph_sha256": file_sha256(folder / name)}
    )


def remove_unreferenced_graphs(target: Path, index: HnswIndex | None) -> None:
    """Delete the graphs (and crashed writes' temporary files) the manifest does not name."""
    folder = target / GRAPH_DIR
    if not folder.is_dir():
        return
    keep = None if index is None else index.graph
    for path in folder.iterdir():
        if path.is_file() and path.name != keep:
            path.unlink(missing_ok=True)
