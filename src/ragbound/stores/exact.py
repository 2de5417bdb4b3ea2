"""Exact inner-product search over vectors held in this process or memory-mapped from disk."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np

from ragbound.blas_threads import one_blas_thread
from ragbound.embedders.base import Similarity
from ragbound.errors import InputError
from ragbound.stores.base import Hits, QueryKind, SearchInfo, query_vectors, top_k_rows

# Queries are scored in blocks so a large batch never materialises n_queries x n_chunks at once.
_BLOCK_QUERIES = 256
# Stored rows are scored in blocks too, so one block of scores (256 x 65,536 float32 = 64 MB)
# and one block of rows converted to the search precision are all a search allocates,
# whatever the number of chunks.
BLOCK_ROWS = 65_536
# A batch of queries gets fewer rows per block: at most this many scores (16 MB of float32,
# plus top_k_rows's int64 partition of them) are held at once, whatever the batch size.
_SCORES_PER_BLOCK = 1 << 22
# Storage types searched without a full-size conversion: rows are widened block by block.
_NARROW = (np.dtype(np.float16),)
# Narrow rows widened at a time: the float32 copy (12 MB at 384 dimensions) is scored while it
# is still in cache, which matters more than the number of top-k merges.
WIDEN_ROWS = 8192


class ExactStore:
    """Brute-force maximum inner product search (exact, like faiss ``IndexFlatIP``).

    A :class:`~ragbound.stores.Retriever` over vectors: ``search`` takes an (n, dimension)
    matrix of query vectors. ``similarity`` names what the inner product is: ``cosine`` when
    the caller's vectors are unit length (every bundled embedder), ``dot`` otherwise.

    ``vectors`` is one (n, dimension) matrix or a sequence of them (parts, e.g. one per
    knowledge-base segment, whose rows follow each other). Parts already C-contiguous in the
    search ``precision`` are never copied, so a memory map stays on disk; float16 parts are
    widened a block at a time. Search keeps a running top-k over blocks of at most
    ``block_rows`` rows, so its memory does not grow with the rows; results equal one search
    over all rows (ties broken by the lower row).
    """

    query_kind: QueryKind = "vector"

    def __init__(
        self,
        vectors: np.ndarray | Sequence[np.ndarray],
        *,
        similarity: Similarity = "dot",
        precision: Literal["float32", "float64"] = "float32",
        block_rows: int = BLOCK_ROWS,
    ):
        if similarity == "bm25":
            raise InputError("an exact vector store scores by inner product, not bm25")
        if block_rows < 1:
            raise InputError(f"block_rows must be a positive integer, got {block_rows}")
        self._dtype = np.dtype(precision)
        self._parts = [_stored(part, self._dtype) for part in _as_parts(vectors)]
        self._similarity: Similarity = similarity
        self._block_rows = block_rows

    def __len__(self) -> int:
        return sum(int(part.shape[0]) for part in self._parts)

    @property
    def dimension(self) -> int:
        return int(self._parts[0].shape[1])

    @property
    def similarity(self) -> Similarity:
        return self._similarity

    @property
    def vectors(self) -> np.ndarray:
        """All rows as one matrix in their storage type: the matrix given when there was one
        part (no copy), a concatenation in memory otherwise."""
        if len(self._parts) == 1:
            return self._parts[0]
        return np.concatenate(self._parts)

    def describe(self) -> SearchInfo:
        parameters: dict[str, str | int | float | bool] = {"precision": str(self._dtype)}
        storage = {str(part.dtype) for part in self._parts} - {str(self._dtype)}
        if storage:  # rows stored narrower than they are searched (e.g. float16)
            parameters["storage"] = ",".join(sorted(storage))
        return SearchInfo(
            backend="exact", exact=True, similarity=self._similarity, parameters=parameters
        )

    def search(self, queries: np.ndarray, k: int) -> Hits:
        """Top-k inner products for each query row; rows sorted by similarity descending."""
        queries = query_vectors(queries, k, len(self), self.dimension, self._dtype)
        sims = np.empty((len(queries), k), dtype=self._dtype)
        idx = np.empty((len(queries), k), dtype=np.int64)
        # a small search (one query, up to ~43k rows of 384) runs in this thread: OpenBLAS's
        # workers, woken for it, waited on ONNX Runtime's after an embedding
        with one_blas_thread(len(queries) * len(self) * self.dimension):
            for start in range(0, len(queries), _BLOCK_QUERIES):
                block = slice(start, start + _BLOCK_QUERIES)
                sims[block], idx[block] = self._top_k(queries[block], k)
        return Hits(similarities=sims, indices=idx)

    def _top_k(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Running top-k over the row blocks. The kept candidates come first in each merge and
        hold lower rows than the new block's, so ``top_k_rows``'s tie-break by the lower
        column is the tie-break by the lower row."""
        best = np.empty((len(queries), 0), dtype=self._dtype)
        rows = np.empty((len(queries), 0), dtype=np.int64)
        for offset, block in self._row_blocks(len(queries)):
            top, columns = top_k_rows(queries @ block.T, min(k, len(block)))
            merged = np.concatenate([best, top], axis=1)
            merged_rows = np.concatenate([rows, columns + offset], axis=1)
            best, keep = top_k_rows(merged, min(k, merged.shape[1]))
            rows = np.take_along_axis(merged_rows, keep, axis=1)
        return best, rows

    def _row_blocks(self, n_queries: int) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, rows in the search precision) for every block of every part; narrow
        (float16) parts are widened ``WIDEN_ROWS`` rows at a time."""
        size = max(1, min(self._block_rows, _SCORES_PER_BLOCK // max(1, n_queries)))
        offset = 0
        for part in self._parts:
            narrow = part.dtype != self._dtype
            step = min(size, WIDEN_ROWS) if narrow else size
            for start in range(0, len(part), step):
                block = part[start : start + step]
                yield offset + start, widened(block, self._dtype) if narrow else block
            offset += len(part)


def widened(block: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``block`` converted to ``dtype`` exactly (float16 to float32 loses nothing).

    numpy converts float16 one value at a time (about 1.5 ns each here: a million 384-d rows
    took 5x the float32 search); torch's conversion is vectorised (F16C) and equally exact,
    so it is used when the process has loaded torch anyway.
    """
    torch = sys.modules.get("torch")
    # only when torch is loaded already: a process embedding with ONNX Runtime (a one-query
    # check, the service) does not pay a second of importing it for this
    if block.dtype != np.float16 or dtype != np.float32 or torch is None:
        return block.astype(dtype)
    quiet = block.flags.writeable or _warned_once
    source = torch.from_numpy(block) if quiet else _tensor_quietly(torch, block)
    return source.to(torch.float32).numpy()


_warned_once = False


def _tensor_quietly(torch: Any, block: np.ndarray) -> Any:
    """``torch.from_numpy`` without its warning that a read-only (memory-mapped) array gives
    a writable tensor: the tensor is only read here. torch says it once per process, so only
    the first conversion needs the warning filtered."""
    global _warned_once
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        tensor = torch.from_numpy(block)
    _warned_once = True
    return tensor


def _as_parts(vectors: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    parts = [vectors] if isinstance(vectors, np.ndarray) else list(vectors)
    if not parts:
        raise InputError("an exact vector store needs at least one matrix of vectors")
    for part in parts:
        if part.ndim != 2:
            raise InputError(f"vectors must be 2-D (n, dim), got shape {part.shape}")
    if len({part.shape[1] for part in parts}) > 1:
        shapes = ", ".join(str(part.shape) for part in parts)
        raise InputError(f"vector parts must share one dimension, got shapes {shapes}")
    return parts


def _stored(part: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The part as searched: float16 kept narrow, anything else in ``dtype``; C-contiguous
    (no copy when it already is, so a memory map stays a memory map)."""
    keep = part.dtype if part.dtype in _NARROW and dtype.itemsize > part.dtype.itemsize else dtype
    return np.ascontiguousarray(np.asarray(part), dtype=keep)
