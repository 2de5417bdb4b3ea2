"""PooledStore: chunks scored by their best unit, each chunk once, exact."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ragbound.errors import InputError
from ragbound.stores import ExactStore, PooledStore


def test_a_chunk_scores_as_its_best_unit():
    # four units in 2-d: units 0, 1 belong to chunk 0, unit 2 to chunk 1, unit 3 to chunk 2
    units = np.array([[1.0, 0.0], [0.6, 0.8], [0.8, 0.6], [0.0, 1.0]], dtype=np.float32)
    store = PooledStore(ExactStore(units), np.array([0, 0, 1, 2]), 3, granularity="sentence")
    hits = store.search(np.array([[0.0, 1.0]], dtype=np.float32), k=3)
    assert hits.indices.tolist() == [[2, 0, 1]]
    np.testing.assert_allclose(hits.similarities, [[1.0, 0.8, 0.6]], atol=1e-6)
    assert len(store) == 3
    assert store.describe().parameters["granularity"] == "sentence"


def test_many_units_of_one_chunk_crowding_the_top_are_fetched_past():
    # chunk 0 has 50 units nearer than chunk 1's only unit: the store must fetch beyond them
    near = np.tile([[1.0, 0.0]], (50, 1))
    units = np.vstack([near, [[0.0, 1.0]]]).astype(np.float32)
    owners = np.array([0] * 50 + [1])
    hits = PooledStore(ExactStore(units), owners, 2, granularity="sentence").search(
        np.array([[1.0, 0.1]], dtype=np.float32), k=2
    )
    assert hits.indices.tolist() == [[0, 1]]


def test_bad_owners_and_k_are_refused():
    units = np.eye(3, dtype=np.float32)
    with pytest.raises(InputError, match="owners"):
        PooledStore(ExactStore(units), np.array([0, 1]), 2, granularity="sentence")
    with pytest.raises(InputError, match="owners must be"):
        PooledStore(ExactStore(units), np.array([0, 1, 5]), 2, granularity="sentence")
    store = PooledStore(ExactStore(units), np.array([0, 1, 1]), 2, granularity="sentence")
    with pytest.raises(InputError, match="larger than the knowledge base"):
        store.search(units[:1], k=3)


@settings(max_examples=40, deadline=None)
@given(
    arrays(np.float32, (12, 3), elements=st.floats(-1, 1, width=32)),
    st.lists(st.integers(0, 4), min_size=12, max_size=12),
    st.integers(1, 5),
)
def test_equals_brute_force_max_pooling(units: np.ndarray, owners: list[int], k: int):
    owners_arr = np.array(owners)
    n_groups = int(owners_arr.max()) + 1
    k = min(k, len(set(owners)))
    # groups with no unit cannot be reached: renumber the groups that have units
    _, owners_arr = np.unique(owners_arr, return_inverse=True)
    n_groups = int(owners_arr.max()) + 1
    query = np.array([[0.3, -0.2, 0.9]], dtype=np.float32)
    hits = PooledStore(ExactStore(units), owners_arr, n_groups, granularity="x").search(query, k)
    scores = (query @ units.T)[0]
    best = np.array([scores[owners_arr == g].max() for g in range(n_groups)])
    np.testing.assert_allclose(hits.similarities[0], np.sort(best)[::-1][:k], atol=1e-6)
    assert len(set(hits.indices[0].tolist())) == k
    np.testing.assert_allclose(best[hits.indices[0]], hits.similarities[0], atol=1e-6)
