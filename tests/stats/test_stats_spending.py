"""Per-window levels of the monitor's false-alarm schemes: hand-computed values and bounds."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragbound.stats.spending import (
    SCHEMES,
    alpha_spending,
    arl_level,
    period_floor,
    period_key,
    period_level,
    window_level,
    windows_per_period,
)

alphas = st.floats(min_value=1e-6, max_value=0.5)
window_counts = st.integers(min_value=1, max_value=5_000)


def test_hand_computed_levels() -> None:
    # 6 / pi^2 = 0.607927...
    assert alpha_spending(0.05, 0) == pytest.approx(0.0303964, rel=1e-5)
    assert alpha_spending(0.05, 999) == pytest.approx(3.03964e-8, rel=1e-5)  # "blind" at 1,000
    assert period_floor(0.05, 96) == pytest.approx(0.05 * 0.607927 / 9216, rel=1e-6)
    assert period_floor(0.05, 1) == alpha_spending(0.05, 0)
    assert arl_level(1000) == 0.001 and arl_level(2.5) == 0.4
    assert period_level(0.05, 0, 97) == period_level(0.05, 96, 97) == 0.05 / 97
    assert period_level(0.05, 2, None) == pytest.approx(0.05 * 0.607927 / 9, rel=1e-5)
    # 15-minute windows: starts at :00, :15, ... of a day, plus one when a start lands on
    # the boundary itself after rounding; sliding by 5 minutes triples that
    assert windows_per_period(86_400, 900) == 97 and windows_per_period(86_400, 300) == 289
    assert windows_per_period(3_600, 7_200) == 1 and windows_per_period(3_600, 1_000) == 4
    assert window_level("spending", 0.05, 3) == pytest.approx(0.05 * 0.607927 / 16, rel=1e-6)
    # the period scheme looks only at the rank inside the period, never at the stream position
    assert window_level("period", 0.05, 10_000, index_in_period=3) == window_level(
        "spending", 0.05, 3
    )
    assert window_level("period", 0.05, 10**6, index_in_period=5, windows_per_period=8) == (
        0.05 / 8
    )
    assert window_level("arl", 0.05, 10_000, arl=200) == 0.005
    assert window_level("none", 0.05, 10_000) == 0.05


def test_periods_are_aligned_blocks() -> None:
    day = 86_400.0
    assert [period_key(t, day) for t in (0.0, day - 1, day, 20_000 * day + 5)] == [0, 0, 1, 20_000]
    assert [period_key(i, 96) for i in (0, 95, 96, 250)] == [0, 0, 1, 2]
    assert period_key(-1.0, day) == -1  # before 1970 still a period of its own


@given(alpha=alphas, windows=window_counts, known=st.booleans())
def test_a_period_never_spends_more_than_alpha(alpha: float, windows: int, known: bool) -> None:
    bound = windows if known else None
    levels = [period_level(alpha, j, bound) for j in range(windows)]
    assert math.fsum(levels) <= alpha * (1 + 1e-12)
    floor = alpha / windows if known else period_floor(alpha, windows)
    assert min(levels) == pytest.approx(floor)
    assert all(level >= floor * (1 - 1e-12) for level in levels)


@given(
    period=st.floats(min_value=0.1, max_value=1e4),
    step=st.floats(min_value=0.1, max_value=1e4),
    offset=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_windows_per_period_bounds_the_starts_in_any_period(
    period: float, step: float, offset: float
) -> None:
    # starts offset*step + k*step, accumulated as the monitor does; count those in period 0
    bound = windows_per_period(period, step)
    start, count = offset * step, 0
    while start < period:
        count += 1
        start += step
    assert count <= bound


@given(alpha=alphas, windows=window_counts)
def test_the_whole_stream_spending_stays_below_alpha(alpha: float, windows: int) -> None:
    assert math.fsum(alpha_spending(alpha, i) for i in range(windows)) <= alpha


@given(
    scheme=st.sampled_from(SCHEMES),
    alpha=alphas,
    index=st.integers(min_value=0, max_value=10**9),
    arl=st.floats(min_value=1.001, max_value=1e9),
)
def test_levels_are_positive_and_at_most_alpha_or_one_over_arl(
    scheme: str, alpha: float, index: int, arl: float
) -> None:
    level = window_level(scheme, alpha, index, index_in_period=index % 96, arl=arl)
    assert 0.0 < level <= (1.0 / arl if scheme == "arl" else alpha)


@given(arl=st.floats(min_value=1.001, max_value=1e7), windows=window_counts)
def test_arl_expects_at_most_windows_over_arl_false_alarms(arl: float, windows: int) -> None:
    expected = math.fsum(window_level("arl", 0.05, i, arl=arl) for i in range(windows))
    assert expected == pytest.approx(windows / arl)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: alpha_spending(1.5, 0), "alpha"),
        (lambda: alpha_spending(0.05, -1), "window_index"),
        (lambda: alpha_spending(0.05, 1.5), "window_index"),
        (lambda: period_floor(0.05, 0), "windows"),
        (lambda: period_level(0.05, 5, 5), "index_in_period must be < windows_per_period"),
        (lambda: period_level(0.05, -1, None), "index_in_period"),
        (lambda: windows_per_period(0.0, 60.0), "period_seconds"),
        (lambda: windows_per_period(60.0, float("inf")), "step_seconds"),
        (lambda: arl_level(1.0), "arl"),
        (lambda: arl_level(float("inf")), "arl"),
        (lambda: arl_level(-3), "arl"),
        (lambda: period_key(5.0, 0.0), "period length"),
        (lambda: period_key(float("nan"), 1.0), "position"),
        (lambda: window_level("bonferroni", 0.05, 0), "scheme"),
        (lambda: window_level("period", 0.05, 0), "index_in_period"),
        (lambda: window_level("arl", 0.05, 0), "arl"),
        (lambda: window_level("none", 0.0, 0), "alpha"),
    ],
)
def test_bad_input_is_a_clear_value_error(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
