"""Tests for ragbound.stats.diversity: range cut-off, uniqueness, greedy min-distance selection."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragbound.stats import (
    as_similarity_matrix,
    greedy_min_distance,
    range_cutoff,
    uniqueness_scores,
)


def test_range_cutoff_by_hand() -> None:
    # min 0.2, max 1.2, range 1.0
    assert range_cutoff([0.2, 0.4, 1.2], 0.3) == pytest.approx(0.5)
    assert range_cutoff([0.2, 0.4, 1.2], 0.0) == pytest.approx(0.2)
    assert range_cutoff([0.2, 0.4, 1.2], 1.0) == pytest.approx(1.2)
    assert range_cutoff([0.7, 0.7], 0.4) == pytest.approx(0.7)  # no range: nothing is cut
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="threshold"):
            range_cutoff([0.1, 0.2], bad)
    with pytest.raises(ValueError, match="at least 1"):
        range_cutoff([], 0.3)


def test_uniqueness_by_hand() -> None:
    sims = [[1.0, 0.9, 0.0], [0.9, 1.0, 0.5], [0.0, 0.5, 1.0]]
    # row maxima off the diagonal: 0.9, 0.9, 0.5
    assert uniqueness_scores(sims) == pytest.approx([0.1, 0.1, 0.5])
    assert uniqueness_scores([[1.0]]).tolist() == [1.0]
    assert uniqueness_scores(np.empty((0, 0))).tolist() == []
    # the diagonal is ignored even when it is not 1
    assert uniqueness_scores([[0.0, 0.2], [0.2, 0.0]]) == pytest.approx([0.8, 0.8])


def test_similarity_matrix_is_checked_and_symmetrised() -> None:
    assert as_similarity_matrix([[1.0, 0.2], [0.4, 1.0]]) == pytest.approx(
        np.array([[1, 0.3], [0.3, 1]])
    )
    with pytest.raises(ValueError, match="square"):
        as_similarity_matrix([[1.0, 0.2]])
    with pytest.raises(ValueError, match="NaN"):
        as_similarity_matrix([[1.0, math.nan], [math.nan, 1.0]])


def test_greedy_by_hand() -> None:
    # 0 and 1 are near copies (distance 0.1), 2 is far from both, 3 is near 2 (0.25)
    sims = [
        [1.0, 0.9, 0.2, 0.1],
        [0.9, 1.0, 0.1, 0.3],
        [0.2, 0.1, 1.0, 0.75],
        [0.1, 0.3, 0.75, 1.0],
    ]
    selection = greedy_min_distance(sims, 0.3)
    assert selection.kept.tolist() == [True, False, True, False]
    assert selection.nearest.tolist() == [-1, 0, 0, 2]
    assert selection.distance[1:] == pytest.approx([0.1, 0.8, 0.25])
    assert math.isinf(selection.distance[0])
    # at 0.2 item 3 (0.25 from item 2) survives too
    assert greedy_min_distance(sims, 0.2).kept.tolist() == [True, False, True, True]
    # at 0 everything is kept; at 2 (beyond any cosine distance) only the first
    assert greedy_min_distance(sims, 0.0).kept.all()
    assert greedy_min_distance(sims, 2.5).kept.tolist() == [True, False, False, False]


def test_greedy_nearest_is_fixed_when_judged() -> None:
    # item 1 is dropped because of item 0; item 2, kept later, is even closer to item 1,
    # but item 1's nearest stays the item it was judged against
    sims = [[1.0, 0.8, 0.0], [0.8, 1.0, 0.95], [0.0, 0.95, 1.0]]
    selection = greedy_min_distance(sims, 0.5)
    assert selection.kept.tolist() == [True, False, True]
    assert selection.nearest.tolist() == [-1, 0, 0]
    assert selection.distance[1] == pytest.approx(0.2)


def test_greedy_ties_keep_the_earlier_item() -> None:
    sims = [[1.0, 0.0, 0.9], [0.0, 1.0, 0.9], [0.9, 0.9, 1.0]]
    selection = greedy_min_distance(sims, 0.3)
    assert selection.kept.tolist() == [True, True, False]
    assert selection.nearest[2] == 0


def test_greedy_rejects_bad_limit() -> None:
    with pytest.raises(ValueError, match="finite"):
        greedy_min_distance([[1.0]], math.nan)


unit_vectors = st.integers(1, 25).flatmap(
    lambda n: st.lists(
        st.lists(st.floats(-1, 1, allow_nan=False), min_size=3, max_size=3),
        min_size=n,
        max_size=n,
    )
)


def _cosine(rows: list[list[float]]) -> np.ndarray:
    vectors = np.asarray(rows) + 1e-3  # no zero vector
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors @ vectors.T


@given(rows=unit_vectors, limit=st.floats(0.0, 1.5))
@settings(max_examples=200)
def test_greedy_properties(rows: list[list[float]], limit: float) -> None:
    sims = as_similarity_matrix(_cosine(rows))
    selection = greedy_min_distance(sims, limit)
    kept = np.flatnonzero(selection.kept)
    assert selection.kept[0]
    # every two kept items are at least `limit` apart
    for position, i in enumerate(kept):
        for j in kept[position + 1 :]:
            assert 1.0 - sims[i, j] >= limit
    # every dropped item is closer than `limit` to an earlier kept item, its nearest one
    for i in np.flatnonzero(~selection.kept):
        near = selection.nearest[i]
        assert near < i and selection.kept[near]
        assert 1.0 - sims[i, near] == pytest.approx(selection.distance[i])
        assert selection.distance[i] < limit
        assert sims[i, near] == max(sims[i, k] for k in kept if k < i)


@given(rows=unit_vectors)
@settings(max_examples=100)
def test_uniqueness_properties(rows: list[list[float]]) -> None:
    sims = as_similarity_matrix(_cosine(rows))
    scores = uniqueness_scores(sims)
    assert scores.shape == (len(rows),)
    assert np.all(scores >= -1e-9) and np.all(scores <= 2.0 + 1e-9)
    # a copy of item 0 makes both of them score 0
    with_copy = as_similarity_matrix(_cosine([*rows, rows[0]]))
    copied = uniqueness_scores(with_copy)
    assert copied[0] == pytest.approx(0.0, abs=1e-9)
    assert copied[-1] == pytest.approx(0.0, abs=1e-9)


@given(scores=st.lists(st.floats(-5, 5), min_size=1, max_size=30), t=st.floats(0.0, 1.0))
def test_range_cutoff_properties(scores: list[float], t: float) -> None:
    cutoff = range_cutoff(scores, t)
    assert min(scores) - 1e-9 <= cutoff <= max(scores) + 1e-9
    assert max(scores) >= cutoff - 1e-9  # the most unique item always survives
