"""BoundaryDetector: the paper's online goodness-of-fit test on top-k retrieval similarities."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from ragbound.errors import InputError, NotFittedError
from ragbound.stats import (
    META,
    STATISTICS,
    EmpiricalNull,
    NeighbourNull,
    meta_null_scores,
    meta_scores,
    univariate_scores,
)

PValueMethod = Literal["conformal", "paper"]
# The paper finds the best statistic differs by corpus; MSS won on its PubMed corpus and on
# ours (README, "Choosing the statistic"), and it needs no neighbour beyond the first.
DEFAULT_STATISTIC = "mss"
DEFAULT_K = 32


class BoundaryDetector:
    """Out-of-knowledge test for single queries, calibrated on in-knowledge queries.

    Works on plain arrays: ``similarities`` has shape (n_queries, >= k), each row the
    top retrieval similarities sorted descending (higher = closer). The statistic is
    oriented so that higher = more out-of-knowledge; ``p_value`` is its right tail
    under the empirical null of the calibration queries, and ``predict`` rejects
    (flags out-of-knowledge) when p <= alpha.

    Parameters:
        statistic: one of mss, knn, avgknn, entropy, energy, fisher, simes.
        k: neighbours used (the paper's default 32).
        tau: temperature of the energy statistic.
        alpha: significance level for ``predict`` and ``critical_value_``.
        p_value_method: ``conformal`` (default; p = (1 + #{null >= t}) / (n + 1), exactly
            valid: P(p <= alpha) <= alpha under the null) or ``paper`` (eq. 2 verbatim,
            p = 1 - F_hat(t), which can be 0 and exceeds alpha by up to 1/(n+1)).

    Example:
        >>> rng = np.random.default_rng(0)
        >>> calibration = -np.sort(-rng.uniform(0.5, 0.9, size=(200, 4)), axis=1)
        >>> det = BoundaryDetector(statistic="mss", k=4).fit(calibration)
        >>> far = np.full((1, 4), 0.1)
        >>> bool(det.predict(far)[0]), round(float(det.p_value(far)[0]), 4)
        (True, 0.005)
    """

    def __init__(
        self,
        *,
        statistic: str = DEFAULT_STATISTIC,
        k: int = DEFAULT_K,
        tau: float = 1.0,
        alpha: float = 0.05,
        p_value_method: PValueMethod = "conformal",
    ):
        self.statistic = statistic
        self.k = k
        self.tau = tau
        self.alpha = alpha
        self.p_value_method = p_value_method
        self._validate_params()

    def _validate_params(self) -> None:
        if self.statistic not in STATISTICS:
            raise InputError(
                f"unknown statistic {self.statistic!r}: choose one of {', '.join(STATISTICS)}"
            )
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise InputError(f"k must be a positive integer, got {self.k!r}")
        if not (isinstance(self.tau, int | float) and math.isfinite(self.tau) and self.tau > 0):
            raise InputError(f"tau must be a positive number, got {self.tau!r}")
        if not (isinstance(self.alpha, int | float) and 0 < self.alpha < 1):
            raise InputError(f"alpha must be in (0, 1), got {self.alpha!r}")
        if self.p_value_method not in ("conformal", "paper"):
            raise InputError(
                f"p_value_method must be 'conformal' or 'paper', got {self.p_value_method!r}"
            )

    def get_params(self) -> dict[str, object]:
        return {
            "statistic": self.statistic,
            "k": self.k,
            "tau": self.tau,
            "alpha": self.alpha,
            "p_value_method": self.p_value_method,
        }

    # ----------------------------------------------------------------- fitting
    def fit(self, similarities: np.ndarray) -> BoundaryDetector:
        """Build the empirical null from in-knowledge queries' top-k similarities."""
        self._validate_params()
        sims = self._as_sims(similarities, "calibration similarities")
        if self.statistic in META:
            null_scores = meta_null_scores(self.statistic, sims)
        else:
            null_scores = univariate_scores(self.statistic, sims, tau=self.tau)
        self.null_similarities_ = sims
        # per-neighbour nulls sorted once here, not on every request (meta statistics only)
        self.neighbour_null_ = NeighbourNull(sims) if self.statistic in META else None
        self.null_ = EmpiricalNull(null_scores)
        self.n_calibration_ = len(sims)
        self.critical_value_ = float(self.null_.critical_value(self.alpha, self.p_value_method))
        return self

    def _as_sims(self, similarities: np.ndarray, what: str) -> np.ndarray:
        sims = np.asarray(similarities, dtype=np.float64)
        if sims.ndim != 2 or sims.shape[0] == 0:
            raise InputError(f"{what} must be a non-empty (n_queries, k) array, got {sims.shape}")
        if sims.shape[1] < self.k:
            raise InputError(f"{what} have {sims.shape[1]} columns but k={self.k}")
        if not np.isfinite(sims).all():
            raise InputError(f"{what} contain NaN or infinite values")
        return np.ascontiguousarray(sims[:, : self.k])

    def _check_fitted(self) -> None:
        if not hasattr(self, "null_"):
            raise NotFittedError("BoundaryDetector is not fitted: call fit(calibration) first")

    # --------------------------------------------------------------- inference
    def score(self, similarities: np.ndarray) -> np.ndarray:
        """Raw test statistic per query (higher = more out-of-knowledge)."""
        sims = self._as_sims(similarities, "similarities")
        if self.statistic in META:
            self._check_fitted()
            return meta_scores(self.statistic, self.neighbour_null_, sims)
        return univariate_scores(self.statistic, sims, tau=self.tau)

    def p_value(self, similarities: np.ndarray) -> np.ndarray:
        """Calibrated p-value per query: right tail of the in-knowledge null."""
        self._check_fitted()
        return self.null_.p_values(self.score(similarities), method=self.p_value_method)

    def predict(self, similarities: np.ndarray) -> np.ndarray:
        """True where the query is out-of-knowledge at level alpha (p <= alpha)."""
        return self.p_value(similarities) <= self.alpha
