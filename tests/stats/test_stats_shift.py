"""Two-sample shift tests: hand-computed values, validity under the null, power, bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragbound.stats import (
    EmpiricalNull,
    alpha_spending,
    bonferroni_alpha,
    exceedance_test,
    ks_critical_value,
    ks_two_sample,
    mmd_permutation_test,
)


def test_ks_statistic_by_hand() -> None:
    # F_ref steps 1/3 at 1, 2, 3; F_test steps 1/4 at 2, 3, 4, 5. At t = 3: 1 - 2/4 = 0.5
    result = ks_two_sample([1.0, 2.0, 3.0], [2.0, 3.0, 4.0, 5.0])
    assert result.statistic == pytest.approx(0.5)
    assert (result.n_reference, result.n_test, result.method_used) == (3, 4, "exact")
    assert 0.0 < result.p_value <= 1.0 and not result.shifted


def test_the_papers_critical_value_by_hand() -> None:
    # sqrt(-ln(0.025) * 100 / (2 * 2500)) = sqrt(3.68888 * 0.02) = sqrt(0.0737776) = 0.27162
    assert ks_critical_value(50, 50, 0.05) == pytest.approx(0.27162, abs=1e-5)


def test_exact_critical_value_by_hand_for_tiny_samples() -> None:
    # n = m = 2: D = 1 only when both reference values lie below both test values or above,
    # 2 of the C(4, 2) = 6 orders: P(D >= 1) = 1/3; D >= 1/2 always holds (p = 1).
    result = ks_two_sample([0.0, 1.0], [2.0, 3.0], alpha=0.4)
    assert result.statistic == 1.0 and result.p_value == pytest.approx(1 / 3)
    assert result.critical_value == 1.0 and result.shifted
    # at alpha = 0.3 no order of four values is rare enough: no shift can be found
    never = ks_two_sample([0.0, 1.0], [2.0, 3.0], alpha=0.3)
    assert never.critical_value == math.inf and not never.shifted


def _paper_and_exact_disagree(seed: int) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Samples where the exact p-value rejects but D is below the paper's asymptotic value."""
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(20, 200)), int(rng.integers(10, 200))
    alpha = float(rng.choice([0.01, 0.05, 0.1]))
    x, y = rng.normal(size=n), rng.normal(rng.uniform(0.2, 0.8), size=m)
    exact = ks_two_sample(x, y, alpha=alpha)
    if exact.p_value <= alpha and exact.statistic < ks_critical_value(n, m, alpha):
        return x, y, alpha
    return None


def test_ks_never_rejects_below_its_reported_critical_value() -> None:
    # The old result decided with the exact p-value but reported the paper's asymptotic
    # critical value, so some alarms showed a statistic below the critical value. Search
    # for such a case near the boundary and check that the reported value now agrees.
    case = next(c for seed in range(500) if (c := _paper_and_exact_disagree(seed)) is not None)
    x, y, alpha = case
    result = ks_two_sample(x, y, alpha=alpha)
    assert result.shifted and result.p_value <= alpha
    assert result.statistic >= result.critical_value
    assert result.critical_value < ks_critical_value(x.size, y.size, alpha)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    n=st.integers(1, 120),
    m=st.integers(1, 120),
    alpha=st.floats(0.001, 0.5),
    shift=st.floats(0.0, 1.5),
    decimals=st.sampled_from([1, 8]),
    seed=st.integers(0, 10_000),
)
def test_ks_decision_p_value_and_critical_value_agree(
    n: int, m: int, alpha: float, shift: float, decimals: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(size=n), decimals)  # 1 decimal: many ties
    y = np.round(rng.normal(shift, 1.0, size=m), decimals)
    for method in ("exact", "asymp"):
        result = ks_two_sample(x, y, alpha=alpha, method=method)
        assert result.method_used == ("exact" if n == m == 1 else method)
        assert (
            result.shifted
            == (result.p_value <= alpha)
            == (result.statistic >= result.critical_value)
        )


def _ks_samples(seed: int, n: int, m: int, decimals: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    shift = rng.choice([0.0, 0.1, 0.3, 1.0])
    return np.round(rng.normal(size=n), decimals), np.round(rng.normal(shift, 1, m), decimals)


@pytest.mark.parametrize("method", ["exact", "asymp"])
@pytest.mark.parametrize(
    ("n", "m"), [(1, 2), (3, 4), (10, 10), (17, 50), (50, 50), (120, 7), (500, 50), (800, 600)]
)
@pytest.mark.parametrize("decimals", [0, 1, 8])  # 0 and 1 decimals: many ties
def test_ks_p_value_and_statistic_match_scipys_ks_2samp(
    method: str, n: int, m: int, decimals: int
) -> None:
    stats = pytest.importorskip("scipy.stats")
    for seed in range(4):
        x, y = _ks_samples(seed, n, m, decimals)
        result = ks_two_sample(x, y, method=method)
        reference = stats.ks_2samp(x, y, method=method)
        assert result.statistic == pytest.approx(reference.statistic, abs=1e-12)
        assert result.p_value == pytest.approx(reference.pvalue, abs=1e-10)


def test_one_value_against_one_is_tested_exactly() -> None:
    # scipy's asymptotic p-value is NaN here (an asymptotic size of 0): the exact one is 1
    result = ks_two_sample([1.0], [2.0], method="asymp")
    assert (result.method_used, result.statistic, result.p_value) == ("exact", 1.0, 1.0)


def test_auto_is_exact_up_to_ten_thousand_values_a_side() -> None:
    assert ks_two_sample(np.arange(10_000.0), np.arange(5.0)).method_used == "exact"
    assert ks_two_sample(np.arange(10_001.0), np.arange(5.0)).method_used == "asymp"


def test_exact_turns_asymptotic_past_two_to_the_31_grid_points() -> None:
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=60_000), rng.normal(size=59_999)  # 60000 x 59999 > 2^31
    assert ks_two_sample(x, y, method="exact").method_used == "asymp"
    assert ks_two_sample(x[:40_000], y[:40_000], method="exact").method_used == "exact"


def test_large_samples_match_scipys_asymptotic_p_value() -> None:
    stats = pytest.importorskip("scipy.stats")
    x, y = _ks_samples(5, 12_000, 3_001, 3)
    result = ks_two_sample(x, y)
    assert result.method_used == "asymp"
    assert result.p_value == pytest.approx(stats.ks_2samp(x, y).pvalue, abs=1e-10)


def test_ks_detects_a_clear_shift_and_the_critical_value_agrees() -> None:
    rng = np.random.default_rng(0)
    result = ks_two_sample(rng.normal(size=200), rng.normal(1.0, 1.0, 200))
    assert result.shifted and result.p_value < 1e-6
    assert result.statistic > result.critical_value


def test_ks_is_super_uniform_under_the_null() -> None:
    rng = np.random.default_rng(1)
    p = np.array(
        [ks_two_sample(rng.normal(size=40), rng.normal(size=25)).p_value for _ in range(400)]
    )
    for alpha in (0.05, 0.1, 0.2):
        assert np.mean(p <= alpha) <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / p.size)


def test_mmd_p_value_counts_the_observed_statistic() -> None:
    rng = np.random.default_rng(2)
    far = mmd_permutation_test(rng.normal(size=(30, 3)), rng.normal(4.0, 1.0, (30, 3)), 99)
    assert far.p_value == pytest.approx(1 / 100) and far.statistic > 0
    same = mmd_permutation_test(np.ones((5, 2)), np.ones((6, 2)), 49)
    assert same.statistic == pytest.approx(0.0, abs=1e-12) and same.p_value == 1.0
    assert same.bandwidth == 1.0  # every point coincides: the median distance 0 is guarded


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n_perm=st.integers(1, 60))
def test_mmd_p_value_is_a_positive_multiple_of_one_over_n_plus_one(seed: int, n_perm: int) -> None:
    rng = np.random.default_rng(seed)
    result = mmd_permutation_test(rng.normal(size=(6, 2)), rng.normal(size=(7, 2)), n_perm, seed)
    steps = result.p_value * (1 + n_perm)
    assert 0 < result.p_value <= 1 and steps == pytest.approx(round(steps))


def test_mmd_is_super_uniform_under_the_null() -> None:
    rng = np.random.default_rng(3)
    p = np.array(
        [
            mmd_permutation_test(
                rng.normal(size=(12, 2)), rng.normal(size=(10, 2)), 49, seed
            ).p_value
            for seed in range(200)
        ]
    )
    for alpha in (0.06, 0.1, 0.2):
        assert np.mean(p <= alpha) <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / p.size)


def test_exceedance_by_hand() -> None:
    # q = 0 of 19 reference scores reach 18.5. Of 19 + 2 exchangeable scores, the largest is
    # a test score with probability 2/21: P(count >= 1) = 2/21. Both reach it: 2/21 * 1/20.
    one = exceedance_test(list(range(19)), [30.0, 1.0], critical_value=18.5)
    assert (one.n_exceed, one.n_reference_at_or_above) == (1, 0)
    assert one.p_value == pytest.approx(2 / 21) and one.expected_rate == pytest.approx(1 / 20)
    both = exceedance_test(list(range(19)), [30.0, 31.0], critical_value=18.5)
    assert both.p_value == pytest.approx(2 / 21 / 20)
    # q = 1 of 3 reach 2.5 (the 2nd largest, 2, lies below): one test score reaches it with
    # probability at most 2/4; BetaBinomial(1, 2, 2) gives exactly 1/2.
    assert exceedance_test([1.0, 2.0, 3.0], [5.0], 2.5).p_value == pytest.approx(0.5)


def test_exceedance_with_nothing_reaching_or_everything_reaching() -> None:
    none = exceedance_test([1.0, 2.0], [0.0, 0.5], critical_value=math.inf)
    assert none.n_exceed == 0 and none.p_value == 1.0 and not none.shifted
    every = exceedance_test([1.0, 2.0], [3.0, 4.0], critical_value=-math.inf)
    assert every.n_reference_at_or_above == 2 and every.p_value == 1.0


def test_exceedance_is_valid_under_the_null_at_the_calibrated_critical_value() -> None:
    rng = np.random.default_rng(4)
    p = []
    for _ in range(2000):
        reference = rng.normal(size=60)
        critical = EmpiricalNull(reference).critical_value(0.1)
        p.append(exceedance_test(reference, rng.normal(size=20), critical).p_value)
    p_values = np.array(p)
    for alpha in (0.05, 0.1, 0.2):
        assert np.mean(p_values <= alpha) <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / 2000)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(n=st.integers(1, 80), m=st.integers(1, 40), q=st.integers(0, 80), data=st.data())
def test_exceedance_p_value_falls_as_more_test_scores_reach_the_critical_value(
    n: int, m: int, q: int, data
) -> None:
    q = min(q, n - 1)
    reference = np.concatenate([np.zeros(n - q), np.full(q, 2.0)])  # q of n at or above 1
    counts = sorted(data.draw(st.lists(st.integers(0, m), min_size=2, max_size=2)))
    p = [
        exceedance_test(reference, np.r_[np.full(j, 3.0), np.zeros(m - j)], 1.0).p_value
        for j in counts
    ]
    assert 0.0 < p[1] <= p[0] <= 1.0


def test_exceedance_sees_an_upper_tail_shift_ks_misses() -> None:
    # the real queries match the reference below its 90th percentile, but 30% of them lie in
    # the tail: 6 of 20 above a critical value at alpha = 0.05, where about 1 is expected
    reference = np.linspace(0.0, 1.0, 200)
    critical = EmpiricalNull(reference).critical_value(0.05)
    test = np.concatenate([np.linspace(0.0, 0.9, 14), np.full(6, 0.99)])
    assert exceedance_test(reference, test, critical).p_value < 0.01
    assert not ks_two_sample(reference, test).shifted


def test_window_levels() -> None:
    assert bonferroni_alpha(0.05, 10) == pytest.approx(0.005)
    levels = [alpha_spending(0.05, i) for i in range(10_000)]
    assert sum(levels) < 0.05 and all(a > b for a, b in itertools.pairwise(levels))
    assert levels[0] == pytest.approx(0.05 * 6 / math.pi**2)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ks_two_sample([], [1.0]), "reference"),
        (lambda: ks_two_sample([1.0, float("nan")], [1.0]), "NaN"),
        (lambda: ks_two_sample([1.0], [1.0], alpha=1.5), "alpha"),
        (lambda: ks_two_sample([1.0], [1.0], method="fast"), "method"),
        (lambda: mmd_permutation_test(np.ones((3, 2)), np.ones((3, 4))), "dimension"),
        (lambda: mmd_permutation_test(np.ones((1, 2)), np.ones((3, 2))), "at least 2"),
        (lambda: mmd_permutation_test(np.ones((3, 2)), np.ones((3, 2)), 0), "n_permutations"),
        (lambda: bonferroni_alpha(0.05, 0), "n_tests"),
        (lambda: alpha_spending(0.05, -1), "window_index"),
        (lambda: ks_critical_value(0, 5, 0.05), "sample sizes"),
        (lambda: exceedance_test([1.0], [], 0.5), "test"),
        (lambda: exceedance_test([1.0], [1.0], float("nan")), "NaN"),
        (lambda: exceedance_test([1.0], [1.0], 0.5, alpha=0.0), "alpha"),
    ],
)
def test_bad_input_is_a_clear_value_error(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
