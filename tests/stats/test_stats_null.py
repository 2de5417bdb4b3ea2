"""Tests for ragbound.stats.null: eq. 2, conformal validity, critical values, meta p-values."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from benchmarks.pvalue_validity import ALPHAS, null_rows
from ragbound.stats import (
    EmpiricalNull,
    NeighbourNull,
    auroc,
    fisher,
    leave_one_out_p_values,
    meta_null_scores,
    meta_scores,
    per_neighbour_p_values,
    simes,
)

METHODS = ("conformal", "paper")
alphas = st.floats(0.001, 0.999)


def test_p_values_by_hand() -> None:
    null = EmpiricalNull([0.3, 0.1, 0.4, 0.2])
    t = [0.05, 0.1, 0.35, 0.4, 0.5]
    # conformal (1 + #{null >= t}) / 5: #>= = 4, 4, 1, 1, 0
    np.testing.assert_allclose(null.p_values(t), [1.0, 1.0, 0.4, 0.4, 0.2])
    # paper #{null > t} / 5: #> = 4, 3, 1, 0, 0
    np.testing.assert_allclose(null.p_values(t, "paper"), [0.8, 0.6, 0.2, 0.0, 0.0])
    assert null.p_values(np.array([[0.35]])).shape == (1, 1)
    assert null.n == 4
    assert null.p_values(math.inf) == pytest.approx(0.2)  # the smallest attainable
    assert null.p_values(math.inf, "paper") == 0.0


def test_scores_are_stored_sorted_read_only_and_copied() -> None:
    raw = np.array([3.0, 1.0, 2.0])
    null = EmpiricalNull(raw)
    np.testing.assert_array_equal(null.scores, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(raw, [3.0, 1.0, 2.0])
    assert null.scores.dtype == np.float64
    assert null.scores.flags.c_contiguous
    with pytest.raises(ValueError, match="read-only"):
        null.scores[0] = 9.0


@pytest.mark.parametrize(
    ("scores", "message"),
    [
        ([], "at least 1"),
        ([[0.1, 0.2]], "1-D"),
        ([0.1, math.nan], "NaN"),
        ([0.1, math.inf], "infinite"),
    ],
)
def test_null_validation(scores: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EmpiricalNull(scores)  # type: ignore[arg-type]


def test_argument_validation() -> None:
    null = EmpiricalNull([0.1, 0.2])
    with pytest.raises(ValueError, match="NaN"):
        null.p_values([0.1, math.nan])
    with pytest.raises(ValueError, match="unknown p-value method 'exact'; valid: conformal"):
        null.p_values(0.1, method="exact")  # type: ignore[arg-type]
    for alpha in (0.0, 1.0, -0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match=r"alpha must be in \(0, 1\)"):
            null.critical_value(alpha)


def test_critical_values_by_hand() -> None:
    null = EmpiricalNull([0.1, 0.2, 0.3, 0.4])
    # conformal alpha 0.4: need #{>= t} <= 1, i.e. t > 0.3
    assert null.critical_value(0.4) == math.nextafter(0.3, math.inf)
    # paper alpha 0.4: need #{> t} <= 2, i.e. t >= 0.2 (a calibration score)
    assert null.critical_value(0.4, "paper") == 0.2
    # conformal min p is 1/5 > 0.1: nothing is ever rejected
    assert null.critical_value(0.1) == math.inf
    assert null.critical_value(0.1, "paper") == 0.4
    # paper with alpha >= n / (n + 1): every value is rejected
    assert EmpiricalNull([1.0]).critical_value(0.5, "paper") == -math.inf


@given(
    ints=st.lists(st.integers(-5, 5), min_size=1, max_size=40),
    alpha=alphas,
    method=st.sampled_from(METHODS),
)
@settings(max_examples=200)
def test_critical_value_agrees_with_p_values(ints: list[int], alpha: float, method: str) -> None:
    # Integer-valued scores force ties; probe every score, the gaps, both ends and next floats.
    null = EmpiricalNull(np.array(ints, dtype=float) / 4)
    grid = np.arange(-7.0, 7.0, 0.125) / 4
    c = null.critical_value(alpha, method)  # type: ignore[arg-type]
    probes = np.concatenate([grid, np.nextafter(grid, np.inf), np.nextafter(grid, -np.inf)])
    if math.isfinite(c):
        probes = np.append(probes, [c, math.nextafter(c, -math.inf)])
    rejected = null.p_values(probes, method) <= alpha  # type: ignore[arg-type]
    np.testing.assert_array_equal(probes >= c, rejected)
    assert (c == math.inf) == (null.p_values(math.inf, method) > alpha)  # type: ignore[arg-type]


@given(
    scores=st.lists(st.floats(-10, 10), min_size=1, max_size=50),
    probes=st.lists(st.floats(-20, 20), min_size=1, max_size=50),
)
def test_p_values_range_and_monotonicity(scores: list[float], probes: list[float]) -> None:
    null = EmpiricalNull(scores)
    t = np.sort(np.array(probes))
    conformal = null.p_values(t)
    paper = null.p_values(t, "paper")
    assert np.all((conformal >= null.p_values(math.inf)) & (conformal <= 1.0))
    assert np.all((paper >= 0.0) & (paper < 1.0))
    assert np.all(np.diff(conformal) <= 0)
    assert np.all(np.diff(paper) <= 0)
    # the two definitions differ only by the ties at t and the "+1"
    assert np.all(paper < conformal)


@given(n=st.integers(1, 300), alpha=alphas)
@settings(max_examples=200)
def test_rejection_rate_by_rank_enumeration(n: int, alpha: float) -> None:
    # With continuous scores the test point's rank among n + 1 exchangeable values is uniform:
    # placing it in each of the n + 1 gaps enumerates every rank with equal probability.
    scaled = Fraction(alpha) * (n + 1)
    assume(abs(float(scaled) - round(float(scaled))) > 1e-9)  # float rounding at grid points
    null = EmpiricalNull(np.arange(n, dtype=float))
    gaps = np.arange(n + 1, dtype=float) - 0.5
    conformal_rate = Fraction(int(np.count_nonzero(null.p_values(gaps) <= alpha)), n + 1)
    paper_rate = Fraction(int(np.count_nonzero(null.p_values(gaps, "paper") <= alpha)), n + 1)
    assert conformal_rate == Fraction(math.floor(scaled), n + 1)
    assert conformal_rate <= Fraction(alpha)
    # eq. 2 taken literally rejects one rank more: always above alpha (anti-conservative)
    assert paper_rate == Fraction(min(math.floor(scaled) + 1, n + 1), n + 1)
    assert paper_rate > Fraction(alpha)


@given(
    n=st.integers(1, 60),
    alpha=st.floats(0.01, 0.5),
    seed=st.integers(0, 2**32 - 1),
    discrete=st.booleans(),
)
@settings(max_examples=15, deadline=None, derandomize=True)
def test_conformal_p_values_are_super_uniform_under_the_null(
    n: int, alpha: float, seed: int, discrete: bool
) -> None:
    # Calibration and test scores i.i.d. from one distribution (continuous, or with ties).
    trials = 2000
    rng = np.random.default_rng(seed)
    if discrete:
        draws = rng.integers(0, 4, size=(trials, n + 1)).astype(float)
    else:
        draws = rng.standard_normal((trials, n + 1))
    pvals = np.array([EmpiricalNull(row[:n]).p_values(row[n]) for row in draws])
    margin = 4 * math.sqrt(alpha * (1 - alpha) / trials)
    assert np.mean(pvals <= alpha) <= alpha + margin


# Fisher and Simes are only approximately valid: the query's per-neighbour p-values use all n
# calibration rows, the null's use leave-one-out rows (n - 1), so the two are not exchangeable.
# Measured by `python -m benchmarks.run pvalue-validity` (the table in docs/benchmarks.md),
# 4,000 calibration sets x 40 test rows per cell, n in {20, 50, 100, 200, 500}, k in {2, 4, 8, 32}, rows i.i.d. uniform or with a
# per-row level; excess = max over alpha in {0.01, 0.05, 0.1, 0.2} of P(p <= alpha) - alpha:
#   Simes:  +0.041 (n = 20, k = 4, alpha = 0.1), +0.023 (n = 50), +0.014 (n = 100),
#           +0.008 (n = 200), +0.004 (n = 500); all with nearly independent neighbours (i.i.d.
#           rows, k <= 8). Its null has atoms and the query's p-values, on the finer
#           1 / (n + 1) grid, fall just past them. With a per-row level: <= +0.009.
#   Fisher: never above alpha by more than noise (largest +0.0003, 0.3 standard errors).
# The bounds sit a little above the measurements: Simes min(0.05, 2.5 / n), Fisher 0.005.
META_EXCESS_BOUND = {"simes": lambda n: min(0.05, 2.5 / n), "fisher": lambda n: 0.005}


@settings(max_examples=10, deadline=None, derandomize=True)
@given(
    statistic=st.sampled_from(["fisher", "simes"]),
    n=st.integers(20, 150),
    k=st.integers(2, 8),
    kind=st.sampled_from(["iid", "level"]),
    seed=st.integers(0, 10_000),
)
def test_meta_p_values_are_super_uniform_up_to_the_measured_excess(
    statistic: str, n: int, k: int, kind: str, seed: int
) -> None:
    # Many calibration sets, several exchangeable test rows each: the average over sets of
    # P(p <= alpha | calibration) estimates the marginal rejection rate.
    rng = np.random.default_rng(seed)
    sets, tests = 300, 30
    rejected = np.zeros(ALPHAS.size)
    for _ in range(sets):
        rows = null_rows(rng, n + tests, k, kind)
        calibration, queries = rows[:n], rows[n:]
        null = EmpiricalNull(meta_null_scores(statistic, calibration))
        p = null.p_values(meta_scores(statistic, calibration, queries))
        rejected += (p[:, None] <= ALPHAS).sum(axis=0)
    excess = rejected / (sets * tests) - ALPHAS
    # conditional rates vary between calibration sets by about alpha (1 - alpha) / (n + 2)
    spread = ALPHAS * (1 - ALPHAS)
    se = np.sqrt(spread / (n + 2) / sets + spread / (sets * tests))
    assert (excess <= META_EXCESS_BOUND[statistic](n) + 4 * se).all(), excess


def test_per_neighbour_p_values_by_hand() -> None:
    null_sims = np.array([[0.9, 0.8], [0.7, 0.6], [0.5, 0.4]])
    sims = np.array([[0.8, 0.1], [0.95, 0.9], [0.7, 0.6]])
    # column 0: t = -0.8 vs null (-0.9, -0.7, -0.5): 2 are >= -> 3/4; column 1: t = -0.1: 0 -> 1/4
    # query 2 beats every neighbour -> 1 everywhere; query 3 ties rows 2: (1 + 2) / 4 both
    expected = [[0.75, 0.25], [1.0, 1.0], [0.75, 0.75]]
    np.testing.assert_allclose(per_neighbour_p_values(null_sims, sims), expected)
    prebuilt = NeighbourNull(null_sims)
    assert (prebuilt.n, prebuilt.k) == (3, 2)
    np.testing.assert_array_equal(per_neighbour_p_values(prebuilt, sims), expected)


def test_per_neighbour_rejects_k_mismatch_and_bad_null() -> None:
    with pytest.raises(ValueError, match="k=3 columns but the null was built with k=2"):
        per_neighbour_p_values(np.ones((4, 2)), np.ones((1, 3)))
    with pytest.raises(ValueError, match="null_sims rows must be sorted descending"):
        per_neighbour_p_values(np.array([[0.1, 0.9]]), np.ones((1, 2)))


def test_leave_one_out_by_hand_with_ties() -> None:
    null_sims = np.array([[0.5], [0.5], [0.2]])  # statistics t = -sims = (-0.5, -0.5, -0.2)
    # row 0: others -0.5 (a tie, counts) and -0.2 are both >= -0.5 -> (1 + 2) / 3; row 1 alike
    # row 2: t = -0.2; the others (-0.5, -0.5) are smaller -> (1 + 0) / 3
    # (a strict ">" count would give rows 0 and 1 only 2/3: ties must count as extreme)
    np.testing.assert_allclose(leave_one_out_p_values(null_sims), [[1.0], [1.0], [1 / 3]])
    np.testing.assert_allclose(leave_one_out_p_values([[0.5], [0.4]]), [[1.0], [0.5]])
    np.testing.assert_array_equal(leave_one_out_p_values([[0.3, 0.1]]), [[1.0, 1.0]])


def _sorted_sims(rng: np.random.Generator, n: int, k: int, decimals: int) -> np.ndarray:
    return -np.sort(-np.round(rng.uniform(0, 1, (n, k)), decimals), axis=1)


@given(seed=st.integers(0, 10_000), n=st.integers(2, 30), k=st.integers(1, 6))
@settings(max_examples=40)
def test_leave_one_out_matches_brute_force(seed: int, n: int, k: int) -> None:
    null_sims = _sorted_sims(np.random.default_rng(seed), n, k, decimals=1)  # many ties
    loo = leave_one_out_p_values(null_sims)
    for j in range(n):
        others = np.delete(null_sims, j, axis=0)
        np.testing.assert_allclose(loo[j], per_neighbour_p_values(others, null_sims[j : j + 1])[0])
        brute = [(1 + np.sum(others[:, i] <= null_sims[j, i])) / n for i in range(k)]
        np.testing.assert_allclose(loo[j], brute)


def test_meta_scores_combine_the_p_values() -> None:
    rng = np.random.default_rng(1)
    null_sims, sims = _sorted_sims(rng, 50, 4, 6), _sorted_sims(rng, 7, 4, 6)
    pvals = per_neighbour_p_values(null_sims, sims)
    loo = leave_one_out_p_values(null_sims)
    np.testing.assert_array_equal(meta_scores("fisher", null_sims, sims), fisher(pvals))
    np.testing.assert_array_equal(meta_scores("simes", null_sims, sims), simes(pvals))
    np.testing.assert_array_equal(meta_null_scores("fisher", null_sims), fisher(loo))
    np.testing.assert_array_equal(meta_null_scores("simes", null_sims), simes(loo))
    assert meta_null_scores("simes", null_sims).shape == (50,)
    with pytest.raises(ValueError, match="unknown meta statistic 'mss'"):
        meta_scores("mss", null_sims, sims)
    with pytest.raises(ValueError, match="unknown meta statistic"):
        meta_null_scores("energy", null_sims)


def test_meta_scores_separate_far_queries() -> None:
    # In-knowledge rows have similarities near 0.6, far OoK rows near 0.3.
    rng = np.random.default_rng(7)

    def draw(centre: float, n: int) -> np.ndarray:
        return -np.sort(-rng.normal(centre, 0.05, (n, 8)), axis=1)

    null_sims, ik, ook = draw(0.6, 200), draw(0.6, 100), draw(0.3, 100)
    for name in ("fisher", "simes"):
        assert auroc(meta_scores(name, null_sims, ik), meta_scores(name, null_sims, ook)) > 0.95
        null = EmpiricalNull(meta_null_scores(name, null_sims))
        ik_p = null.p_values(meta_scores(name, null_sims, ik))
        # roughly calibrated on in-knowledge queries: about 5% rejected at alpha = 0.05
        assert np.mean(ik_p <= 0.05) < 0.15
