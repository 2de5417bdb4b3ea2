"""Tripwire features, rules, merging and rates: hand-computed values and properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ragbound.stats import (
    merge_top_k,
    rejection_rates,
    rule_decisions,
    tripwire_features,
)
from ragbound.stats.tripwire import nearest_other_similarities, set_floor

FLAGS = np.array([[1, 0, 1, 0, 0], [0, 0, 0, 0, 0], [0, 1, 1, 1, 0]], dtype=bool)
SIMS = np.array([[0.9, 0.8, 0.7, 0.6, 0.5], [0.9, 0.8, 0.7, 0.6, 0.5], [0.9, 0.8, 0.4, 0.3, 0.2]])


def test_features_by_hand() -> None:
    f = tripwire_features(FLAGS, SIMS)
    assert f.proportion.tolist() == [0.4, 0.0, 0.6]
    assert f.best_rank.tolist() == [1, 6, 2]  # k + 1 when no tripwire
    assert f.rr_sum == pytest.approx([1 + 1 / 3, 0.0, 1 / 2 + 1 / 3 + 1 / 4])


def test_features_at_smaller_k_and_floor() -> None:
    f = tripwire_features(FLAGS, SIMS, k=2)
    assert f.proportion.tolist() == [0.5, 0.0, 0.5]
    floored = tripwire_features(FLAGS, SIMS, floor=0.75)  # drops the 0.7, 0.4 and 0.3 tripwires
    assert floored.proportion.tolist() == [0.2, 0.0, 0.2]
    assert floored.best_rank.tolist() == [1, 6, 2]


def test_paper_default_rule() -> None:
    f = tripwire_features(FLAGS, SIMS)
    # p >= 0.5 or r <= 1: query 0 by rank, query 2 by proportion (0.6), query 1 passes
    assert rule_decisions(f, proportion=0.5, rank=1).tolist() == [True, False, True]
    assert rule_decisions(f, proportion=0.5, rank=1, combine="all").tolist() == [
        False,
        False,
        False,
    ]
    assert rule_decisions(f, rr_sum=1.0).tolist() == [True, False, True]
    assert not rule_decisions(f).any()  # no condition: nothing rejected


def test_proportion_threshold_is_inclusive_despite_rounding() -> None:
    flags = np.array([[1, 1, 1, 0, 0, 0]], dtype=bool)
    f = tripwire_features(flags, np.linspace(1, 0.5, 6)[None, :])
    assert rule_decisions(f, proportion=0.5).tolist() == [True]


def test_merge_by_hand_ties_go_to_knowledge() -> None:
    sims, flags, positions = merge_top_k(np.array([[0.9, 0.7, 0.5]]), np.array([[0.8, 0.7]]), k=4)
    assert sims.tolist() == [[0.9, 0.8, 0.7, 0.7]]
    assert flags.tolist() == [[False, True, False, True]]
    assert positions.tolist() == [[0, 0, 1, 1]]


def test_merge_with_no_tripwires() -> None:
    sims, flags, _ = merge_top_k(np.array([[0.9, 0.7]]), np.empty((1, 0)), k=2)
    assert not flags.any() and sims.tolist() == [[0.9, 0.7]]


def test_rates_by_hand_and_one_class_refused() -> None:
    rejected = np.array([[True, True, True, False], [False, False, False, False]])
    unsafe = np.array([True, True, False, False])
    r = rejection_rates(rejected, unsafe)
    assert r.accuracy.tolist() == [0.75, 0.5]
    assert r.tpr.tolist() == [1.0, 0.0]
    assert r.frr.tolist() == [0.5, 0.0]
    assert r.precision[0] == pytest.approx(2 / 3) and r.precision[1] == 0.0
    assert r.f1[0] == pytest.approx(0.8) and r.f1[1] == 0.0
    with pytest.raises(ValueError, match="both safe and unsafe"):
        rejection_rates(np.array([True]), np.array([True]))


sorted_rows = arrays(np.float64, (4, 6), elements=st.floats(-1, 1)).map(
    lambda a: -np.sort(-a, axis=1)
)
flag_rows = arrays(np.bool_, (4, 6))


@given(flag_rows, sorted_rows, st.floats(-1, 1))
def test_floor_never_raises_a_feature(flags, sims, floor) -> None:
    low, high = tripwire_features(flags, sims), tripwire_features(flags, sims, floor=floor)
    assert (high.proportion <= low.proportion).all()
    assert (high.rr_sum <= low.rr_sum + 1e-12).all()
    assert (high.best_rank >= low.best_rank).all()
    assert ((low.proportion >= 0) & (low.proportion <= 1)).all()


@given(flag_rows, sorted_rows, st.integers(1, 6), st.integers(1, 6))
def test_any_contains_all_and_each_condition(flags, sims, j, rank) -> None:
    f = tripwire_features(flags, sims)
    any_ = rule_decisions(f, proportion=j / 6, rank=rank)
    all_ = rule_decisions(f, proportion=j / 6, rank=rank, combine="all")
    alone = rule_decisions(f, rank=rank)
    assert (all_ <= any_).all() and (alone <= any_).all()


@given(sorted_rows, sorted_rows, st.integers(1, 12))
def test_merge_is_the_top_k_of_the_union(a, b, k) -> None:
    sims, flags, positions = merge_top_k(a, b, k)
    union = -np.sort(-np.concatenate([a, b], axis=1), axis=1)[:, :k]
    assert np.allclose(sims, union)
    source = np.where(
        flags,
        np.take_along_axis(b, np.where(flags, positions, 0), axis=1),
        np.take_along_axis(a, np.where(flags, 0, positions), axis=1),
    )
    assert np.allclose(source, sims)


# unit vectors at 0, 36.87 and 90 degrees: cosines 0.8 (a-b), 0.0 (a-c), 0.6 (b-c)
UNIT = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])


def test_nearest_other_by_hand() -> None:
    assert nearest_other_similarities(UNIT).tolist() == pytest.approx([0.8, 0.8, 0.6])
    # within groups: c is alone in its group, so it has no nearest other
    grouped = nearest_other_similarities(UNIT, np.array(["x", "x", "y"]))
    assert grouped[:2].tolist() == pytest.approx([0.8, 0.8]) and grouped[2] == -np.inf
    assert nearest_other_similarities(UNIT[:1]).tolist() == [-np.inf]  # one tripwire
    assert nearest_other_similarities(np.empty((0, 2))).shape == (0,)


def test_set_floor_by_hand() -> None:
    nearest = np.array([0.8, 0.8, 0.6, 0.9, 0.7])  # sorted: 0.6 0.7 0.8 0.8 0.9
    assert set_floor(nearest, 0.0) == 0.6
    assert set_floor(nearest, 0.15) == 0.6  # floor(0.15 * 4) = 0
    assert set_floor(nearest, 0.25) == 0.7  # floor(0.25 * 4) = 1
    assert set_floor(nearest, 1.0) == 0.9
    assert set_floor(np.array([-np.inf, 0.5]), 0.9) == 0.5  # tripwires with no other are left out
    assert set_floor(np.array([-np.inf]), 0.15) is None
    with pytest.raises(ValueError, match="quantile"):
        set_floor(nearest, 1.5)


unit_sets = arrays(np.float64, st.tuples(st.integers(1, 12), st.just(3)), elements=st.floats(-1, 1))


@given(unit_sets, st.integers(1, 5))
def test_nearest_other_is_the_best_other_row_in_any_block_size(raw, block) -> None:
    vectors = raw + np.eye(len(raw), 3)  # no all-zero rows
    sims = vectors @ vectors.T
    found = nearest_other_similarities(vectors, block=block)
    for i in range(len(vectors)):
        others = np.delete(sims[i], i)
        assert found[i] == (pytest.approx(others.max()) if others.size else -np.inf)


@given(
    arrays(np.float64, st.integers(1, 30), elements=st.floats(-1, 1)),
    st.floats(0, 1),
    st.floats(0, 1),
)
def test_set_floor_is_an_observed_lower_quantile(nearest, q, other_q) -> None:
    floor = set_floor(nearest, q)
    assert floor in nearest.tolist()
    assert np.mean(nearest >= floor) >= 1 - q  # at least 1 - q of the set clears its floor
    assert set_floor(np.random.default_rng(0).permutation(nearest), q) == floor
    low, high = sorted((q, other_q))
    assert set_floor(nearest, low) <= set_floor(nearest, high)
