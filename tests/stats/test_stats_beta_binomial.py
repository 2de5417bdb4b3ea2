"""Tests for ragbound.stats.beta_binomial: exact tails by hand, by simulation of their urn, and
against scipy where it is installed."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragbound.stats import beta_binomial as bb
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


def _exact_between(first: int, last: int, m: int, a: int, b: int) -> Fraction:
    """P(first <= X <= last) exactly: the sum of C(j + a - 1, j) C(m - j + b - 1, m - j) over
    the range, each product stepped from the one before by its integer ratio, over C(m + a + b
    - 1, m) (the reference the faster code is held to)."""
    first, last = max(first, 0), min(last, m)
    if first > last:
        return Fraction(0)
    product = math.comb(first + a - 1, first) * math.comb(m - first + b - 1, m - first)
    total = 0
    for j in range(first, last + 1):
        total += product
        if j < m:
            product = product * (j + a) * (m - j) // ((j + 1) * (m - j + b - 1))
    return Fraction(total, math.comb(m + a + b - 1, m))


def _relative_error(got: float, exact: Fraction) -> float:
    return float(abs(Fraction(got) - exact) / exact) if exact else abs(got)


@given(m=st.integers(0, 600), a=st.integers(1, 3000), b=st.integers(1, 3000), data=st.data())
@settings(max_examples=150, deadline=None)
def test_both_ways_of_summing_match_the_exact_tails(m: int, a: int, b: int, data) -> None:
    # the public tails pick one way by cost; each way is held to the exact fraction here
    first = data.draw(st.integers(0, m))
    last = data.draw(st.integers(first, m))
    exact = _exact_between(first, last, m, a, b)
    for way in (bb._between_in_integers, bb._between_in_decimals):
        assert _relative_error(way(first, last, m, a, b), exact) <= 1e-15
    assert (
        _relative_error(beta_binomial_sf(first - 1, m, a, b), _exact_between(first, m, m, a, b))
        <= 1e-15
    )
    assert (
        _relative_error(beta_binomial_cdf(last, m, a, b), _exact_between(0, last, m, a, b)) <= 1e-15
    )


@pytest.mark.parametrize(
    ("m", "n", "q"), [(2_500, 25, 1), (5_000, 100, 5), (1_000, 1_000, 50), (5_000, 5_000, 250)]
)
def test_the_exceedance_shapes_match_the_exact_tail(m: int, n: int, q: int) -> None:
    # the reviewer's slow shapes scaled down 20 times, with exceed around and far from its
    # expected count m (q + 1) / (n + 1)
    expected = m * (q + 1) // (n + 1)
    for exceed in sorted({1, expected // 3, expected, expected + 1, 2 * expected, 4 * expected}):
        if 1 <= exceed <= m:
            exact = _exact_between(exceed, m, m, q + 1, n - q)
            got = beta_binomial_sf(exceed - 1, m, q + 1, n - q)
            assert _relative_error(got, exact) <= 1e-15, exceed
            assert (
                _relative_error(bb._between_in_decimals(exceed, m, m, q + 1, n - q), exact) <= 1e-15
            )


def test_stirlings_series_meets_the_exact_log_factorials() -> None:
    # log-gamma switches from ln (x - 1)! to the series at _STIRLING_FROM: both agree there
    digits = bb._DIGITS
    for x in range(bb._STIRLING_FROM, bb._STIRLING_FROM + 40, 7):
        exact = Decimal(math.factorial(x - 1)).ln(digits)
        assert abs(bb._log_gamma(x) - exact) <= Decimal("1e-40") * exact


def test_tails_near_and_below_the_smallest_float() -> None:
    # every one of m draws beating the largest of b - 1 reference values: 1 / C(m + b - 1, b - 1)
    for first, m, b in [(2_990, 3_000, 120), (2_999, 3_000, 120)]:  # about 1e-200, 1e-218
        exact = _exact_between(first, m, m, 1, b)
        assert 0 < exact < Fraction(1, 10**190)
        for way in (bb._between_in_integers, bb._between_in_decimals):
            assert _relative_error(way(first, m, m, 1, b), exact) <= 1e-15
    assert _exact_between(5_000, 5_000, 5_000, 1, 200) < Fraction(1, 10**360)
    for way in (bb._between_in_integers, bb._between_in_decimals):
        assert way(5_000, 5_000, 5_000, 1, 200) == 0.0  # below the smallest float
