"""Intervals for benchmark rates: Wilson (hand-computed values, properties) and the bootstrap."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragbound.stats import bootstrap_interval, wilson_interval


def test_wilson_matches_hand_computed_values() -> None:
    # 8/10, z = 1.96: centre (0.8 + 0.19208) / 1.38416 = 0.7167, half 0.2263
    assert wilson_interval(8, 10) == pytest.approx((0.490, 0.943), abs=5e-4)
    assert wilson_interval(0, 10)[1] == pytest.approx(0.278, abs=5e-4)
    assert wilson_interval(0, 10)[0] == 0.0
    # 45/50 as the sample corpus documents it: roughly 0.79 to 0.96
    assert wilson_interval(45, 50) == pytest.approx((0.786, 0.957), abs=5e-4)


@given(
    successes=st.integers(0, 20),
    extra=st.integers(0, 20),
    scale=st.integers(2, 50),
    confidence=st.floats(0.5, 0.999),
)
def test_wilson_narrows_as_n_grows_at_a_fixed_rate(
    successes: int, extra: int, scale: int, confidence: float
) -> None:
    n = successes + extra + 1
    low, high = wilson_interval(successes, n, confidence)
    big_low, big_high = wilson_interval(successes * scale, n * scale, confidence)
    assert 0.0 <= big_low <= successes / n <= big_high <= 1.0
    assert big_high - big_low < high - low


def test_bootstrap_is_reproducible_with_a_seed() -> None:
    values = np.r_[np.ones(13), np.zeros(7)]
    first = bootstrap_interval(values, seed=7)
    assert bootstrap_interval(values, seed=7) == first
    assert bootstrap_interval(values, seed=8) != first
    low, high = first
    assert low < 0.65 < high


def test_bootstrap_agrees_with_wilson_on_a_large_balanced_sample() -> None:
    values = np.r_[np.ones(200), np.zeros(200)]
    boot = bootstrap_interval(values, confidence=0.95, resamples=4000, seed=1)
    assert boot == pytest.approx(wilson_interval(200, 400), abs=0.01)


def test_bootstrap_of_another_statistic_and_a_point_sample() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 100.0]
    low, high = bootstrap_interval(values, statistic=np.median, seed=0)
    assert 1.0 <= low <= 3.0 <= high <= 100.0
    # no spread, no width: why rates default to Wilson
    assert bootstrap_interval([1.0] * 10) == (1.0, 1.0)


@given(
    values=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=30),
    confidence=st.floats(0.5, 0.99),
)
def test_bootstrap_mean_interval_stays_within_the_sample(
    values: list[float], confidence: float
) -> None:
    low, high = bootstrap_interval(values, confidence=confidence, resamples=200, seed=0)
    slack = 1e-9 * max(1.0, max(abs(v) for v in values))
    assert min(values) - slack <= low <= high <= max(values) + slack


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"values": []}, "at least 1"),
        ({"values": [1.0, float("nan")]}, "NaN"),
        ({"values": [[1.0]]}, "1-D"),
        ({"values": [1.0], "confidence": 1.0}, "confidence"),
        ({"values": [1.0], "resamples": 0}, "resamples"),
    ],
)
def test_bootstrap_rejects_bad_input(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bootstrap_interval(**kwargs)
