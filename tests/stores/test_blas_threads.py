"""Small exact searches hold OpenBLAS to one thread and restore its count after (issue 40); a
batch's matrix product gives the same numbers held as shared out."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

from ragbound import blas_threads
from ragbound.blas_threads import one_blas_thread, openblas_pools, setting_counts
from ragbound.stores import ExactStore
from ragbound.stores import exact as exact_module
from ragbound.stores.base import Hits

POOLED = 2  # the count the tests start from: more than one, so a hold is visible


def counts() -> list[int]:
    return [pool.get() for pool in openblas_pools()]


@pytest.fixture
def pools() -> Iterator[None]:
    """Every OpenBLAS pool at POOLED threads for the test, its count put back after."""
    if not openblas_pools():
        pytest.skip("numpy is not linked to OpenBLAS here: nothing to hold")
    before = counts()
    for pool in openblas_pools():
        pool.set(POOLED)
    yield
    assert not blas_threads.held()
    for pool, count in zip(openblas_pools(), before, strict=True):
        pool.set(count)


def test_numpy_s_openblas_is_found_through_its_own_functions(pools: None):
    assert counts() == [POOLED] * len(openblas_pools())
    assert any("openblas" in pool.filepath.lower() for pool in openblas_pools())


def test_a_small_product_runs_on_one_thread_and_the_count_is_restored(pools: None):
    with one_blas_thread(blas_threads.SMALL_PRODUCT - 1):
        assert blas_threads.held()
        assert set(counts()) == {1}
    assert counts() == [POOLED] * len(openblas_pools())


def test_a_large_product_keeps_the_pool(pools: None):
    with one_blas_thread(blas_threads.SMALL_PRODUCT):
        assert not blas_threads.held()
        assert counts() == [POOLED] * len(openblas_pools())


def test_the_last_of_overlapping_holds_restores_the_count(pools: None):
    entered, release = threading.Event(), threading.Event()
    seen: list[list[int]] = []

    def other() -> None:
        with one_blas_thread(1):
            entered.set()
            release.wait(timeout=30)
            seen.append(counts())

    thread = threading.Thread(target=other)
    with one_blas_thread(1):
        thread.start()
        assert entered.wait(timeout=30)
    # this thread's hold ended first: the other's product still runs on one thread
    assert set(counts()) == {1} and blas_threads.held()
    release.set()
    thread.join(timeout=30)
    assert set(seen[0]) == {1}
    assert counts() == [POOLED] * len(openblas_pools())


def test_a_count_set_during_a_hold_is_the_one_left_after(pools: None):
    def limit_to_three() -> None:
        for pool in openblas_pools():
            pool.set(3)

    with one_blas_thread(1):
        setting_counts(limit_to_three)  # what set_cpu_threads(3) does, from any thread
        assert set(counts()) == {1}  # the running product keeps its one thread
    assert counts() == [3] * len(openblas_pools())


def test_a_count_set_with_no_hold_is_applied_as_given(pools: None):
    setting_counts(lambda: [pool.set(3) for pool in openblas_pools()])
    assert counts() == [3] * len(openblas_pools())


def _searches(monkeypatch: pytest.MonkeyPatch, small: int) -> tuple[list[list[int]], Hits]:
    """One search of 3 queries over 3,000 rows with SMALL_PRODUCT = ``small``, and the pool
    counts seen while its products ran."""
    rng = np.random.default_rng(40)
    store = ExactStore(rng.normal(size=(3000, 384)).astype(np.float32), block_rows=1024)
    queries = rng.normal(size=(3, 384)).astype(np.float32)
    seen: list[list[int]] = []
    top_k_rows = exact_module.top_k_rows

    def recording(scores: np.ndarray, k: int):  # called right after each product
        seen.append(counts())
        return top_k_rows(scores, k)

    monkeypatch.setattr(exact_module, "top_k_rows", recording)
    monkeypatch.setattr(blas_threads, "SMALL_PRODUCT", small)
    hits = store.search(queries, k=10)
    monkeypatch.undo()
    return seen, hits


def test_a_small_batch_search_holds_the_pool_and_gives_the_same_numbers(
    pools: None, monkeypatch: pytest.MonkeyPatch
):
    held, small = _searches(monkeypatch, blas_threads.SMALL_PRODUCT)
    assert held and all(set(c) == {1} for c in held)
    assert counts() == [POOLED] * len(openblas_pools())
    shared, large = _searches(monkeypatch, 0)  # every product counts as large: not held
    assert shared and all(c == [POOLED] * len(openblas_pools()) for c in shared)
    np.testing.assert_array_equal(small.indices, large.indices)
    np.testing.assert_array_equal(small.similarities, large.similarities)


def test_a_product_that_fails_still_restores_the_count(pools: None):
    with pytest.raises(ZeroDivisionError), one_blas_thread(1):
        _ = 1 / 0
    assert counts() == [POOLED] * len(openblas_pools()) and not blas_threads.held()
