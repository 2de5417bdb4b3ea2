"""Where the expensive part of scoring many queries runs: this process or a Ray cluster.

Scoring a query log is embedding plus top-k search for every query; the statistics and
p-values after it are cheap. A :data:`Search` does the expensive part, so ``ragbound test-log``
and ``ragbound shift`` run the same code on either engine and only the search moves:

- ``local``: this process, in batches (the reference);
- ``ray``: ``ray.data`` with a pool of actors that each load the knowledge base and its
  embedder once (``pip install 'ragbound[ray]'``). Same batches, same results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

from ragbound.errors import InputError
from ragbound.knowledge.query import SEARCH_BATCH

if TYPE_CHECKING:
    from ragbound.detect.guard import Guard

Engine = Literal["local", "ray"]
ENGINES: tuple[Engine, ...] = ("local", "ray")

Search = Callable[[Sequence[str]], np.ndarray]
"""The rows the test scores for each query, in query order, shape (n, k): the top-k
similarities (higher = closer), or a reranking calibration's relevance logits (local only)."""

__all__ = ["ENGINES", "SEARCH_BATCH", "Engine", "Search", "make_search"]


def make_search(
    guard: Guard,
    engine: Engine = "local",
    *,
    address: str | None = None,
    workers: int = 2,
    progress: bool = False,
    statistic: str | None = None,
) -> Search:
    """The guard's search on ``engine`` (``address`` and ``workers``: Ray only). Both search
    in batches of :data:`SEARCH_BATCH` queries (the local engine through the guard, with its
    reranker when the calibration has one). The combined ``statistic`` (the calibration's
    when None) runs in this process only: it searches every indexed unit itself."""
    if engine == "local":
        if address is not None:
            raise InputError("--address needs --engine ray")
        return lambda queries: guard.search_rows(queries, progress=progress)
    if engine == "ray" and guard.is_learned(statistic):
        raise InputError(
            "the combined statistic searches every indexed unit in this process: use "
            "--engine local, or --statistic mss (or another) with --engine ray"
        )
    if engine == "ray" and guard.reranker is not None:
        raise InputError(
            "this calibration reranks with a cross-encoder, which runs in this process: use "
            "--engine local"
        )
    if engine == "ray":
        from ragbound.engines.ray_engine import RaySearch

        return RaySearch(
            guard.kb.path,
            guard.k,
            address=address,
            workers=workers,
            granularity=",".join(guard.kb.granularity),
            progress=progress,
        )
    raise InputError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
