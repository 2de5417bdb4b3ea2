"""Wall-time helpers shared by the benchmark parts: one call timed, two calls paired, and check
vs embed latency."""

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


def interleaved_ms(
    calls: Sequence[Callable[[str], object]], queries: Sequence[str]
) -> list[list[float]]:
    """Wall time (ms) of each call on each query, the calls interleaved per query so all see
    the same load; one list per call."""
    times: list[list[float]] = [[] for _ in calls]
    for query in queries:
        for call, out in zip(calls, times, strict=True):
            out.append(timed(lambda c=call, q=query: c(q))[1] * 1e3)
    return times


def p50_p99(name: str, values_ms: Sequence[float]) -> dict[str, float]:
    """``{name}_p50_ms`` and ``{name}_p99_ms`` of a list of times."""
    return {f"{name}_p{q}_ms": float(np.percentile(values_ms, q)) for q in (50, 99)}


def paired_latency(
    bare: Callable[[str], object], guarded: Callable[[str], object], queries: Sequence[str]
) -> dict:
    """Per-query wall time (ms) of two callables, interleaved, after one warm-up each."""
    bare(queries[0])
    guarded(queries[0])
    bare_ms, guarded_ms = interleaved_ms([bare, guarded], queries)
    stats = p50_p99("bare", bare_ms) | p50_p99("guarded", guarded_ms)
    ratio = stats["guarded_p50_ms"] / stats["bare_p50_ms"]
    extra = float(np.median(np.subtract(guarded_ms, bare_ms)))
    return {"n": len(queries), **stats, "ratio_p50": ratio, "extra_p50_ms": extra}


def latency(guard: Guard, queries: Sequence[str]) -> dict:
    """Per-query check vs embed-only wall time, interleaved so both see the same load."""
    embedder = guard.kb.embedder
    guard.check(queries[0])  # warm-up: model load, detector fit, index build
    embed_ms, check_ms = interleaved_ms([embedder.encode_one, guard.check], queries)
    stats = p50_p99("check", check_ms) | p50_p99("embed", embed_ms)
    return {"n": len(queries), **stats, "ratio_p50": stats["check_p50_ms"] / stats["embed_p50_ms"]}
