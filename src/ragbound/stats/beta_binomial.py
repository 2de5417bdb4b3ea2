"""Tails of the beta-binomial distribution with whole-number shapes, exactly or to ~1e-40.

A count of m exchangeable draws whose success probability is Beta(a, b) is BetaBinomial(m,
a, b). With whole a and b its probabilities are ratios of binomial coefficients,

    P(X = j) = C(j + a - 1, j) C(m - j + b - 1, m - j) / C(m + a + b - 1, m).

Where those integers are small enough, a tail is summed in integers (over whichever side has
fewer terms: the other is the whole less it) and divided once, correctly rounded. Otherwise
the tail is summed in 50-digit decimals: the largest term in the tail from log-gammas, then
each term from its neighbour by their ratio, outwards until the rest cannot reach 1e-40 of
the sum (the probabilities are log-concave, so the rest is below a geometric series). The
decimal error stays near 1e-45 of the sum, far below a float's rounding.
"""

from __future__ import annotations

import decimal
import math
from decimal import Decimal

_DIGITS = decimal.Context(prec=50, Emin=decimal.MIN_EMIN, Emax=decimal.MAX_EMAX)
_NEGLIGIBLE = Decimal("1e-40")
# log-gamma below this from the exact factorial, above from Stirling's series
_STIRLING_FROM = 512
_HALF_LOG_TWO_PI = Decimal("0.918938533204672741780329736405617639861397473637783412817152")
# B_2k / (2k (2k - 1)) for k = 1 .. 8: Stirling's series; the first term left out is below
# 1e-46 from 512 on
_STIRLING = tuple(
    _DIGITS.divide(num, den)
    for num, den in (
        (1, 12),
        (-1, 360),
        (1, 1260),
        (-1, 1680),
        (1, 1188),
        (-691, 360360),
        (1, 156),
        (-3617, 122400),
    )
)


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
    if _integers_are_cheaper(first, last, m, a, b):
        return _between_in_integers(first, last, m, a, b)
    return _between_in_decimals(first, last, m, a, b)


def _integers_are_cheaper(first: int, last: int, m: int, a: int, b: int) -> bool:
    """Rough costs measured on CPython 3.11: the integer sum ~0.1 us per term per 64-bit
    word of C(m + a + b - 1, m); the decimal walk ~1 ms to start and ~5 us per term walked,
    which is at most the range and about 40 standard deviations (the 1e-40 cut-off)."""
    count = last - first + 1
    words = 1 + (math.lgamma(m + a + b) - math.lgamma(m + 1) - math.lgamma(a + b)) / 44.0
    integer_us = 0.1 * min(count, m + 1 - count) * words
    spread = math.sqrt(m * a * b * (a + b + m) / ((a + b) ** 2 * (a + b + 1)))
    decimal_us = 1000 + 5 * min(count, 40 * spread + 10)
    return integer_us <= decimal_us


def _check(m: int, a: int, b: int) -> None:
    for name, value, least in (("m", m, 0), ("a", a, 1), ("b", b, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")


def _between_in_integers(first: int, last: int, m: int, a: int, b: int) -> float:
    """P(first <= X <= last) as one division of integers, correctly rounded; ``0 <= first <=
    last <= m``. Sums the range or, when that has more terms, everything outside it."""
    whole = math.comb(m + a + b - 1, m)
    if 2 * (last - first + 1) <= m + 1:
        return _weight(first, last, m, a, b) / whole
    outside = 0
    if first > 0:
        outside += _weight(0, first - 1, m, a, b)
    if last < m:
        outside += _weight(last + 1, m, m, a, b)
    return (whole - outside) / whole


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


def _between_in_decimals(first: int, last: int, m: int, a: int, b: int) -> float:
    """P(first <= X <= last) to ~1e-45 relative before the float rounding; ``0 <= first <=
    last <= m``."""
    top = min(max(_mode(m, a, b), first), last)
    peak = _log_probability(top, m, a, b).exp(_DIGITS)
    floor = _DIGITS.multiply(peak, _NEGLIGIBLE)
    total = _DIGITS.add(peak, _walk(top, last, peak, floor, m, a, b))
    return float(_DIGITS.add(total, _walk(top, first, peak, floor, m, a, b)))


def _mode(m: int, a: int, b: int) -> int:
    """A most likely count: P(j + 1) >= P(j) exactly when (a - 1)(m - j) >= (j + 1)(b - 1)."""
    if a + b == 2:
        return 0  # uniform: every count is a mode
    rising = ((a - 1) * m - (b - 1)) // (a + b - 2)  # the last j with P(j + 1) >= P(j)
    return min(max(rising + 1, 0), m)


def _walk(start: int, stop: int, peak: Decimal, floor: Decimal, m: int, a: int, b: int) -> Decimal:
    """sum of P(j) for j from ``start`` (exclusive, where P = ``peak``) towards ``stop``
    (inclusive), stopping once the terms left cannot reach ``floor`` in all."""
    term, total, j = peak, Decimal(0), start
    up = stop > start
    while j != stop:
        if up:  # P(j + 1) / P(j)
            num, den = (j + a) * (m - j), (j + 1) * (m - j + b - 1)
            j += 1
        else:  # P(j - 1) / P(j)
            num, den = j * (m - j + b), (j + a - 1) * (m - j + 1)
            j -= 1
        term = _DIGITS.divide(_DIGITS.multiply(term, num), den)
        total = _DIGITS.add(total, term)
        # log-concave: every further ratio is at most num / den, so what is left is below
        # term * num / (den - num) as well as term * (terms left)
        left = abs(stop - j)
        if left % 8 == 0 and (  # checked now and then: a few terms too many cost less
            _DIGITS.multiply(term, left) <= floor
            or (num < den and _DIGITS.multiply(term, num) <= _DIGITS.multiply(floor, den - num))
        ):
            break
    return total


def _log_probability(j: int, m: int, a: int, b: int) -> Decimal:
    """ln P(X = j) from the log-gammas of the three binomial coefficients."""
    plus = (j + a, m - j + b, m + 1, a + b)
    minus = (j + 1, a, m - j + 1, b, m + a + b)
    total = Decimal(0)
    for x in plus:
        total = _DIGITS.add(total, _log_gamma(x))
    for x in minus:
        total = _DIGITS.subtract(total, _log_gamma(x))
    return total


def _log_gamma(x: int) -> Decimal:
    """ln Gamma(x) = ln (x - 1)! for whole ``x >= 1``, to ~1e-45 relative."""
    if x < _STIRLING_FROM:
        return Decimal(math.factorial(x - 1)).ln(_DIGITS)
    big = Decimal(x)
    value = _DIGITS.multiply(_DIGITS.subtract(big, Decimal("0.5")), big.ln(_DIGITS))
    value = _DIGITS.add(_DIGITS.subtract(value, big), _HALF_LOG_TWO_PI)
    power = big
    square = _DIGITS.multiply(big, big)
    for coefficient in _STIRLING:
        value = _DIGITS.add(value, _DIGITS.divide(coefficient, power))
        power = _DIGITS.multiply(power, square)
    return value
