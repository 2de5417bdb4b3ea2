"""Empirical null distributions and p-values (paper eq. 2).

The null is the distribution of a test statistic over in-knowledge calibration queries.
Statistics are oriented so that higher = more out-of-knowledge, so a p-value is the right tail
of the null: the share of calibration scores at least as extreme as the query's. A query is
out of knowledge when ``p <= alpha``.

Two p-value definitions are offered (``method``):

* ``"conformal"`` (default): ``p = (1 + #{null >= t}) / (n + 1)``. If the query and the n
  calibration queries are exchangeable (drawn i.i.d. from the same distribution), then
  ``P(p <= alpha) = floor(alpha * (n + 1)) / (n + 1) <= alpha`` for continuous statistics and
  ``<= alpha`` with ties: the type I error is bounded exactly, at every n. p lies in (0, 1].
* ``"paper"``: exactly eq. 2, ``p = 1 - F(t)`` with ``F(t) = (1 + #{null <= t}) / (1 + n)``,
  i.e. ``p = #{null > t} / (n + 1)``. It can be 0 and flags with probability up to
  ``alpha + 1 / (n + 1)``: slightly anti-conservative.

Which p-values are exactly valid:

* **Exactly valid** (conformal method): the univariate statistics (MSS, KNN, AvgKNN,
  Entropy, Energy). Each query's score depends on its own similarities only, so the test
  score and the n calibration scores are exchangeable whenever the queries are, and
  ``P(p <= alpha) <= alpha`` holds at every n without further assumptions.
* **Approximately valid**: the meta statistics (Fisher, Simes). A query's score combines
  its per-neighbour p-values against all n calibration rows (denominator n + 1), while the
  null's scores come from leave-one-out p-values against n - 1 rows (denominator n). The
  two are not exchangeable: the query's per-neighbour p-values sit on a slightly finer grid,
  so its score is stochastically a little larger. Measured by simulation
  (tests/stats/test_stats_null.py, alpha in 0.01..0.2): Fisher stayed at or below alpha;
  Simes, whose null has atoms, flagged up to 0.041 more than alpha at n = 20 and about
  2 / n more at larger n (0.008 at n = 200), worst with few, nearly independent neighbours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ragbound.stats._validate import (
    FloatArray,
    as_float_array,
    as_scores,
    as_sims,
    check_choice,
    check_open_unit,
)
from ragbound.stats.names import META, P_VALUE_METHODS, PValueMethod
from ragbound.stats.statistics import combine_p_values


def _p_from_count(count: NDArray[np.int64] | int, n: int, method: str) -> FloatArray | float:
    """P-value from the tail count: #{null >= t} (conformal) or #{null > t} (paper)."""
    if method == "conformal":
        return (1.0 + count) / (n + 1)
    return count / (n + 1)


@dataclass(frozen=True, eq=False)
class EmpiricalNull:
    """Empirical null of a test statistic, built from calibration scores (higher = more OoK).

    ``scores`` is given as any 1-D finite array with at least one value; it is stored sorted
    ascending as a read-only, contiguous float64 array. Querying costs O(log n) per score.

    >>> null = EmpiricalNull([0.1, 0.2, 0.3, 0.4])
    >>> float(null.p_values(0.35))  # (1 + 1) / (4 + 1)
    0.4
    """

    scores: FloatArray

    def __post_init__(self) -> None:
        ordered = np.ascontiguousarray(np.sort(as_scores(self.scores, "calibration scores")))
        ordered.setflags(write=False)
        object.__setattr__(self, "scores", ordered)

    @property
    def n(self) -> int:
        """Number of calibration scores."""
        return int(self.scores.size)

    def _tail_count(self, t: FloatArray, method: str) -> NDArray[np.int64]:
        """#{null >= t} for ``conformal``, #{null > t} for ``paper`` (binary search)."""
        side: Literal["left", "right"] = "left" if method == "conformal" else "right"
        return self.n - np.searchsorted(self.scores, t, side=side)

    def p_values(self, t: ArrayLike, method: PValueMethod = "conformal") -> FloatArray:
        """Right-tail p-values of statistic values ``t`` (any shape; same shape returned).

        ``conformal``: ``(1 + #{null >= t}) / (n + 1)``, in (0, 1], super-uniform under
        exchangeability. ``paper``: ``#{null > t} / (n + 1)`` (eq. 2), in [0, 1), can be 0 and
        is slightly anti-conservative. Both are non-increasing in t. ``t`` may be +/-inf, not NaN.
        """
        check_choice(method, P_VALUE_METHODS, "p-value method")
        values = as_float_array(t, "t")
        if np.isnan(values).any():
            raise ValueError("t contains NaN")
        return np.asarray(_p_from_count(self._tail_count(values, method), self.n, method))

    def _max_tail_count(self, alpha: float, method: str) -> int:
        """Largest tail count whose p-value is <= alpha (-1 if none), same float arithmetic."""
        count = min(self.n, math.floor(alpha * (self.n + 1)) + 1)
        while count >= 0 and _p_from_count(count, self.n, method) > alpha:
            count -= 1
        return count

    def critical_value(self, alpha: float, method: PValueMethod = "conformal") -> float:
        """Smallest statistic value c with ``p(t) <= alpha`` for every t >= c.

        Consistent with :meth:`p_values`: for every finite float t, ``t >= c`` iff
        ``p_values(t, method) <= alpha``. For ``paper`` c is a calibration score (the paper's
        ``inf{t : F(t) > 1 - alpha}``). For ``conformal`` the set of flagged t is open, so c is
        the next float64 above the calibration score at the boundary.

        Returns ``math.inf`` when no value reaches ``p <= alpha`` (conformal with
        ``1 / (n + 1) > alpha``, i.e. too few calibration scores): nothing is ever flagged.
        Returns ``-math.inf`` when every value does (paper with ``alpha >= n / (n + 1)``).
        """
        alpha = check_open_unit(alpha, "alpha")
        check_choice(method, P_VALUE_METHODS, "p-value method")
        count = self._max_tail_count(alpha, method)
        if count < 0:
            return math.inf
        if count >= self.n:
            return -math.inf
        boundary = float(self.scores[self.n - count - 1])
        return math.nextafter(boundary, math.inf) if method == "conformal" else boundary


class NeighbourNull:
    """Per-neighbour empirical nulls for the meta-analytic tests (Fisher, Simes).

    Built from calibration similarities ``null_sims`` (n, k), rows sorted descending. Column i
    gives the null of the statistic ``-sims[:, i]`` (minus the i-th neighbour's similarity,
    higher = more OoK). Sorting happens once here; p-values then cost O(k log n) per query.
    """

    __slots__ = ("_columns",)

    def __init__(self, null_sims: ArrayLike) -> None:
        sims = as_sims(null_sims, "null_sims")
        columns = np.ascontiguousarray(np.sort(-sims.T, axis=1))
        columns.setflags(write=False)
        self._columns: FloatArray = columns

    @property
    def n(self) -> int:
        """Number of calibration queries."""
        return int(self._columns.shape[1])

    @property
    def k(self) -> int:
        """Number of neighbours (columns)."""
        return int(self._columns.shape[0])

    def p_values(self, sims: ArrayLike) -> FloatArray:
        """Conformal per-neighbour p-values (m, k): ``(1 + #{null_i >= t_i}) / (n + 1)``."""
        values = as_sims(sims)
        if values.shape[1] != self.k:
            raise ValueError(
                f"sims has k={values.shape[1]} columns but the null was built with k={self.k}"
            )
        return (1.0 + _count_at_least(self._columns, -values)) / (self.n + 1)


def _count_at_least(sorted_columns: FloatArray, stats: FloatArray) -> NDArray[np.int64]:
    """(m, k) counts ``#{null_i >= stats[:, i]}``; ``sorted_columns`` is (k, n) ascending.

    One vectorised binary search per column (k is small); no loop over queries.
    """
    n = sorted_columns.shape[1]
    counts = np.empty(stats.shape, dtype=np.int64)
    for i, column in enumerate(sorted_columns):
        counts[:, i] = n - np.searchsorted(column, stats[:, i], side="left")
    return counts


def per_neighbour_p_values(null_sims: ArrayLike | NeighbourNull, sims: ArrayLike) -> FloatArray:
    """Conformal p-value (m, k) of each query's i-th similarity against the null's i-th column.

    For column i the statistic is ``-sims[:, i]`` (higher = more OoK) and
    ``p = (1 + #{null rows j : -null_sims[j, i] >= -sims[:, i]}) / (n_null + 1)``.
    Pass a prebuilt :class:`NeighbourNull` to avoid re-sorting the null on every call.
    """
    null = null_sims if isinstance(null_sims, NeighbourNull) else NeighbourNull(null_sims)
    return null.p_values(sims)


def leave_one_out_p_values(null_sims: ArrayLike) -> FloatArray:
    """Per-neighbour p-values (n, k) of the calibration rows, each against the other n - 1 rows.

    ``p[j, i] = (1 + #{l != j : t[l, i] >= t[j, i]}) / n`` with ``t = -null_sims``; ties count
    as at least as extreme. Used to build the null of Fisher/Simes without comparing a query
    with itself. (A new query is compared with all n rows, denominator n + 1; the two are the
    same rule applied to n - 1 versus n reference rows.)
    """
    stats = -as_sims(null_sims, "null_sims")
    sorted_columns = np.ascontiguousarray(np.sort(stats.T, axis=1))
    # #{l : t_l >= t_j} counts row j itself once, which plays the role of the "+1".
    return _count_at_least(sorted_columns, stats) / stats.shape[0]


def meta_scores(name: str, null_sims: ArrayLike | NeighbourNull, sims: ArrayLike) -> FloatArray:
    """Meta statistic ``name`` ("fisher" or "simes") of each query; higher = more OoK.

    Combines the query's per-neighbour conformal p-values against ``null_sims``.
    """
    check_choice(name, META, "meta statistic")
    return combine_p_values(name, per_neighbour_p_values(null_sims, sims))


def meta_null_scores(name: str, null_sims: ArrayLike) -> FloatArray:
    """Meta statistic ``name`` of every calibration row, from leave-one-out p-values (n,).

    These scores form the empirical null (:class:`EmpiricalNull`) of the meta statistic.
    """
    check_choice(name, META, "meta statistic")
    return combine_p_values(name, leave_one_out_p_values(null_sims))
