"""Two-sample shift tests and false-alarm control for many windows (paper 1, section 3.3).

KS compares two samples of a scalar test statistic (eq. 3); MMD compares two samples of
vectors (query embeddings). Both are two-sided: a small p-value means the samples differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike

from ragbound.stats._validate import (
    FloatArray,
    as_float_array,
    as_scores,
    check_finite,
    check_open_unit,
)
from ragbound.stats.beta_binomial import beta_binomial_sf
from ragbound.stats.kolmogorov import kolmogorov_tail, two_sample_tail

KS_METHODS: tuple[str, ...] = ("auto", "exact", "asymp")
# "auto" is exact up to this many values a side (scipy's rule, so its p-values are the same)
KS_EXACT_MAX = 10_000
# past this many grid points (reduced sizes' product) "exact" falls back to "asymp", as scipy does
_KS_EXACT_GRID = 2**31 - 1


@dataclass(frozen=True)
class KSResult:
    """Two-sample KS test result; ``shifted`` = p_value <= alpha = statistic >= critical_value.

    ``statistic`` = sup_t |F_reference(t) - F_test(t)| in [0, 1]. ``critical_value`` is the
    smallest attainable statistic whose p-value (same distribution, exact or asymptotic, as
    ``p_value``) is <= alpha; ``math.inf`` when no statistic can reach alpha.
    """

    statistic: float
    p_value: float
    critical_value: float
    shifted: bool
    n_reference: int
    n_test: int
    alpha: float
    method_used: str


@dataclass(frozen=True)
class MMDResult:
    """Unbiased squared MMD (Gaussian kernel of ``bandwidth``) and its permutation p-value."""

    statistic: float
    p_value: float
    n_permutations: int
    bandwidth: float
    n_x: int
    n_y: int


def ks_critical_value(n_reference: int, n_test: int, alpha: float) -> float:
    """The paper's large-sample KS critical value sqrt(-ln(alpha/2) (n+m) / (2nm)) (eq. 3).

    The first term of the Kolmogorov distribution's tail; :func:`ks_two_sample` decides with
    the exact critical value instead, which is smaller for small samples.

    >>> round(ks_critical_value(50, 50, 0.05), 4)
    0.2716
    """
    if n_reference < 1 or n_test < 1:
        raise ValueError(f"sample sizes must be >= 1, got {n_reference} and {n_test}")
    alpha = check_open_unit(alpha, "alpha")
    return math.sqrt(-math.log(alpha / 2) * (n_reference + n_test) / (2 * n_reference * n_test))


def ks_two_sample(
    reference: ArrayLike, test: ArrayLike, alpha: float = 0.05, method: str = "auto"
) -> KSResult:
    """Two-sided two-sample KS test of ``test`` against ``reference`` (1-D statistic values).

    The p-value is exact (the share of the equally likely orderings of the pooled values,
    :func:`~ragbound.stats.kolmogorov.two_sample_tail`) or asymptotic (Kolmogorov's one-sample
    distribution at n m / (n + m) values, :func:`~ragbound.stats.kolmogorov.kolmogorov_tail`);
    ``method`` "auto" is exact for samples up to :data:`KS_EXACT_MAX` values, asymptotic
    above, and "exact" turns asymptotic past about 2^31 grid points (both as scipy's
    ``ks_2samp`` decides, whose p-values these match). The critical value comes from that
    same distribution, so ``shifted`` (p <= alpha) always equals
    ``statistic >= critical_value``. The statistic only takes values h / lcm(n, m) for whole
    h; both are computed on that grid, in integers, so no rounding can split them.

    >>> r = ks_two_sample([1.0, 2.0, 3.0], [2.0, 3.0, 4.0, 5.0])
    >>> round(r.statistic, 4), r.shifted
    (0.5, False)
    """
    ref = np.sort(as_scores(reference, "reference"))
    new = np.sort(as_scores(test, "test"))
    alpha = check_open_unit(alpha, "alpha")
    if method not in KS_METHODS:
        raise ValueError(f"method must be one of {list(KS_METHODS)}, got {method!r}")
    n, m = int(ref.size), int(new.size)
    used = _ks_method_used(n, m, method)
    grid = math.lcm(n, m)
    observed = _ks_grid_statistic(ref, new)
    critical = _ks_critical_grid(n, m, alpha, used)
    return KSResult(
        statistic=observed / grid,
        p_value=_ks_grid_p_value(observed, n, m, used),
        critical_value=math.inf if critical is None else critical / grid,
        shifted=critical is not None and observed >= critical,
        n_reference=n,
        n_test=m,
        alpha=alpha,
        method_used=used,
    )


def _ks_method_used(n: int, m: int, method: str) -> str:
    """The distribution a test of samples of n and m values uses under ``method``."""
    if method == "auto":
        return "exact" if max(n, m) <= KS_EXACT_MAX else "asymp"
    g = math.gcd(n, m)
    if method == "exact" and (n // g) * (m // g) >= _KS_EXACT_GRID:
        return "asymp"
    if method == "asymp" and n == m == 1:  # no asymptotic size: n m / (n + m) rounds to 0
        return "exact"
    return method


def _ks_grid_statistic(ref: FloatArray, new: FloatArray) -> int:
    """KS distance times lcm(n, m), an integer: max over t of |n_test * #ref<=t - n * #test<=t|."""
    n, m = ref.size, new.size
    points = np.concatenate([ref, new])
    below_ref = np.searchsorted(ref, points, side="right").astype(np.int64)
    below_new = np.searchsorted(new, points, side="right").astype(np.int64)
    return int(np.abs(below_ref * m - below_new * n).max()) // math.gcd(n, m)


def _ks_attainable(h: int, n: int, m: int) -> tuple[int, int, int]:
    """Smallest KS grid value v >= h that samples of n and m can reach, with its witness.

    A KS distance is |a / n - b / m| for some counts 0 <= a <= n, 0 <= b <= m, i.e.
    v / lcm(n, m) with v = a * m' - b * n' (m' = m / gcd, n' = n / gcd). Not every v in
    [0, lcm] is reachable; between reachable values the null tail P(D >= v) is flat.
    """
    g = math.gcd(n, m)
    n_red, m_red = n // g, m // g
    a = np.arange(n + 1, dtype=np.int64)
    b = np.clip((a * m_red - h) // n_red, 0, m)
    values = a * m_red - b * n_red
    values = np.where(values >= h, values, np.iinfo(np.int64).max)
    best = int(np.argmin(values))
    return int(values[best]), best, int(b[best])


@lru_cache(maxsize=65_536)  # a monitor's changing alpha re-walks mostly the same grid points
def _ks_grid_p_value(h: int, n: int, m: int, method: str) -> float:
    """The two-sided p-value P(D >= h / lcm(n, m)) for samples of sizes n and m.

    Asymptotic: Kolmogorov's distribution at round(n m / (n + m)) values, read at the
    smallest reachable distance a / n - b / m >= h / lcm, computed in floats as the samples'
    own distribution functions give it.
    """
    if method == "exact":
        return two_sample_tail(h, n, m)
    _, a, b = _ks_attainable(h, n, m)
    large, small = float(max(n, m)), float(min(n, m))
    return kolmogorov_tail(abs(a / n - b / m), round(large * small / (large + small)))


@lru_cache(maxsize=4096)
def _ks_critical_grid(n: int, m: int, alpha: float, method: str) -> int | None:
    """Smallest reachable h whose p-value is <= alpha (binary search: p falls as h grows)."""
    low, high = 0, math.lcm(n, m)
    if _ks_grid_p_value(high, n, m, method) > alpha:
        return None
    while high - low > 1:  # invariant: p(low) > alpha >= p(high), with p(0) = 1
        middle = (low + high) // 2
        if _ks_grid_p_value(middle, n, m, method) <= alpha:
            high = middle
        else:
            low = middle
    return _ks_attainable(high, n, m)[0]


def _as_points(values: ArrayLike, name: str) -> FloatArray:
    array = as_float_array(values, name)
    if array.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n, dimension), got shape {array.shape}")
    if array.shape[0] < 2:
        raise ValueError(f"{name} needs at least 2 rows, got {array.shape[0]}")
    check_finite(array, name)
    return array


def median_bandwidth(points: FloatArray) -> float:
    """Median pairwise Euclidean distance of ``points`` (1.0 if every point coincides)."""
    squared = _squared_distances(points)
    upper = squared[np.triu_indices(points.shape[0], k=1)]
    median = float(np.sqrt(np.median(upper)))
    return median if median > 0 else 1.0


def _squared_distances(points: FloatArray) -> FloatArray:
    norms = np.einsum("ij,ij->i", points, points)
    squared = norms[:, None] + norms[None, :] - 2.0 * points @ points.T
    return np.maximum(squared, 0.0)


def _mmd_unbiased(kernel: FloatArray, x_index: np.ndarray, y_index: np.ndarray) -> float:
    kxx = kernel[np.ix_(x_index, x_index)]
    kyy = kernel[np.ix_(y_index, y_index)]
    kxy = kernel[np.ix_(x_index, y_index)]
    n, m = x_index.size, y_index.size
    xx = (kxx.sum() - np.trace(kxx)) / (n * (n - 1))
    yy = (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
    return float(xx + yy - 2.0 * kxy.mean())


def mmd_permutation_test(
    x: ArrayLike,
    y: ArrayLike,
    n_permutations: int = 1000,
    seed: int = 0,
    bandwidth: float | None = None,
) -> MMDResult:
    """Unbiased squared MMD between the rows of ``x`` and ``y`` with a permutation p-value.

    The Gaussian kernel exp(-|a-b|^2 / (2 bandwidth^2)) is computed once on the pooled sample
    (bandwidth: median pairwise distance when None). The p-value counts the observed value:
    (1 + #{permuted >= observed}) / (1 + n_permutations), so it is never 0 and is valid.

    >>> rng = np.random.default_rng(0)
    >>> r = mmd_permutation_test(rng.normal(size=(30, 2)), rng.normal(3, 1, (30, 2)), 99)
    >>> r.p_value
    0.01
    """
    xs, ys = _as_points(x, "x"), _as_points(y, "y")
    if xs.shape[1] != ys.shape[1]:
        raise ValueError(
            f"x and y must have the same dimension, got {xs.shape[1]} and {ys.shape[1]}"
        )
    if isinstance(n_permutations, bool) or n_permutations < 1:
        raise ValueError(f"n_permutations must be >= 1, got {n_permutations}")
    pooled = np.vstack([xs, ys])
    width = median_bandwidth(pooled) if bandwidth is None else float(bandwidth)
    if not width > 0 or not math.isfinite(width):
        raise ValueError(f"bandwidth must be positive and finite, got {bandwidth}")
    kernel = np.exp(-_squared_distances(pooled) / (2.0 * width**2))
    n = xs.shape[0]
    order = np.arange(pooled.shape[0])
    observed = _mmd_unbiased(kernel, order[:n], order[n:])
    rng = np.random.default_rng(seed)
    at_least = 0
    for _ in range(n_permutations):
        shuffled = rng.permutation(order)
        at_least += _mmd_unbiased(kernel, shuffled[:n], shuffled[n:]) >= observed
    return MMDResult(
        statistic=observed,
        p_value=(1 + at_least) / (1 + n_permutations),
        n_permutations=n_permutations,
        bandwidth=width,
        n_x=n,
        n_y=int(ys.shape[0]),
    )


@dataclass(frozen=True)
class ExceedanceResult:
    """How many test scores reach a calibrated critical value, against what exchangeability
    with the reference allows. ``shifted`` = p_value <= alpha (too many reach it: the upper
    tail shifted).

    ``n_reference_at_or_above`` (q) reference scores are >= the critical value; under the null,
    each test score reaches it with probability at most ``expected_rate`` = (q + 1) / (n + 1).
    """

    n_exceed: int
    n_test: int
    n_reference_at_or_above: int
    n_reference: int
    expected_rate: float
    p_value: float
    shifted: bool
    alpha: float


def exceedance_test(
    reference: ArrayLike, test: ArrayLike, critical_value: float, alpha: float = 0.05
) -> ExceedanceResult:
    """One-sided test that more ``test`` scores reach ``critical_value`` (``>=``) than they
    would if they were exchangeable with ``reference`` (higher = more out-of-knowledge).

    A critical value set on the reference's upper tail flags a share of new in-knowledge
    queries close to alpha; a test set that reaches it far more often means the reference does
    not look like the test queries, and the false-positive rate is off. With q of the n
    reference scores at or above the critical value, the (q + 1)-th largest lies below it, so
    the share of the null distribution that reaches it is at most Beta(q + 1, n - q), and the
    count of m test scores that reach it at most BetaBinomial(m, q + 1, n - q). The p-value is
    that count's upper tail: exact for continuous scores, conservative with ties. A critical
    value that every reference score reaches (q = n) bounds nothing: p = 1.

    More sensitive than KS to the failure that matters (a shift in the upper tail, where the
    critical value sits) and blind to shifts elsewhere, so the two complement each other.

    >>> r = exceedance_test(list(range(19)), [30.0, 1.0], critical_value=18.5)
    >>> r.n_exceed, round(r.p_value, 4)  # P(at least 1 of 2 above the max of 19) = 2/21
    (1, 0.0952)
    """
    ref = as_scores(reference, "reference")
    new = as_scores(test, "test")
    alpha = check_open_unit(alpha, "alpha")
    if math.isnan(critical_value):
        raise ValueError("critical_value must not be NaN")
    n, m = int(ref.size), int(new.size)
    q = int(np.count_nonzero(ref >= critical_value))
    exceed = int(np.count_nonzero(new >= critical_value))
    p_value = 1.0
    if q < n and exceed > 0:
        p_value = beta_binomial_sf(exceed - 1, m, q + 1, n - q)
    return ExceedanceResult(
        n_exceed=exceed,
        n_test=m,
        n_reference_at_or_above=q,
        n_reference=n,
        expected_rate=(q + 1) / (n + 1),
        p_value=min(p_value, 1.0),
        shifted=p_value <= alpha,
        alpha=alpha,
    )


@dataclass(frozen=True)
class MismatchResult:
    """Do calibration scores look like real queries' scores? ``differ`` = either test finds a
    shift at ``level / 2`` (Bonferroni: a false warning has probability <= ``level``)."""

    ks: KSResult
    exceedance: ExceedanceResult
    differ: bool
    level: float


def calibration_mismatch(
    reference: ArrayLike, test: ArrayLike, critical_value: float, level: float = 0.05
) -> MismatchResult:
    """Two tests of ``test`` scores against the calibration ``reference`` scores, each at
    ``level / 2``: KS (the whole distribution, both directions) and :func:`exceedance_test`
    (too many reach ``critical_value``: the false-positive rate is off).

    KS alone misses an upper-tail shift in a few dozen scores; the exceedance test alone
    misses a shift away from the tail (real queries closer than the calibration costs power,
    not validity). The union holds the false-warning rate at ``level``.

    >>> r = calibration_mismatch(list(range(100)), [99.5] * 6 + list(range(14)), 98.5)
    >>> r.differ, r.exceedance.n_exceed
    (True, 6)
    """
    level = check_open_unit(level, "level")
    each = bonferroni_alpha(level, 2)
    ks = ks_two_sample(reference, test, alpha=each)
    exceedance = exceedance_test(reference, test, critical_value, alpha=each)
    return MismatchResult(ks, exceedance, ks.shifted or exceedance.shifted, level)


def bonferroni_alpha(alpha: float, n_tests: int) -> float:
    """Per-test level alpha / n_tests: any false alarm among n_tests has probability <= alpha."""
    alpha = check_open_unit(alpha, "alpha")
    if isinstance(n_tests, bool) or n_tests < 1:
        raise ValueError(f"n_tests must be >= 1, got {n_tests}")
    return alpha / n_tests
