"""Tests for ragbound.stats.metrics: AUROC/AUPRC, operating points, balanced runs, Wilson CIs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragbound.stats import (
    auprc,
    auroc,
    auroc_standard_error,
    balanced_runs,
    rates_at_threshold,
    threshold_at_fpr,
    tpr_at_fpr,
    wilson_interval,
)
from ragbound.stats.metrics import roc_points

scores = st.lists(st.integers(0, 20).map(float), min_size=1, max_size=40)


def test_auroc_and_auprc_extremes() -> None:
    low, high = [0.1, 0.2, 0.3], [0.7, 0.8]
    assert auroc(low, high) == 1.0
    assert auroc(high, low) == 0.0
    assert auroc([0.5, 0.5], [0.5]) == 0.5
    assert auprc(low, high) == 1.0


def test_auroc_and_auprc_by_hand() -> None:
    ik, ook = [0.1, 0.4], [0.35, 0.8]
    # pairs (out > in): 0.35>0.1, 0.8>0.1, 0.8>0.4 -> 3 of 4
    assert auroc(ik, ook) == pytest.approx(0.75)
    # ranked: 0.8 (OoK) p=1, 0.4, 0.35 (OoK) p=2/3 -> AP = 0.5 * 1 + 0.5 * 2/3
    assert auprc(ik, ook) == pytest.approx(5 / 6)


def test_auroc_and_auprc_with_ties_by_hand() -> None:
    ik, ook = [0.2, 0.5, 0.5], [0.5, 0.9]
    # 0.9 beats all 3 (3 pairs); 0.5 beats 0.2 (1) and ties the two 0.5s (1/2 each): 5 of 6
    assert auroc(ik, ook) == 5 / 6
    # at 0.9: recall 1/2, precision 1; at 0.5 (one step for the tie): recall 1, precision 2/4
    assert auprc(ik, ook) == pytest.approx(0.5 * 1 + 0.5 * 0.5)


def test_roc_points_by_hand() -> None:
    fpr, tpr = roc_points([0.2, 0.5, 0.5], [0.5, 0.9])
    # thresholds 0.9, 0.5, 0.2 (flag at or above), from (0, 0)
    np.testing.assert_allclose(fpr, [0, 0, 2 / 3, 1])
    np.testing.assert_allclose(tpr, [0, 0.5, 1, 1])
    # 0.1 .. 0.4 inside, 0.5 .. 0.8 outside: the curve goes up, then right, in straight lines
    fpr, tpr = roc_points([0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8])
    np.testing.assert_allclose(fpr, [0, 0, 0, 1])
    np.testing.assert_allclose(tpr, [0, 0.25, 1, 1])


@given(ik=scores, ook=scores)
@settings(max_examples=150)
def test_auroc_counts_the_pairs_the_outside_score_wins(ik: list[float], ook: list[float]) -> None:
    wins = sum((o > i) + 0.5 * (o == i) for i in ik for o in ook)
    assert auroc(ik, ook) == pytest.approx(wins / (len(ik) * len(ook)), abs=1e-15)
    assert auroc(ik, ook) + auroc(ook, ik) == pytest.approx(1.0, abs=1e-15)
    fpr, tpr = roc_points(ik, ook)
    assert np.trapezoid(tpr, fpr) == pytest.approx(auroc(ik, ook), abs=1e-12)


@given(ik=scores, ook=scores)
@settings(max_examples=150)
def test_auprc_is_the_mean_precision_at_each_positive(ik: list[float], ook: list[float]) -> None:
    # average precision: each OoK score in turn, the precision of flagging every score at or
    # above it (ties flagged together)
    precisions = [
        sum(o >= s for o in ook) / (sum(o >= s for o in ook) + sum(i >= s for i in ik)) for s in ook
    ]
    assert auprc(ik, ook) == pytest.approx(sum(precisions) / len(ook), abs=1e-12)


@given(
    ik=st.lists(st.floats(-3, 3), min_size=1, max_size=60),
    ook=st.lists(st.floats(-3, 3), min_size=1, max_size=60),
    rounding=st.sampled_from([None, 0, 1]),
)
@settings(max_examples=200, deadline=None)
def test_auroc_and_auprc_match_scikit_learn(
    ik: list[float], ook: list[float], rounding: int | None
) -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    if rounding is not None:  # ties
        ik, ook = np.round(ik, rounding).tolist(), np.round(ook, rounding).tolist()
    labels = np.r_[np.zeros(len(ik)), np.ones(len(ook))]
    values = np.r_[ik, ook]
    assert auroc(ik, ook) == metrics.roc_auc_score(labels, values)  # to the last bit
    assert auprc(ik, ook) == metrics.average_precision_score(labels, values)


def test_rates_at_threshold_by_hand() -> None:
    ik, ook = [0.1, 0.2, 0.3, 0.4], [0.25, 0.35, 0.5]
    # flag iff score >= 0.3: FP = 2 (0.3 included), TP = 2, FN = 1 -> DER = 3/7
    point = rates_at_threshold(ik, ook, 0.3)
    assert point == pytest.approx((2 / 3, 0.5, 3 / 7))
    assert (point.tpr, point.fpr, point.der) == tuple(point)
    assert rates_at_threshold(ik, ook, math.inf) == pytest.approx((0.0, 0.0, 3 / 7))
    assert rates_at_threshold(ik, ook, -math.inf) == pytest.approx((1.0, 1.0, 4 / 7))
    with pytest.raises(ValueError, match="NaN"):
        rates_at_threshold(ik, ook, math.nan)


def test_tpr_at_fpr_by_hand() -> None:
    ik = np.arange(100.0)  # 0 .. 99
    ook = [93.5, 94.0, 94.5, 200.0]
    # 5% of 100 -> at most 5 flagged in-knowledge scores (95..99): threshold just above 94
    threshold = threshold_at_fpr(ik, 0.05)
    assert threshold == math.nextafter(94.0, math.inf)
    assert rates_at_threshold(ik, ook, threshold).fpr == 0.05
    assert tpr_at_fpr(ik, ook) == 0.5
    assert threshold_at_fpr([1.0, 2.0], 0.6) == math.nextafter(1.0, math.inf)
    assert threshold_at_fpr([1.0], 0.5) == math.nextafter(1.0, math.inf)


@given(ik=scores, ook=scores, fpr=st.floats(0.01, 0.99))
@settings(max_examples=150)
def test_tpr_at_fpr_is_the_best_tpr_within_the_budget(
    ik: list[float], ook: list[float], fpr: float
) -> None:
    candidates = sorted({*ik, *ook, math.inf})
    feasible = [
        rates_at_threshold(ik, ook, c).tpr
        for c in candidates
        if rates_at_threshold(ik, ook, c).fpr <= fpr
    ]
    assert tpr_at_fpr(ik, ook, fpr) == max(feasible)
    threshold = threshold_at_fpr(ik, fpr)
    assert rates_at_threshold(ik, ook, threshold).fpr <= fpr
    if math.isfinite(threshold):  # one step lower would break the budget
        assert rates_at_threshold(ik, ook, math.nextafter(threshold, -math.inf)).fpr > fpr


def test_metric_validation() -> None:
    with pytest.raises(ValueError, match="scores_out needs at least 1"):
        auroc([0.1], [])
    with pytest.raises(ValueError, match="scores_in must be 1-D"):
        auprc([[0.1]], [0.2])
    with pytest.raises(ValueError, match="scores_in contains NaN"):
        rates_at_threshold([math.nan], [0.2], 0.1)
    with pytest.raises(ValueError, match=r"fpr must be in \(0, 1\)"):
        tpr_at_fpr([0.1], [0.2], fpr=0.0)


def test_balanced_runs_keys_and_determinism() -> None:
    rng = np.random.default_rng(3)
    ik, ook = rng.normal(0, 1, 500), rng.normal(1.5, 1, 400)
    result = balanced_runs(ik, ook, samples=100, runs=5, seed=11, threshold=1.0)
    for key in ("auroc", "auprc", "tpr_at_5_fpr", "der", "fpr", "tpr_at_5_fpr_oracle"):
        assert 0.0 <= result[key] <= 1.0
        assert result[f"{key}_std"] > 0.0  # subsamples differ between runs
    assert (result["n_in"], result["n_out"], result["runs"]) == (100, 100, 5)
    assert result == balanced_runs(ik, ook, samples=100, runs=5, seed=11, threshold=1.0)
    assert result != balanced_runs(ik, ook, samples=100, runs=5, seed=12, threshold=1.0)
    assert 0.8 < result["auroc"] < 0.9  # Phi(1.5 / sqrt 2) = 0.856
    assert "der" not in balanced_runs(ik, ook, samples=100, runs=2)


def test_balanced_runs_uses_everything_without_replacement_when_samples_exceed_sizes() -> None:
    ik, ook = [0.1, 0.4, 0.2, 0.3], [0.35, 0.8, 0.05]
    result = balanced_runs(ik, ook, samples=300, runs=3, threshold=0.3)
    # a draw without replacement of every score is the full set: one run, not three alike
    assert (result["n_in"], result["n_out"], result["runs"]) == (4, 3, 1)
    assert result["auroc"] == pytest.approx(auroc(ik, ook))
    assert result["auroc_std"] == 0.0
    point = rates_at_threshold(ik, ook, 0.3)
    assert (result["tpr_at_5_fpr"], result["fpr"], result["der"]) == pytest.approx(point)
    assert result["tpr_at_5_fpr_oracle"] == pytest.approx(tpr_at_fpr(ik, ook))
    assert balanced_runs(ik, ook, runs=1)["auroc_std"] == 0.0
    one_side = balanced_runs(ik, ook, samples=3, runs=3)  # in-knowledge draws still differ
    assert (one_side["n_in"], one_side["n_out"], one_side["runs"]) == (3, 3, 3)


def test_balanced_runs_validation() -> None:
    with pytest.raises(ValueError, match="samples and runs must be >= 1"):
        balanced_runs([0.1], [0.2], samples=0)
    with pytest.raises(ValueError, match="samples and runs must be >= 1"):
        balanced_runs([0.1], [0.2], runs=0)


def test_wilson_interval_known_values() -> None:
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    low90, high90 = wilson_interval(30, 100, confidence=0.9)
    low99, high99 = wilson_interval(30, 100, confidence=0.99)
    assert low99 < low90 < 0.3 < high90 < high99


def test_wilson_interval_uses_the_normal_quantile() -> None:
    # z = 1.959963984540054 at 95%; with no success the interval is [0, z^2 / (n + z^2)]
    z = 1.959963984540054
    low, high = wilson_interval(0, 100)
    assert low == 0.0
    assert high == pytest.approx(z * z / (100 + z * z), rel=1e-15)


def test_wilson_interval_matches_scipys_normal_quantile() -> None:
    stats = pytest.importorskip("scipy.stats")
    for confidence in (0.5, 0.8, 0.9, 0.95, 0.99, 0.999):
        z = float(stats.norm.ppf(0.5 + confidence / 2))
        n, successes = 50, 7
        rate, denominator = successes / n, 1 + z * z / n
        centre = (rate + z * z / (2 * n)) / denominator
        half = z / denominator * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n))
        assert wilson_interval(successes, n, confidence) == pytest.approx(
            (centre - half, centre + half), rel=1e-14
        )


@given(data=st.data(), n=st.integers(1, 10_000), confidence=st.floats(0.5, 0.999))
def test_wilson_interval_contains_the_estimate(
    data: st.DataObject, n: int, confidence: float
) -> None:
    successes = data.draw(st.integers(0, n))
    low, high = wilson_interval(successes, n, confidence)
    assert 0.0 <= low <= successes / n <= high <= 1.0


@pytest.mark.parametrize(("successes", "n"), [(-1, 10), (11, 10), (0, 0)])
def test_wilson_interval_validation(successes: int, n: int) -> None:
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(successes, n)
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 2, confidence=1.0)


def test_auroc_standard_error_by_hand() -> None:
    # A = 0.9, 20 in, 10 out: Q1 = 0.9 / 1.1, Q2 = 1.62 / 1.9
    variance = 0.09 + 9 * (0.9 / 1.1 - 0.81) + 19 * (1.62 / 1.9 - 0.81)
    assert auroc_standard_error(0.9, 20, 10) == pytest.approx(math.sqrt(variance / 200))
    assert auroc_standard_error(1.0, 5, 5) == 0.0
    assert auroc_standard_error(0.8, 400, 400) < auroc_standard_error(0.8, 100, 100)


def test_auroc_standard_error_matches_the_spread_of_simulated_aurocs() -> None:
    rng = np.random.default_rng(5)
    areas = [auroc(rng.normal(size=120), rng.normal(1.2, 1.0, 150)) for _ in range(600)]
    predicted = auroc_standard_error(float(np.mean(areas)), 120, 150)
    assert np.std(areas) == pytest.approx(predicted, rel=0.15)


@pytest.mark.parametrize(
    ("area", "n_in", "n_out", "message"),
    [(1.5, 5, 5, "area"), (0.5, 0, 5, "sample sizes")],
)
def test_auroc_standard_error_refuses_bad_input(area, n_in, n_out, message) -> None:
    with pytest.raises(ValueError, match=message):
        auroc_standard_error(area, n_in, n_out)
