"""The Ray engine: top-k search of many queries on ``ray.data`` with a pool of actors.

Each actor loads the knowledge base (and so its embedder) once, then searches whole batches of
:data:`~ragbound.knowledge.query.SEARCH_BATCH` queries, the same batches the local engine
searches, so both engines give the same similarities. The knowledge-base folder must be
readable at the same path on every node of the cluster (a shared or copied folder).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragbound.errors import InputError
from ragbound.knowledge.query import SEARCH_BATCH

# Ray would otherwise report usage to its authors over the network.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
CONNECT_TIMEOUT_S = 5.0


def connect(address: str | None, workers: int) -> None:
    """Join the Ray cluster at ``address`` (``auto``: the one started on this machine with
    ``ray start``; ``HOST:PORT`` or ``ray://HOST:PORT``), or start a local one of ``workers``
    CPUs when None. An address that does not answer is an InputError within seconds (Ray
    itself would retry for minutes)."""
    try:
        import ray
    except ImportError as exc:
        raise InputError(
            f"--engine ray needs Ray ({exc.name} is missing): pip install 'ragbound[ray]'"
        ) from None
    if ray.is_initialized():
        return
    if address is not None and address != "auto":
        _check_answers(address)
    try:
        ray.init(
            address=address,
            num_cpus=workers if address is None else None,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    except ConnectionError as exc:
        raise InputError(f"--address {address}: {exc}") from None
    for name in ("ray", "ray.data"):  # progress lines only when asked for
        logging.getLogger(name).setLevel(logging.WARNING)


def _check_answers(address: str) -> None:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"--address {address!r}: expected auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise InputError(
            f"--address {address}: no Ray cluster answers there ({exc.strerror or exc}); start "
            "one with `ray start --head` or check the address"
        ) from None


class SearchActor:
    """One actor: the knowledge base loaded once, then batches of queries searched."""

    def __init__(self, kb_dir: str, k: int, threads: int, granularity: str = "chunk"):
        from ragbound.embedders import set_cpu_threads
        from ragbound.knowledge import KnowledgeBase

        set_cpu_threads(threads)
        self.kb = KnowledgeBase.load(kb_dir).at_granularity(granularity)
        self.k = k

    def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        rows, sims = [], []
        for start, queries in zip(batch["start"], batch["queries"], strict=True):
            found = self.kb.search([str(q) for q in queries], self.k).similarities
            rows.append(np.arange(int(start), int(start) + len(queries)))
            sims.append(found)
        return {"row": np.concatenate(rows), "similarities": np.concatenate(sims)}


class RaySearch:
    """A :data:`~ragbound.engines.Search` on Ray: ``workers`` actors of one CPU each.

    ``threads``: torch threads per actor (1: each actor is one core's worth of work);
    ``granularity``: the units the knowledge base is searched by (the calibration's).
    """

    def __init__(
        self,
        kb_dir: str | Path,
        k: int,
        *,
        address: str | None = None,
        workers: int = 2,
        threads: int = 1,
        granularity: str = "chunk",
        progress: bool = False,
    ):
        connect(address, workers)
        self.granularity = granularity
        self.kb_dir = str(Path(kb_dir).resolve())
        self.k = k
        self.workers = workers
        self.threads = threads
        self.progress = progress

    def __call__(self, queries: Sequence[str]) -> np.ndarray:
        import ray.data

        context = ray.data.DataContext.get_current()
        # Ray's bars redraw in place: drawn on a terminal only, never into a log
        context.enable_progress_bars = self.progress and sys.stderr.isatty()
        batches = [
            {"start": start, "queries": list(queries[start : start + SEARCH_BATCH])}
            for start in range(0, len(queries), SEARCH_BATCH)
        ]
        if not batches:
            return np.empty((0, self.k), dtype=np.float32)
        searched = ray.data.from_items(batches).map_batches(
            SearchActor,
            fn_constructor_args=(self.kb_dir, self.k, self.threads, self.granularity),
            batch_size=1,  # one item is one whole batch of queries
            concurrency=min(self.workers, len(batches)),
            num_cpus=1,
            batch_format="numpy",
        )
        out = np.empty((len(queries), self.k), dtype=np.float32)
        for part in searched.iter_batches(batch_size=None, batch_format="numpy"):
            out[part["row"]] = part["similarities"]
        return out
