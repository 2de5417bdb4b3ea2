"""Tests for ragbound.stats.statistics: hand-computed values, invariances and validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ragbound.stats import (
    META,
    STATISTICS,
    UNIVARIATE,
    avgknn,
    combine_p_values,
    energy,
    entropy,
    fisher,
    knn,
    mss,
    simes,
    univariate_scores,
)
from ragbound.stats.statistics import log_softmax_rows, logsumexp_rows

# Row 0: a peaked retrieval; row 1: a flat one (all three neighbours equally similar).
SIMS = np.array([[0.9, 0.5, 0.1], [0.3, 0.3, 0.3]])


def _entropy_by_hand(row: list[float]) -> float:
    weights = [math.exp(s) for s in row]
    probs = [w / sum(weights) for w in weights]
    return -sum(p * math.log(p) for p in probs)


def test_constants() -> None:
    assert UNIVARIATE == ("mss", "knn", "avgknn", "entropy", "energy")
    assert META == ("fisher", "simes")
    assert STATISTICS == UNIVARIATE + META


def test_hand_computed_univariate_values() -> None:
    # mss = -s_1: [-0.9, -0.3]; knn = -s_k: [-0.1, -0.3]; avgknn = -mean: [-0.5, -0.3]
    np.testing.assert_allclose(mss(SIMS), [-0.9, -0.3])
    np.testing.assert_allclose(knn(SIMS), [-0.1, -0.3])
    np.testing.assert_allclose(avgknn(SIMS), [-0.5, -0.3])
    # softmax(0.9, 0.5, 0.1) = (0.47178, 0.31624, 0.21198) -> H = 1.047333 nats; flat row: ln 3
    np.testing.assert_allclose(entropy(SIMS), [1.0473331, math.log(3)], rtol=1e-6)
    assert entropy(SIMS)[0] == pytest.approx(_entropy_by_hand([0.9, 0.5, 0.1]), rel=1e-12)
    # energy = -ln(e^0.9 + e^0.5 + e^0.1) = -ln(5.2134952) = -1.6512505; flat: -(0.3 + ln 3)
    np.testing.assert_allclose(energy(SIMS), [-1.6512505, -(0.3 + math.log(3))], rtol=1e-6)
    # tau = 0.5: -0.5 * ln(e^1.8 + e^1.0 + e^0.2) = -1.1507589; flat: -0.5 * (0.6 + ln 3)
    expected = [-1.1507589, -0.5 * (0.6 + math.log(3))]
    np.testing.assert_allclose(energy(SIMS, tau=0.5), expected, rtol=1e-6)


def test_outputs_are_float64_vectors_and_input_untouched() -> None:
    sims = SIMS.copy()
    for name in UNIVARIATE:
        out = univariate_scores(name, sims)
        assert out.dtype == np.float64
        assert out.shape == (2,)
    out = mss(sims)
    out[0] = 123.0
    np.testing.assert_array_equal(sims, SIMS)


def test_dispatcher_matches_functions_and_passes_tau() -> None:
    funcs = {"mss": mss, "knn": knn, "avgknn": avgknn, "entropy": entropy, "energy": energy}
    for name, func in funcs.items():
        np.testing.assert_array_equal(univariate_scores(name, SIMS), func(SIMS))
    np.testing.assert_array_equal(univariate_scores("energy", SIMS, tau=0.5), energy(SIMS, 0.5))


def test_dispatcher_rejects_unknown_name_listing_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown .*'cosine'.*mss, knn, avgknn, entropy, energy"):
        univariate_scores("cosine", SIMS)
    with pytest.raises(ValueError, match="fisher, simes"):
        combine_p_values("mss", [[0.5]])


def test_empty_batch_gives_empty_result() -> None:
    for name in UNIVARIATE:
        assert univariate_scores(name, np.empty((0, 4))).shape == (0,)


def test_large_similarities_are_numerically_stable() -> None:
    sims = np.array([[1000.0, 999.0]])
    # softmax = (1, e^-1) / (1 + e^-1); energy = -(1000 + ln(1 + e^-1))
    assert energy(sims)[0] == pytest.approx(-(1000 + math.log1p(math.exp(-1))))
    assert entropy(sims)[0] == pytest.approx(_entropy_by_hand([1.0, 0.0]))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (np.array([0.9, 0.5, 0.1]), r"sims must be 2-D \(n_queries, k\), got shape \(3,\)"),
        (np.ones((2, 2, 2)), "must be 2-D"),
        (np.empty((2, 0)), "k >= 1"),
        (np.array([[0.9, np.nan]]), r"NaN \(first at index \(0, 1\)\)"),
        (np.array([[np.inf, 0.1]]), "infinite"),
        (np.array([[0.9, 0.5], [0.1, 0.2]]), "sorted descending.*row 1"),
        ([["a", "b"]], "numeric"),
    ],
)
def test_sims_validation(bad: object, message: str) -> None:
    for name in UNIVARIATE:
        with pytest.raises(ValueError, match=message):
            univariate_scores(name, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("tau", [0.0, -1.0, math.nan, math.inf])
def test_energy_rejects_bad_tau(tau: float) -> None:
    with pytest.raises(ValueError, match="tau must be a finite number > 0"):
        energy(SIMS, tau=tau)


def _sorted_rows(draw: st.DrawFn) -> np.ndarray:
    n = draw(st.integers(1, 6))
    k = draw(st.integers(1, 8))
    values = draw(arrays(np.float64, (n, k), elements=st.floats(-1, 1)))
    return -np.sort(-values, axis=1)


sorted_sims = st.composite(_sorted_rows)()


@given(sims=sorted_sims, shift=st.floats(0.01, 2.0), tau=st.floats(0.05, 5.0))
@settings(max_examples=60, deadline=None)
def test_shifting_similarities_down_raises_scores_by_the_shift(
    sims: np.ndarray, shift: float, tau: float
) -> None:
    lower = sims - shift
    for name in ("mss", "knn", "avgknn"):
        delta = univariate_scores(name, lower) - univariate_scores(name, sims)
        np.testing.assert_allclose(delta, shift, atol=1e-9)
    np.testing.assert_allclose(energy(lower, tau) - energy(sims, tau), shift, atol=1e-9)
    # softmax is shift invariant, so the entropy does not move
    np.testing.assert_allclose(entropy(lower), entropy(sims), atol=1e-9)


@given(sims=sorted_sims, tau=st.floats(0.05, 5.0))
@settings(max_examples=60, deadline=None)
def test_orderings_and_ranges(sims: np.ndarray, tau: float) -> None:
    k = sims.shape[1]
    assert np.all(mss(sims) <= avgknn(sims) + 1e-12)
    assert np.all(avgknn(sims) <= knn(sims) + 1e-12)
    # logsumexp is between the max and max + log k
    assert np.all(energy(sims, tau) <= mss(sims) + 1e-9)
    assert np.all(energy(sims, tau) >= mss(sims) - tau * math.log(k) - 1e-9)
    assert np.all(entropy(sims) >= -1e-12)
    assert np.all(entropy(sims) <= math.log(k) + 1e-9)


@given(k=st.integers(1, 50), value=st.floats(-1, 1))
def test_constant_row_has_entropy_log_k(k: int, value: float) -> None:
    assert entropy(np.full((1, k), value))[0] == pytest.approx(math.log(k), abs=1e-12)


def test_fisher_and_simes_hand_values() -> None:
    pvals = np.array([[1.0, 1.0], [0.5, 0.25]])
    # fisher: -2 (ln 1 + ln 1) = 0; -2 (ln 0.5 + ln 0.25) = 2 ln 8 = 4.158883
    np.testing.assert_allclose(fisher(pvals), [0.0, 2 * math.log(8)])
    assert not np.signbit(fisher(pvals)[0])
    # simes: min(2*1/1, 2*1/2) = 1; sorted (0.25, 0.5): min(2*0.25/1, 2*0.5/2) = 0.5; negated
    np.testing.assert_allclose(simes(pvals), [-1.0, -0.5])
    # sorted (0.01, 0.03, 0.5): min(0.03, 0.045, 0.5) = 0.03
    np.testing.assert_allclose(simes([[0.01, 0.5, 0.03]]), [-0.03])
    np.testing.assert_array_equal(combine_p_values("fisher", pvals), fisher(pvals))
    np.testing.assert_array_equal(combine_p_values("simes", pvals), simes(pvals))


@given(k=st.integers(1, 40))
def test_all_ones_p_values(k: int) -> None:
    ones = np.ones((3, k))
    np.testing.assert_array_equal(fisher(ones), 0.0)
    np.testing.assert_array_equal(simes(ones), -1.0)


@given(
    pvals=arrays(np.float64, (4, 5), elements=st.floats(1e-6, 1.0)),
    col=st.integers(0, 4),
    factor=st.floats(0.01, 0.99),
)
@settings(max_examples=60)
def test_meta_statistics_grow_as_a_p_value_shrinks(
    pvals: np.ndarray, col: int, factor: float
) -> None:
    smaller = pvals.copy()
    smaller[:, col] *= factor
    assert np.all(fisher(smaller) > fisher(pvals))
    assert np.all(simes(smaller) >= simes(pvals))
    assert np.all((simes(pvals) >= -1) & (simes(pvals) < 0))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([[0.5, 0.0]], r"\(0, 1\]"),
        ([[1.5]], r"\(0, 1\]"),
        ([[-0.1]], r"\(0, 1\]"),
        ([[np.nan, 0.5]], "NaN"),
        ([0.5, 0.5], "2-D"),
    ],
)
def test_pvals_validation(bad: object, message: str) -> None:
    for func in (fisher, simes):
        with pytest.raises(ValueError, match=message):
            func(bad)  # type: ignore[arg-type]


def _realistic_rows(seed: int, n: int = 500, k: int = 32) -> np.ndarray:
    """Top-k cosine similarities like a sentence embedder's: in [0.2, 0.9], sorted descending.

    Each row has its own level (how close the corpus is) and its own gap between the nearest
    chunks and the rest, so mean and maximum do not move together.
    """
    rng = np.random.default_rng(seed)
    level = rng.uniform(0.3, 0.75, size=(n, 1))
    gap = rng.uniform(0.0, 0.25, size=(n, 1))
    decay = np.exp(-np.arange(k) / rng.uniform(1.0, 6.0, size=(n, 1)))
    sims = level + gap * decay + rng.normal(0, 0.02, size=(n, k))
    return -np.sort(-np.clip(sims, 0.2, 0.9), axis=1)


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_energy_at_tau_one_ranks_queries_like_avgknn(seed: int) -> None:
    # Over cosine similarities spanning 0.7, exp(s / 1) is nearly linear, so
    # -logsumexp(s) ~ -log k - mean(s): the paper's default temperature measures AvgKNN.
    sims = _realistic_rows(seed)
    assert _spearman(energy(sims, tau=1.0), avgknn(sims)) > 0.99
    # a contrastive model's training temperature (0.05 for MiniLM) weights the nearest
    # chunks: energy then ranks like neither AvgKNN nor MSS alone
    sharp, flat = energy(sims, tau=0.05), energy(sims, tau=1.0)
    assert _spearman(sharp, avgknn(sims)) < _spearman(flat, avgknn(sims)) - 0.005
    assert _spearman(sharp, mss(sims)) > _spearman(flat, mss(sims)) + 0.02


def test_logsumexp_rows_by_hand() -> None:
    # ln(e^0 + e^0) = ln 2; ln(e^1 + e^-1000) = 1 + ln(1 + e^-1001) = 1 to double precision;
    # two maxima counted once each: ln(2 e^5 + e^4) = 5 + ln(2 + e^-1)
    rows = np.array([[0.0, 0.0, -800.0], [1.0, -1000.0, -1000.0], [5.0, 5.0, 4.0]])
    got = logsumexp_rows(rows)
    assert got[0] == pytest.approx(math.log(2), rel=1e-15)
    assert got[1] == 1.0
    assert got[2] == pytest.approx(5 + math.log(2 + math.exp(-1)), rel=1e-15)


def test_log_softmax_rows_by_hand() -> None:
    # (ln 2, ln 2) - ln(4) on a flat row of two; a row of 1000 and 999: -ln(1 + e^-1), -1 - ...
    got = log_softmax_rows(np.array([[3.0, 3.0], [1000.0, 999.0]]))
    np.testing.assert_allclose(got[0], [-math.log(2), -math.log(2)], rtol=1e-15)
    first = -math.log1p(math.exp(-1))
    np.testing.assert_allclose(got[1], [first, first - 1.0], rtol=1e-14)


@given(sims=sorted_sims, scale=st.sampled_from([1e-3, 1.0, 50.0, 700.0]))
@settings(max_examples=80, deadline=None)
def test_row_logsumexp_and_log_softmax_agree_with_each_other(
    sims: np.ndarray, scale: float
) -> None:
    values = sims * scale
    total = logsumexp_rows(values)
    assert np.all(total >= values.max(axis=1))
    assert np.all(total <= values.max(axis=1) + math.log(values.shape[1]) + 1e-12)
    # log_softmax = value - logsumexp, and its exponentials sum to 1
    log_p = log_softmax_rows(values)
    np.testing.assert_allclose(log_p, values - total[:, None], atol=1e-12 * scale + 1e-12)
    np.testing.assert_allclose(np.exp(log_p).sum(axis=1), 1.0, rtol=1e-12)


@given(sims=sorted_sims, scale=st.sampled_from([1e-3, 1.0, 50.0, 700.0]))
@settings(max_examples=80, deadline=None)
def test_row_logsumexp_and_log_softmax_are_scipys_bit_for_bit(
    sims: np.ndarray, scale: float
) -> None:
    special = pytest.importorskip("scipy.special")
    values = sims * scale
    np.testing.assert_array_equal(logsumexp_rows(values), special.logsumexp(values, axis=1))
    np.testing.assert_array_equal(log_softmax_rows(values), special.log_softmax(values, axis=1))
