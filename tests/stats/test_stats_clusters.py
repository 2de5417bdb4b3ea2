"""Tests for ragbound.stats.clusters: k-means by hand, its fixed-point properties, and against
scikit-learn's inertia where it is installed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ragbound.stats.clusters import kmeans


def test_two_obvious_groups_by_hand() -> None:
    found = kmeans([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]], 2, seed=3)
    assert found.labels[0] == found.labels[1] != found.labels[2] == found.labels[3]
    assert sorted(found.centres.tolist()) == [[0.0, 0.5], [10.0, 0.5]]
    assert found.inertia == pytest.approx(4 * 0.25)


def test_one_cluster_is_the_mean_and_k_rows_are_their_own_clusters() -> None:
    rows = np.array([[1.0], [2.0], [6.0]])
    one = kmeans(rows, 1)
    assert one.labels.tolist() == [0, 0, 0] and one.centres.tolist() == [[3.0]]
    each = kmeans(rows, 3)
    assert sorted(each.labels.tolist()) == [0, 1, 2] and each.inertia == 0.0


def test_fewer_distinct_rows_than_clusters_still_gives_k_labels_in_range() -> None:
    found = kmeans(np.ones((5, 2)), 3)
    assert found.inertia == 0.0 and set(found.labels.tolist()) <= {0, 1, 2}


@settings(max_examples=60, deadline=None)
@given(
    rows=arrays(
        np.float64, st.tuples(st.integers(2, 30), st.integers(1, 4)), elements=st.floats(-5, 5)
    ),
    data=st.data(),
    seed=st.integers(0, 1000),
)
def test_a_result_is_a_fixed_point_of_lloyds_steps(rows: np.ndarray, data, seed: int) -> None:
    k = data.draw(st.integers(1, rows.shape[0]))
    found = kmeans(rows, k, seed=seed, restarts=2)
    distances = ((rows[:, None, :] - found.centres[None, :, :]) ** 2).sum(axis=2)
    nearest = distances.min(axis=1)
    # every row sits with a nearest centre, and every non-empty cluster's centre is its mean
    assert np.allclose(distances[np.arange(len(rows)), found.labels], nearest, atol=1e-9)
    for cluster in np.unique(found.labels):
        members = rows[found.labels == cluster]
        np.testing.assert_allclose(found.centres[cluster], members.mean(axis=0), atol=1e-9)
    assert found.inertia == pytest.approx(nearest.sum(), abs=1e-9)
    again = kmeans(rows, k, seed=seed, restarts=2)  # seeded: the same clusters
    assert np.array_equal(again.labels, found.labels)
    assert np.array_equal(again.centres, found.centres)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="k must be between 1 and the number of rows"):
        kmeans([[0.0], [1.0]], 3)
    with pytest.raises(ValueError, match="restarts"):
        kmeans([[0.0], [1.0]], 1, restarts=0)


def test_clear_groups_reach_scikit_learns_inertia() -> None:
    cluster = pytest.importorskip("sklearn.cluster")
    rng = np.random.default_rng(0)
    for seed in range(4):
        centres = rng.normal(0.0, 4.0, size=(6, 8))
        rows = np.concatenate([rng.normal(size=(40, 8)) + centre for centre in centres])
        ours = kmeans(rows, 6, seed=seed).inertia
        theirs = cluster.KMeans(6, n_init=10, random_state=seed).fit(rows).inertia_
        assert ours == pytest.approx(theirs, rel=1e-9)
