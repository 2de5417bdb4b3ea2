"""Tests for ragbound.stats.kolmogorov: the KS null distributions, by enumeration, by hand,
across its own methods, and against scipy where it is installed."""

from __future__ import annotations

import itertools
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragbound.stats import kolmogorov
from ragbound.stats.kolmogorov import (
    durbin_cdf,
    kolmogorov_tail,
    pelz_good_cdf,
    smirnov_tail,
    two_sample_tail,
)


def _enumerated_tails(n: int, m: int) -> list[Fraction]:
    """P(D >= h / lcm) for h = 0 .. lcm + 1, over every ordering of n x's and m y's."""
    lcm = math.lcm(n, m)
    counts = [0] * (lcm + 2)
    orderings = 0
    for xs in itertools.combinations(range(n + m), n):
        i = j = worst = 0
        taken = set(xs)
        for position in range(n + m):
            i, j = (i + 1, j) if position in taken else (i, j + 1)
            worst = max(worst, abs(i * (lcm // n) - j * (lcm // m)))
        counts[worst] += 1
        orderings += 1
    at_least = list(itertools.accumulate(reversed(counts)))[::-1]
    return [Fraction(c, orderings) for c in at_least]


@pytest.mark.parametrize(
    ("n", "m"), [(1, 1), (1, 2), (2, 2), (2, 3), (3, 5), (4, 6), (6, 6), (2, 7)]
)
def test_two_sample_tail_equals_the_enumeration_of_orderings(n: int, m: int) -> None:
    for h, expected in enumerate(_enumerated_tails(n, m)):
        assert two_sample_tail(h, n, m) == pytest.approx(float(expected), abs=1e-15)
        assert two_sample_tail(h, m, n) == two_sample_tail(h, n, m)


def test_two_sample_tail_by_hand() -> None:
    # 1 x and 2 y's: xyy and yyx reach D = 1, yxy only 1/2 (lcm 2)
    assert two_sample_tail(2, 1, 2) == pytest.approx(2 / 3)
    assert two_sample_tail(1, 1, 2) == 1.0
    # 2 and 2: D = 1 for xxyy and yyxx of the 6 orderings
    assert two_sample_tail(2, 2, 2) == pytest.approx(1 / 3)
    assert two_sample_tail(0, 5, 7) == 1.0
    assert two_sample_tail(36, 5, 7) == 0.0  # beyond D = 1
    with pytest.raises(ValueError, match="sample sizes must be >= 1"):
        two_sample_tail(1, 0, 3)


@given(n=st.integers(1, 40), m=st.integers(1, 40), data=st.data())
@settings(max_examples=150, deadline=None)
def test_the_three_exact_methods_agree_and_the_tail_falls(n: int, m: int, data) -> None:
    lcm = math.lcm(n, m)
    h = data.draw(st.integers(1, lcm))
    path = kolmogorov._path_tail(h, n, m)
    assert kolmogorov._counted_tail(h, n, m) == pytest.approx(path, abs=1e-13)
    if n == m:
        assert kolmogorov._equal_sizes_tail(h, n) == pytest.approx(path, abs=1e-13)
    assert 0.0 <= two_sample_tail(h, n, m) <= two_sample_tail(h - 1, n, m) <= 1.0


def test_the_path_shares_keep_small_tails_accurate() -> None:
    # 2 / C(60, 30): only the two orderings with every x first or every y first reach D = 1
    assert kolmogorov._path_tail(math.lcm(30, 30), 30, 30) == pytest.approx(
        2 / math.comb(60, 30), rel=1e-12
    )
    assert kolmogorov._path_tail(math.lcm(20, 30), 20, 30) == pytest.approx(
        2 / math.comb(50, 20), rel=1e-12
    )


def test_the_path_counts_keep_small_tails_accurate() -> None:
    # counting the paths that touch, not subtracting those that stay inside from all paths
    assert kolmogorov._counted_tail(math.lcm(20, 30), 20, 30) == pytest.approx(
        2 / math.comb(50, 20), rel=1e-12
    )
    for n, m, share in [(500, 501, 0.3), (1000, 200, 0.6), (2000, 100, 0.3)]:
        h = round(share * math.lcm(n, m))
        assert kolmogorov._log2_binomial(n + m, n) < kolmogorov._COUNTS_FIT
        tail = two_sample_tail(h, n, m)
        assert tail > 0.0
        assert tail == pytest.approx(kolmogorov._path_tail(h, n, m), rel=1e-9)


def test_large_unequal_samples_use_the_path_shares() -> None:
    # C(6000 + 3000, 3000) is far past a float: the count method cannot hold it
    n, m = 6000, 3000
    assert kolmogorov._log2_binomial(n + m, m) > kolmogorov._COUNTS_FIT
    h = round(0.04 * math.lcm(n, m))
    assert two_sample_tail(h, n, m) == kolmogorov._path_tail(h, n, m)
    assert 0.0 < two_sample_tail(h, n, m) < 0.05


def test_smirnov_tail_by_hand() -> None:
    # n = 1: P(U <= 1 - d) = 1 - d; n = 2: (1 - d)^2 + 2 d (1/2 - d) for d <= 1/2
    assert smirnov_tail(0.3, 1) == pytest.approx(0.7)
    assert smirnov_tail(0.25, 2) == pytest.approx(0.5625 + 2 * 0.25 * 0.25)
    assert smirnov_tail(0.6, 2) == pytest.approx(0.16)
    assert smirnov_tail(0.0, 5) == 1.0
    assert smirnov_tail(1.0, 5) == 0.0


def test_kolmogorov_tail_closed_forms() -> None:
    # one value: D_1 = max(U, 1 - U) >= d with probability 2 (1 - d)
    assert kolmogorov_tail(0.7, 1) == pytest.approx(0.6)
    assert kolmogorov_tail(0.08, 10) == pytest.approx(1 - math.factorial(10) / 10**10 * 0.6**10)
    assert kolmogorov_tail(0.04, 10) == 1.0  # below 1 / 2n nothing is that close
    assert kolmogorov_tail(0.95, 10) == pytest.approx(2 * 0.05**10)
    assert kolmogorov_tail(0.0, 3) == 1.0
    assert kolmogorov_tail(1.0, 3) == 0.0
    with pytest.raises(ValueError, match="n must be >= 1"):
        kolmogorov_tail(0.1, 0)


def test_durbin_matches_the_closed_forms_where_both_hold() -> None:
    # n d <= 1: Ruben and Gambino's n! / n^n (2 n d - 1)^n
    for n, d in [(5, 0.15), (12, 0.07), (40, 0.02)]:
        assert durbin_cdf(d, n) == pytest.approx(
            math.factorial(n) / n**n * (2 * n * d - 1) ** n, rel=1e-12
        )
    # d >= 1/2: exactly 1 - 2 P(D+ >= d)
    assert durbin_cdf(0.6, 7) == pytest.approx(1 - 2 * smirnov_tail(0.6, 7), abs=1e-14)


def test_pelz_good_is_close_to_durbin_for_large_n() -> None:
    # Simard and L'Ecuyer: at least 5 digits where it is used (n > 140)
    for n, d in [(200, 0.07), (1000, 0.03), (5000, 0.012)]:
        assert pelz_good_cdf(d, n) == pytest.approx(durbin_cdf(d, n), abs=1e-5)


@pytest.mark.parametrize(
    "n", [1, 2, 3, 5, 10, 20, 50, 100, 140, 141, 200, 500, 1000, 5000, 20000, 100000, 100001]
)
def test_kolmogorov_tail_matches_scipys_kstwo(n: int) -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(n)
    points = 120 if n <= 5000 else 40  # each large-n value costs both sides some milliseconds
    grid = np.concatenate([np.linspace(0.0005, 0.999, points), rng.random(points // 4)])
    for d in grid.tolist():
        assert kolmogorov_tail(d, n) == pytest.approx(float(stats.kstwo.sf(d, n)), abs=1e-10)


@pytest.mark.parametrize(
    ("n", "m", "steps"),
    [(7, 2000, 8), (50, 5000, 10), (333, 1000, 8), (999, 1000, 5), (2000, 2000, 10)],
)
def test_two_sample_tail_matches_scipys_exact_distribution(n: int, m: int, steps: int) -> None:
    stats = pytest.importorskip("scipy.stats")
    lcm = math.lcm(n, m)
    for a in sorted({int(v) for v in np.linspace(1, n, steps)}):
        for b in sorted({int(v) for v in np.linspace(0, m, steps)}):
            # a of n zeros against b of m: the KS distance is |a / n - b / m|
            h = abs(a * (lcm // n) - b * (lcm // m))
            x = np.repeat([0.0, 1.0], [a, n - a])
            y = np.repeat([0.0, 1.0], [b, m - b])
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = stats.ks_2samp(x, y, method="exact")
            if caught:  # scipy gave up on exact (its equal-size sum fails at h = 1)
                continue
            assert two_sample_tail(h, n, m) == pytest.approx(result.pvalue, abs=1e-10)
