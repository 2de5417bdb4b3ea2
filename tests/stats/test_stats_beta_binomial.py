"""Tests for ragbound.stats.beta_binomial: exact tails by hand, by simulation of their urn, and
against scipy where it is installed."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragbound.stats.beta_binomial import beta_binomial_cdf, beta_binomial_sf


def _pmf(j: int, m: int, a: int, b: int) -> Fraction:
    """C(m, j) B(j + a, m - j + b) / B(a, b), with B(x, y) = (x-1)! (y-1)! / (x+y-1)!."""

    def beta(x: int, y: int) -> Fraction:
        return Fraction(math.factorial(x - 1) * math.factorial(y - 1), math.factorial(x + y - 1))

    return math.comb(m, j) * beta(j + a, m - j + b) / beta(a, b)


def test_uniform_success_probability_gives_a_uniform_count() -> None:
    # Beta(1, 1) is uniform: the count of m draws is uniform on 0 .. m
    for k in range(-1, 6):
        assert beta_binomial_cdf(k, 4, 1, 1) == pytest.approx(min(max(k + 1, 0), 5) / 5)
        assert beta_binomial_sf(k, 4, 1, 1) == pytest.approx(1 - min(max(k + 1, 0), 5) / 5)


def test_exceeding_the_largest_of_n_reference_values() -> None:
    # q = 0 of n reference values reach the cut-off: each of m exchangeable new values
    # beats all n with chance 1 / (n + 1); P(none of m does) = n / (n + m)
    for n, m in [(19, 2), (99, 10), (5, 5)]:
        assert beta_binomial_cdf(0, m, 1, n) == pytest.approx(n / (n + m), rel=1e-15)
        assert beta_binomial_sf(0, m, 1, n) == pytest.approx(m / (n + m), rel=1e-15)


@given(m=st.integers(0, 30), a=st.integers(1, 30), b=st.integers(1, 30), data=st.data())
@settings(max_examples=150)
def test_tails_are_the_sums_of_the_exact_probabilities(m: int, a: int, b: int, data) -> None:
    k = data.draw(st.integers(-2, m + 2))
    below = sum((_pmf(j, m, a, b) for j in range(min(max(k + 1, 0), m + 1))), Fraction(0))
    assert beta_binomial_cdf(k, m, a, b) == float(below)  # both correctly rounded
    assert beta_binomial_sf(k, m, a, b) == pytest.approx(float(1 - below), abs=1e-16)


@given(m=st.integers(1, 200), a=st.integers(1, 500), b=st.integers(1, 500), data=st.data())
@settings(max_examples=100)
def test_the_two_tails_add_to_one_and_fall(m: int, a: int, b: int, data) -> None:
    k = data.draw(st.integers(0, m - 1))
    assert beta_binomial_cdf(k, m, a, b) + beta_binomial_sf(k, m, a, b) == pytest.approx(1.0)
    assert beta_binomial_sf(k + 1, m, a, b) <= beta_binomial_sf(k, m, a, b)


def test_the_urn_draws_agree_with_the_tail() -> None:
    # Polya's urn: a white and b black balls, each ball drawn goes back with one more of its
    # colour; the number of white in m draws is BetaBinomial(m, a, b)
    rng = np.random.default_rng(0)
    m, a, b, runs = 6, 2, 3, 20_000
    counts = np.zeros(runs, dtype=int)
    for run in range(runs):
        white, black = a, b
        for _ in range(m):
            if rng.random() < white / (white + black):
                white += 1
            else:
                black += 1
        counts[run] = white - a
    share = float(np.mean(counts > 2))
    expected = beta_binomial_sf(2, m, a, b)
    assert abs(share - expected) < 4 * math.sqrt(expected * (1 - expected) / runs)


@pytest.mark.parametrize("bad", [(-1, 1, 1), (3, 0, 1), (3, 1, 0), (3, 1.5, 2), (3, True, 2)])
def test_bad_shapes_are_refused(bad: tuple) -> None:
    m, a, b = bad
    with pytest.raises(ValueError, match="must be a whole number"):
        beta_binomial_sf(0, m, a, b)


def test_tails_match_scipys_betabinom() -> None:
    stats = pytest.importorskip("scipy.stats")
    for m in (1, 2, 5, 20, 100, 1000):
        for a in (1, 2, 5, 30, 400):
            for b in (1, 3, 50, 999):
                for k in range(-1, m + 2, max(1, m // 13)):
                    assert beta_binomial_sf(k, m, a, b) == pytest.approx(
                        float(stats.betabinom.sf(k, m, a, b)), abs=1e-10
                    )
                    assert beta_binomial_cdf(k, m, a, b) == pytest.approx(
                        float(stats.betabinom.cdf(k, m, a, b)), abs=1e-10
                    )
