"""Wall-time helpers shared by the benchmark parts: one call timed, and check vs embed latency."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from ragbound.detect import Guard

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()`` and the seconds it took."""
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def latency(guard: Guard, queries: Sequence[str]) -> dict:
    """Per-query check vs embed-only wall time, interleaved so both see the same load."""
    embedder = guard.kb.embedder
    guard.check(queries[0])  # warm-up: model load, detector fit, index build
    check_ms, embed_ms = [], []
    for query in queries:
        _, t_embed = timed(lambda q=query: embedder.encode_one(q))
        _, t_check = timed(lambda q=query: guard.check(q))
        embed_ms.append(t_embed * 1e3)
        check_ms.append(t_check * 1e3)
    pct = lambda xs, q: float(np.percentile(xs, q))  # noqa: E731
    return {
        "n": len(queries),
        "check_p50_ms": pct(check_ms, 50),
        "check_p99_ms": pct(check_ms, 99),
        "embed_p50_ms": pct(embed_ms, 50),
        "embed_p99_ms": pct(embed_ms, 99),
        "ratio_p50": pct(check_ms, 50) / pct(embed_ms, 50),
    }
