"""Tails of the beta-binomial distribution with whole-number shapes, exactly.

A count of m exchangeable draws whose success probability is Beta(a, b) is BetaBinomial(m,
a, b). With whole a and b its probabilities are ratios of binomial coefficients,

    P(X = j) = C(j + a - 1, j) C(m - j + b - 1, m - j) / C(m + a + b - 1, m),

so both tails are sums of integers over one integer, divided once (correctly rounded).
"""

from __future__ import annotations

import math


def beta_binomial_sf(k: int, m: int, a: int, b: int) -> float:
    """P(X > k) for X ~ BetaBinomial(m, a, b), whole ``a, b >= 1``.

    >>> beta_binomial_sf(0, 2, 1, 19)  # P(either of 2 draws beats the max of 19) = 2/21
    0.09523809523809523
    """
    return _between(k + 1, m, m, a, b)


def beta_binomial_cdf(k: int, m: int, a: int, b: int) -> float:
    """P(X <= k) for X ~ BetaBinomial(m, a, b), whole ``a, b >= 1``.

    >>> beta_binomial_cdf(0, 1, 1, 1)  # one draw, uniform success probability
    0.5
    """
    return _between(0, k, m, a, b)


def _between(first: int, last: int, m: int, a: int, b: int) -> float:
    """P(first <= X <= last)."""
    _check(m, a, b)
    first, last = max(first, 0), min(last, m)
    if first > last:
        return 0.0
    return _weight(first, last, m, a, b) / math.comb(m + a + b - 1, m)


def _check(m: int, a: int, b: int) -> None:
    for name, value, least in (("m", m, 0), ("a", a, 1), ("b", b, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")


def _weight(first: int, last: int, m: int, a: int, b: int) -> int:
    """sum over j = first .. last of C(j + a - 1, j) C(m - j + b - 1, m - j), each factor
    stepped from the last by its ratio (exact: every step is a binomial coefficient)."""
    left = math.comb(first + a - 1, first)
    right = math.comb(m - first + b - 1, m - first)
    total = 0
    for j in range(first, last + 1):
        total += left * right
        left = left * (j + a) // (j + 1)
        if j < m:
            right = right * (m - j) // (m - j + b - 1)
    return total
