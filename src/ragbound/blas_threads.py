"""OpenBLAS held to one thread around products too small to share out.

A one-query exact search multiplies one row by every stored row: 0.3 ms on one core. OpenBLAS
shares such a product out to a thread per core, and right after an ONNX Runtime run those
threads waited on the runtime's own (a default ``Gate.decide`` took 20 ms where the embedding
took 13). Held to one thread, the product runs in the calling thread. A product of several
queries (``gemm``) gives the same numbers on any thread count; one query's (``gemv``) may move
a few similarities in their last bit (3e-8), as they already did between machines.

OpenBLAS's pthreads builds (numpy's, scipy's) have only a process-wide count, and threadpoolctl
ignores a limit set from any Python thread but the first, so the count is set through
OpenBLAS's own functions and the hold is counted under one lock: the first of concurrent small
products sets one thread, the last restores the count, and :func:`setting_counts` changes the
count to restore under the same lock. With another BLAS :func:`one_blas_thread` does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# Products below this many multiply-adds run on one thread: one query against up to ~43,000
# rows of 384 dimensions (a batch of 8 against ~5,000). Measured on 2 shared cores, a product
# alone (one query, interleaved, 60 runs each): one thread took 0.13 x the pool's time at 2^22.6,
# 0.8 x at 2^23.6, 1.9 x at 2^24.6 (the pool's floor there was ~14 ms: waiting for a core).
SMALL_PRODUCT = 1 << 24

# the symbol affixes of OpenBLAS builds: plain, scipy-openblas (numpy >= 2), and ILP64 builds
_PREFIXES = ("", "scipy_")
_SUFFIXES = ("", "64_", "_64")


@dataclass(frozen=True)
class Pool:
    """One loaded OpenBLAS: its thread count's getter and setter (process-wide)."""

    filepath: str
    get: Callable[[], int]
    set: Callable[[int], None]


_lock = threading.Lock()
_holders = 0  # small products running now, in any thread
_restore: list[int] = []  # each pool's count before the first of them
_pools: list[Pool] | None = None  # found on first use (numpy's is loaded by then)


def _reset_after_fork() -> None:
    # a fork copies the lock as another thread may have held it, and no product runs in the
    # child: start afresh (the pools' libraries stay loaded at the same addresses)
    global _lock, _holders
    _lock = threading.Lock()
    _holders = 0
    _restore.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def openblas_pools() -> list[Pool]:
    """The OpenBLAS libraries loaded in this process (found by threadpoolctl), each with its
    count's functions called directly; found once."""
    global _pools
    if _pools is None:
        _pools = _find_pools()
    return _pools


def _find_pools() -> list[Pool]:
    from threadpoolctl import ThreadpoolController

    pools = []
    for lib in ThreadpoolController().select(internal_api="openblas").lib_controllers:
        if getattr(lib, "threading_layer", "pthreads") == "openmp":
            continue  # its count is OpenMP's, per thread already
        pool = _pool(str(lib.filepath))
        if pool is not None:
            pools.append(pool)
    return pools


def _pool(filepath: str) -> Pool | None:
    try:
        dynlib = ctypes.CDLL(filepath)
    except OSError:
        return None
    for prefix in _PREFIXES:
        for suffix in _SUFFIXES:
            get = getattr(dynlib, f"{prefix}openblas_get_num_threads{suffix}", None)
            put: Any = getattr(dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
            if get is not None and put is not None:
                get.restype, get.argtypes = ctypes.c_int, []
                put.restype, put.argtypes = None, [ctypes.c_int]
                return Pool(filepath, get, put)
    return None


@contextlib.contextmanager
def one_blas_thread(multiply_adds: int) -> Iterator[None]:
    """Hold OpenBLAS to one thread while a product of ``multiply_adds`` runs, when it is
    below :data:`SMALL_PRODUCT` (else, or without OpenBLAS, nothing is changed)."""
    if multiply_adds >= SMALL_PRODUCT or not openblas_pools():
        yield
        return
    _hold()
    try:
        yield
    finally:
        _release()


def _hold() -> None:
    global _holders
    with _lock:
        if _holders == 0:
            _restore[:] = [pool.get() for pool in openblas_pools()]
            for pool, count in zip(openblas_pools(), _restore, strict=True):
                if count != 1:
                    pool.set(1)
        _holders += 1


def _release() -> None:
    global _holders
    with _lock:
        _holders -= 1
        if _holders == 0:
            for pool, count in zip(openblas_pools(), _restore, strict=True):
                if count != 1:
                    pool.set(count)


def setting_counts(apply: Callable[[], object]) -> None:
    """Run ``apply`` (which sets thread counts, e.g. threadpoolctl's ``threadpool_limits``) so
    that small products running meanwhile leave the counts it set, not the ones before it."""
    with _lock:
        apply()
        if _holders and _pools:
            _restore[:] = [pool.get() for pool in _pools]
            for pool in _pools:
                pool.set(1)


def held() -> bool:
    """Whether a small product holds OpenBLAS to one thread now."""
    return _holders > 0
