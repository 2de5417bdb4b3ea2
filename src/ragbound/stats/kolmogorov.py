"""Null distributions of the Kolmogorov-Smirnov statistic: two-sample exact, one-sample.

- :func:`two_sample_tail` is P(D >= h / lcm(n, m)) for two samples of n and m values drawn
  from one continuous distribution, exactly. Every ordering of the pooled sample is equally
  likely; each is a lattice path from (0, 0) to (n, m), one step per value, and D is the
  largest ``|i / n - j / m|`` the path visits (Hodges 1958).
- :func:`kolmogorov_tail` is P(D_n >= d) of the one-sample two-sided statistic for a sample of
  n, the large-sample p-value of the two-sample test at n = nm / (n + m). Each region of
  (n, d) gets the method Simard and L'Ecuyer (2011, J. Stat. Softw. 39(11)) chose for it:
  Ruben and Gambino's closed forms at the ends, Durbin's matrix (as Marsaglia, Tsang and
  Wang 2003 compute it), twice the one-sided tail of Birnbaum and Tingey (1951) for large d,
  and the asymptotic series of Pelz and Good (1976) for large n.

Pure numeric code, floats and integers in and out.
"""

from __future__ import annotations

import math

import numpy as np

from ragbound.stats._validate import FloatArray

# the regions of (n, d) of Simard and L'Ecuyer's method choice for the upper tail
_SMALL_N = 140
_DURBIN_SMALL_N = 4.0  # n d^2 up to which Durbin's matrix serves n <= 140
_MILLER_N_D2 = 2.2  # n > 140: twice the one-sided tail from here on (n d^2)
_ZERO_N_D2 = 370.0  # n > 140: the tail is below 1e-300 from here on
_DURBIN_LARGE_N = 100_000
_DURBIN_N_D15 = 1.4  # n > 140: Durbin's matrix while n d^(3/2) stays below this
_PI2 = math.pi**2
# path counts below 2^1000 are held as floats (C(n + 50, 50) stays below it up to n ~ 2e7)
_COUNTS_FIT = 1000.0
_EXACT_CHOSEN = 64  # binomials choosing up to this many are computed exactly


def two_sample_tail(h: int, n: int, m: int) -> float:
    """P(D >= h / lcm(n, m)) for two samples of sizes n and m (no ties), exactly.

    The share of the C(n + m, n) lattice paths from (0, 0) to (n, m) that reach a point
    (i, j) with ``|i / n - j / m| >= h / lcm(n, m)``.

    >>> two_sample_tail(2, 2, 2)  # D = 1 in 2 of the 6 orderings: xxyy and yyxx
    0.3333333333333333
    """
    if n < 1 or m < 1:
        raise ValueError(f"sample sizes must be >= 1, got {n} and {m}")
    if h <= 0:
        return 1.0
    if h > math.lcm(n, m):
        return 0.0
    if n == m:
        tail = _equal_sizes_tail(h, n)
    elif _log2_binomial(n + m, n) < _COUNTS_FIT:
        tail = _counted_tail(h, n, m)
    else:
        tail = _path_tail(h, n, m)
    return min(max(tail, 0.0), 1.0)


def _equal_sizes_tail(h: int, n: int) -> float:
    """P(D >= h / n) for two samples of n: by reflection (Gnedenko and Korolyuk 1951),
    2 sum_k (-1)^(k-1) C(2n, n - kh) / C(2n, n) over k = 1 .. n // h."""
    j = np.arange(n, dtype=np.float64)
    ratios = np.cumprod((n - j) / (n + 1 + j))  # C(2n, n - a) / C(2n, n) at a = 1 .. n
    terms = ratios[h - 1 :: h]
    signs = np.where(np.arange(terms.size) % 2 == 0, 1.0, -1.0)
    return 2.0 * math.fsum((signs * terms)[::-1].tolist())


def _log2_binomial(total: int, chosen: int) -> float:
    return (
        math.lgamma(total + 1) - math.lgamma(chosen + 1) - math.lgamma(total - chosen + 1)
    ) / math.log(2.0)


def _band(h: int, i: int, step_i: int, step_j: int, last_j: int) -> tuple[int, int]:
    """First and last j of row i strictly inside the band: ``|i step_i - j step_j| < h``."""
    first = (i * step_i - h) // step_j + 1
    last = -((-(i * step_i + h)) // step_j) - 1
    return max(first, 0), min(last, last_j)


def _counted_tail(h: int, n: int, m: int) -> float:
    """The share of lattice paths that touch the boundary, counted row by row along the
    smaller sample for the points strictly inside the band: a path reaches an inside point
    from below or from the left, and every path to a point outside the band has touched.
    The counts are sums of positive terms, so small tails keep their relative accuracy. For
    sizes whose path count fits a float (:data:`_COUNTS_FIT`)."""
    rows, cols = min(n, m), max(n, m)
    g = math.gcd(n, m)
    step_i, step_j = cols // g, rows // g  # (i / rows - j / cols) lcm = i step_i - j step_j
    first, touched = 0, np.zeros(_band(h, 0, step_i, step_j, cols)[1] + 1)
    for i in range(1, rows + 1):
        low, high = _band(h, i, step_i, step_j, cols)
        if low > high:
            return 1.0  # every path has touched by now
        # from below: row i - 1's count inside its band, every path to it outside
        start, stop = max(low, first), min(high, first + touched.size - 1)
        if start > stop:
            below = _all_paths(i - 1, low, high)
        else:
            below = np.concatenate(
                [
                    _all_paths(i - 1, low, start - 1),
                    touched[start - first : stop - first + 1],
                    _all_paths(i - 1, stop + 1, high),
                ]
            )
        # from the left of the band: every path to (i, low - 1) has touched
        left = _binomial(i + low - 1, i) if low > 0 else 0.0
        first, touched = low, left + np.cumsum(below)
    return float(touched[-1]) / float(math.comb(n + m, n))


def _all_paths(i: int, low: int, high: int) -> FloatArray:
    """C(i + j, i), the number of lattice paths to (i, j), for j = low .. high (none when
    high < low)."""
    if high < low:
        return np.empty(0)
    j = np.arange(low + 1, high + 1, dtype=np.float64)
    ratios = (i + j) / j  # C(i + j, i) / C(i + j - 1, i)
    return _binomial(i + low, i) * np.concatenate([[1.0], np.cumprod(ratios)])


def _binomial(total: int, chosen: int) -> float:
    """C(total, chosen) as a float: exact for a few chosen (cheap then), else from log-gammas,
    whose error stays near 1e-12 (relative) for the totals left: the count fits a float."""
    if min(chosen, total - chosen) <= _EXACT_CHOSEN:
        return float(math.comb(total, chosen))
    return math.exp(_log2_binomial(total, chosen) * math.log(2.0))


def _path_tail(h: int, n: int, m: int) -> float:
    """The share of lattice paths from (0, 0) to (n, m) that reach ``|i / n - j / m| >= h /
    lcm``, by anti-diagonals (points with i + j = s).

    A uniformly drawn path to (i, j) arrives from (i - 1, j) with probability i / (i + j) and
    from (i, j - 1) otherwise, so the share of paths to (i, j) that have touched the boundary
    is the mix of its two predecessors' shares; it is 1 on the boundary and beyond. Every
    share is a weighted mean of shares, so small tails keep their relative accuracy. Only the
    points strictly inside the band are computed; a diagonal's shares sit at i + 1 of an
    array of ones (position 0 stands for i = -1, whose weight is 0).
    """
    n, m = min(n, m), max(n, m)  # the tail is symmetric; the shorter diagonals are cheaper
    g = math.gcd(n, m)
    step_i, step_j = m // g, n // g  # (i / n - j / m) lcm = i step_i - j step_j
    width = step_i + step_j
    taken = np.arange(n + 1, dtype=np.float64)  # i, the first sample's values taken
    previous, current = np.ones(n + 2), np.ones(n + 2)
    previous[1] = 0.0  # the origin, inside the band
    for s in range(1, n + m + 1):
        # inside: |i width - s step_j| < h, with 0 <= i <= n and 0 <= s - i <= m
        first = max(0, s - m, (s * step_j - h) // width + 1)
        last = min(n, s, -((-(s * step_j + h)) // width) - 1)
        if first > last:
            return 1.0  # every path has touched by now
        i = taken[first : last + 1]
        left, below = previous[first : last + 1], previous[first + 1 : last + 2]
        current.fill(1.0)
        current[first + 1 : last + 2] = (i * left + (s - i) * below) / s
        previous, current = current, previous
    return float(previous[n + 1])


def kolmogorov_tail(d: float, n: int) -> float:
    """P(D_n >= d): the upper tail of the one-sample two-sided KS statistic for n values.

    Exact (to rounding) except where n > 140 and the method is Pelz and Good's series (n d^2
    below 2.2 and n d^(3/2) above 1.4) or twice the one-sided tail (n d^2 >= 2.2), which
    Simard and L'Ecuyer found accurate to at least 5 and 6 digits there.

    >>> round(kolmogorov_tail(0.3, 20), 6)
    0.043067
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if d >= 1.0:
        return 0.0
    if d <= 0.0:
        return 1.0
    t = n * d
    if t <= 0.5:
        return 1.0
    if t <= 1.0:  # Ruben and Gambino: P(D_n < d) = n! / n^n (2t - 1)^n
        return 1.0 - math.exp(_log_factorial_over_power(n) + n * math.log(2 * t - 1))
    if t >= n - 1:  # Ruben and Gambino
        return 2.0 * (1.0 - d) ** n
    if d >= 0.5:  # the two one-sided events cannot both happen: exact
        return _clip(2.0 * smirnov_tail(d, n))
    n_d2 = t * d
    if n <= _SMALL_N:
        tail = 1.0 - durbin_cdf(d, n) if n_d2 <= _DURBIN_SMALL_N else 2.0 * smirnov_tail(d, n)
        return _clip(tail)
    if n_d2 >= _ZERO_N_D2:
        return 0.0
    if n_d2 >= _MILLER_N_D2:
        return _clip(2.0 * smirnov_tail(d, n))
    if n <= _DURBIN_LARGE_N and n * d**1.5 <= _DURBIN_N_D15:
        return _clip(1.0 - durbin_cdf(d, n))
    return _clip(1.0 - pelz_good_cdf(d, n))


def _clip(p: float) -> float:
    return min(max(p, 0.0), 1.0)


def _log_factorial_over_power(n: int) -> float:
    """log(n! / n^n); by Stirling's series above 140, where lgamma's own size would cost
    digits."""
    if n <= _SMALL_N:
        return math.lgamma(n + 1) - n * math.log(n)
    inverse = 1.0 / n
    series = inverse * (1 / 12 - inverse**2 * (1 / 360 - inverse**2 / 1260))
    return -n + 0.5 * math.log(2 * math.pi * n) + series


def smirnov_tail(d: float, n: int) -> float:
    """P(D_n^+ >= d), the one-sided KS statistic's upper tail (Birnbaum and Tingey 1951):
    d sum_j C(n, j) (d + j/n)^(j-1) (1 - d - j/n)^(n-j) over j = 0 .. floor(n (1 - d))."""
    if d >= 1.0:
        return 0.0
    if d <= 0.0:
        return 1.0
    j = np.arange(math.floor(n * (1.0 - d)) + 1, dtype=np.float64)
    reached = d + j / n
    left = 1.0 - reached
    j, reached, left = j[left > 0], reached[left > 0], left[left > 0]
    log_terms = (
        _log_binomials(n, j.astype(np.int64)) + (j - 1.0) * np.log(reached) + (n - j) * np.log(left)
    )
    return d * math.fsum(np.exp(log_terms).tolist())


def _log_binomials(n: int, k: np.ndarray) -> FloatArray:
    """log C(n, k) for each k."""
    lgamma = np.vectorize(math.lgamma, otypes=[np.float64])
    return math.lgamma(n + 1) - lgamma(k + 1.0) - lgamma(n - k + 1.0)


def durbin_cdf(d: float, n: int) -> float:
    """P(D_n < d) by Durbin's (1973) matrix: n! / n^n times an entry of H^n, H of size
    2k - 1 with k = floor(n d) + 1 (Marsaglia, Tsang and Wang 2003), powered with its scale
    kept apart in powers of two."""
    k = math.floor(n * d) + 1
    size = 2 * k - 1
    h = k - n * d
    matrix = _durbin_matrix(size, h)
    power, exponent = _scaled_power(matrix, n)
    entry = float(power[k - 1, k - 1])
    if entry <= 0.0:
        return 0.0
    log_cdf = math.log(entry) + exponent * math.log(2.0) + _log_factorial_over_power(n)
    return math.exp(log_cdf)


def _durbin_matrix(size: int, h: float) -> FloatArray:
    """Durbin's H: entry (i, j) is 1 / (i - j + 1)! on and below the first superdiagonal,
    with the first column and last row corrected by powers of h."""
    rows = np.arange(size)[:, None]
    cols = np.arange(size)[None, :]
    gap = rows - cols + 1
    matrix = np.where(gap >= 0, 1.0, 0.0)
    powers = h ** np.arange(1, size + 1, dtype=np.float64)
    matrix[:, 0] -= powers
    matrix[-1, :] -= powers[::-1]
    if 2 * h - 1 > 0:
        matrix[-1, 0] += (2 * h - 1) ** size
    factorials = np.array([math.factorial(g) for g in range(size + 1)], dtype=np.float64)
    return np.where(gap > 0, matrix / factorials[np.clip(gap, 0, size)], matrix)


def _scaled_power(matrix: FloatArray, n: int) -> tuple[FloatArray, int]:
    """``matrix ** n`` as (M, e) with ``matrix ** n = M * 2**e``, by repeated squaring."""
    result, result_exp = np.eye(matrix.shape[0]), 0
    base, base_exp = matrix.copy(), 0
    while True:
        if n & 1:
            result, result_exp = _rescaled(result @ base, result_exp + base_exp)
        n >>= 1
        if not n:
            return result, result_exp
        base, base_exp = _rescaled(base @ base, 2 * base_exp)


def _rescaled(matrix: FloatArray, exponent: int) -> tuple[FloatArray, int]:
    top = float(np.abs(matrix).max())
    if top == 0.0:
        return matrix, exponent
    shift = math.frexp(top)[1]
    return np.ldexp(matrix, -shift), exponent + shift


def pelz_good_cdf(d: float, n: int) -> float:
    """P(D_n < d) by Pelz and Good's (1976) series in z = d sqrt(n): K0(z) + K1(z) / n^(1/2)
    + K2(z) / n + K3(z) / n^(3/2), each K a theta-like sum, summed until its terms vanish."""
    z = d * math.sqrt(n)
    z2 = z * z
    scale = -_PI2 / (2 * z2)
    count = math.ceil(math.sqrt(800.0 / -scale)) + 2  # exp(scale k^2) < 1e-300 beyond
    half = np.arange(count, dtype=np.float64) + 0.5  # k + 1/2
    whole = np.arange(1, count + 1, dtype=np.float64)  # k
    h2 = half * half
    w2 = whole * whole
    e_half, e_whole = np.exp(scale * h2), np.exp(scale * w2)
    root = math.sqrt(math.pi / 2)
    k0 = math.sqrt(2 * math.pi) / z * _sum(e_half)
    k1 = root / (3 * z2 * z2) * _sum((_PI2 * h2 - z2) * e_half)
    k2_terms = (
        6 * z2**3 + 2 * z2**2 + _PI2 * (2 * z2**2 - 5 * z2) * h2 + _PI2**2 * (1 - 2 * z2) * h2**2
    )
    k2 = root / (36 * z**7) * _sum(k2_terms * e_half) - root / (18 * z**3) * _sum(
        _PI2 * w2 * e_whole
    )
    k3_terms = (
        _PI2**3 * (5 - 30 * z2) * h2**3
        + _PI2**2 * (212 * z2**2 - 60 * z2) * h2**2
        + _PI2 * (135 * z2**2 - 96 * z2**3) * h2
        - (30 * z2**3 + 90 * z2**4)
    )
    k3 = root / (3240 * z**10) * _sum(k3_terms * e_half) + root / (108 * z**6) * _sum(
        (3 * _PI2 * w2 * z2 - _PI2**2 * w2 * w2) * e_whole
    )
    root_n = math.sqrt(n)
    return k0 + k1 / root_n + k2 / n + k3 / (n * root_n)


def _sum(values: FloatArray) -> float:
    return math.fsum(values.tolist())
