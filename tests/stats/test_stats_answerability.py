"""Tests for ragbound.stats.answerability: calibration p-values and the shared alpha."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragbound.stats import EmpiricalNull
from ragbound.stats.answerability import calibration_p_values, shared_alpha


def test_calibration_p_values_by_hand() -> None:
    # (1 + #{others >= s}) / n: 0.1 -> (1 + 3) / 4; 0.5 -> (1 + 2) / 4 (the tie counts)
    p = calibration_p_values([0.1, 0.5, 0.5, 0.9])
    np.testing.assert_allclose(p, [1.0, 0.75, 0.75, 0.25])


def test_calibration_p_values_refuse_too_few_scores() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        calibration_p_values([0.3])


def test_shared_alpha_by_hand() -> None:
    # smallest p per question: 0.1, 0.1, 0.5, 0.9; alpha 0.5 allows 2 of 4 flagged
    p = [[0.1, 0.9], [0.9, 0.1], [0.5, 0.5], [0.9, 0.9]]
    assert shared_alpha(p, 0.5) == pytest.approx(0.1)
    # alpha 0.25 allows one: both 0.1s would flag two, so the level flags none (> 0 still)
    assert shared_alpha(p, 0.25) == pytest.approx(0.05)
    # one test has nothing to share with
    assert shared_alpha([[0.2], [0.4]], 0.05) == 0.05


def test_identical_tests_keep_the_whole_alpha_and_independent_ones_about_half() -> None:
    rng = np.random.default_rng(0)
    one = calibration_p_values(rng.normal(size=2000))
    assert shared_alpha(np.column_stack([one, one]), 0.05) == pytest.approx(0.05, abs=1e-3)
    other = calibration_p_values(rng.normal(size=2000))
    level = shared_alpha(np.column_stack([one, other]), 0.05)
    # independent: 1 - (1 - a)^2 = 0.05 gives a = 0.0253
    assert 0.022 < level < 0.028


def test_shared_alpha_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="alpha"):
        shared_alpha([[0.1, 0.2]], 1.5)
    with pytest.raises(ValueError, match="n questions"):
        shared_alpha([0.1, 0.2], 0.05)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    rho=st.floats(-0.5, 0.99),
    alpha=st.sampled_from([0.05, 0.1, 0.2]),
    n=st.sampled_from([50, 200]),
)
def test_the_union_at_the_shared_level_is_valid_on_new_questions(
    rho: float, alpha: float, n: int
) -> None:
    """Under the null (new questions exchangeable with the calibration ones), the share of
    new questions either test flags at the shared level stays at alpha (a 4-sigma bound
    over many calibrations, as the other Monte Carlo bounds in tests/stats)."""
    rng = np.random.default_rng(int((rho + 1) * 1000) + n)
    cov = [[1.0, rho], [rho, 1.0]]
    rates, per = [], 20
    for _ in range(300):
        cal = rng.multivariate_normal([0, 0], cov, size=n)
        new = rng.multivariate_normal([0, 0], cov, size=per)
        p_cal = np.column_stack([calibration_p_values(cal[:, j]) for j in range(2)])
        level = shared_alpha(p_cal, alpha)
        p_new = np.column_stack([EmpiricalNull(cal[:, j]).p_values(new[:, j]) for j in range(2)])
        rates.append(np.mean(p_new.min(axis=1) <= level))
    # 300 independent calibrations, each with its own rate: their mean within 4 standard
    # errors of alpha
    standard_error = np.std(rates, ddof=1) / np.sqrt(len(rates))
    assert np.mean(rates) <= alpha + 4 * standard_error
