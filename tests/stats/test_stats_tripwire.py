"""Tripwire features, rules, merging and rates: hand-computed values and properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ragbound.stats import (
    merge_top_k,
    rule_decisions,
    tripwire_features,
    tripwire_rates,
)
from ragbound.stats.tripwire import (
    critical_floor,
    knn_margin,
    nearest_other_similarities,
    reference_threshold,
    set_floor,
    top_mean,
)

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
    r = tripwire_rates(rejected, unsafe)
    assert r.accuracy.tolist() == [0.75, 0.5]
    assert r.tpr.tolist() == [1.0, 0.0]
    assert r.frr.tolist() == [0.5, 0.0]
    assert r.precision[0] == pytest.approx(2 / 3) and r.precision[1] == 0.0
    assert r.f1[0] == pytest.approx(0.8) and r.f1[1] == 0.0
    with pytest.raises(ValueError, match="both safe and unsafe"):
        tripwire_rates(np.array([True]), np.array([True]))


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


def test_top_mean_and_margin_by_hand() -> None:
    sims = np.array([[0.2, 0.9, 0.5], [0.1, 0.3, 0.2]])
    assert top_mean(sims, 1).tolist() == [0.9, 0.3]
    assert top_mean(sims, 2) == pytest.approx([0.7, 0.25])
    assert top_mean(sims, 3) == pytest.approx([1.6 / 3, 0.2])
    reference = np.array([[0.4, 0.1, 0.0], [0.6, 0.5, 0.0]])
    # row 0: 0.7 - 0.25; row 1: 0.25 - 0.55
    assert knn_margin(sims, reference, 2) == pytest.approx([0.45, -0.3])
    with pytest.raises(ValueError, match="k must be"):
        top_mean(sims, 4)
    with pytest.raises(ValueError, match="rows"):
        knn_margin(sims, reference[:1], 1)


def test_reference_threshold_by_hand() -> None:
    scores = np.array([0.5, 0.1, 0.4, 0.2, 0.3])  # sorted: .1 .2 .3 .4 .5, n + 1 = 6
    assert reference_threshold(scores, 0.5) == 0.3  # ceil(3.0) = 3rd
    assert reference_threshold(scores, 0.8) == 0.5  # ceil(4.8) = 5th
    assert reference_threshold(scores, 0.85) == np.inf  # ceil(5.1) = 6 > 5
    assert reference_threshold(scores, 0.0) == 0.1  # rank 0 is clipped to the smallest
    with pytest.raises(ValueError, match="quantile"):
        reference_threshold(scores, 1.5)
    with pytest.raises(ValueError, match="finite"):
        reference_threshold(np.array([0.1, np.nan]), 0.5)


@given(
    arrays(np.float64, st.integers(1, 40), elements=st.floats(-1, 1)),
    st.floats(0, 1),
)
def test_reference_threshold_bounds_the_reference_share(scores: np.ndarray, q: float) -> None:
    """At most (1 - q)(n + 1) reference scores lie strictly above the threshold (so a new
    exchangeable score does with chance <= 1 - q), and the threshold rises with q."""
    t = reference_threshold(scores, q)
    assert (scores > t).sum() <= (1 - q) * (len(scores) + 1) + 1e-9
    assert reference_threshold(scores, min(1.0, q + 0.1)) >= t


@given(
    arrays(np.float64, (3, 6), elements=st.floats(-1, 1)),
    st.integers(1, 6),
)
def test_top_mean_between_kth_and_max(sims: np.ndarray, k: int) -> None:
    kth = -np.sort(-sims, axis=1)[:, k - 1]
    got = top_mean(sims, k)
    assert np.all(got >= kth - 1e-12) and np.all(got <= sims.max(axis=1) + 1e-12)
    assert np.all(top_mean(sims, 1) >= got - 1e-12)  # the mean falls as k grows


def test_per_query_floor() -> None:
    f = tripwire_features(FLAGS, SIMS, floor=np.array([0.75, 0.0, 0.35]))
    assert f.proportion.tolist() == [0.2, 0.0, 0.4]  # 0.9 | none | 0.4 and 0.8
    with pytest.raises(ValueError, match="one value per query"):
        tripwire_features(FLAGS, SIMS, floor=np.array([0.1, 0.2]))


def test_critical_floor_by_hand() -> None:
    paper = {"proportion": 0.5, "rank": 1}
    # query 0: rank 1 is a tripwire at 0.9 -> 0.9; query 1: no tripwire -> -inf;
    # query 2: tripwires at ranks 2-4 (0.8, 0.4, 0.3): three of five only with the 0.3 counted
    got = critical_floor(FLAGS, SIMS, **paper)
    assert got.tolist() == [0.9, -np.inf, 0.3]
    assert critical_floor(FLAGS, SIMS, rank=2).tolist() == [0.9, -np.inf, 0.8]
    # rr_sum >= 0.8 needs 1/2 + 1/3 (the 0.8 and the 0.4): floor 0.4
    assert critical_floor(FLAGS, SIMS, rr_sum=0.8).tolist() == [0.9, -np.inf, 0.4]
    # all: proportion >= 0.4 and rank <= 2 -> query 0 at 0.7 (two tripwires), query 2 at 0.4
    both = critical_floor(FLAGS, SIMS, proportion=0.4, rank=2, combine="all")
    assert both.tolist() == [0.7, -np.inf, 0.4]


@given(
    arrays(bool, (4, 5)),
    arrays(np.float64, (4, 5), elements=st.floats(-1, 1)),
    st.sampled_from([0.2, 0.4, 0.5, 0.6, 1.0]),
    st.integers(1, 5),
    st.sampled_from(["any", "all"]),
    arrays(np.float64, 3, elements=st.floats(-1, 1)),
)
def test_critical_floor_is_where_the_rule_stops(
    flags: np.ndarray, sims: np.ndarray, p: float, r: int, combine: str, floors: np.ndarray
) -> None:
    """At any floor, the rule rejects exactly the queries whose critical floor is at least it."""
    sims = -np.sort(-sims, axis=1)  # a merged top-k is sorted
    critical = critical_floor(flags, sims, proportion=p, rank=r, combine=combine)
    for floor in [*floors, -np.inf]:
        features = tripwire_features(flags, sims, floor=floor)
        decided = rule_decisions(features, proportion=p, rank=r, combine=combine)
        expected = (critical >= floor) & np.isfinite(critical)  # -inf: at no floor
        assert decided.tolist() == expected.tolist()
