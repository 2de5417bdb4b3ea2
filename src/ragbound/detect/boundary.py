"""BoundaryDetector: the paper's online goodness-of-fit test on top-k retrieval similarities."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ragbound.detect.config import (
    COMBINED,
    DEFAULTS,
    TEST_PARAMS,
    DetectorConfig,
    detector_config,
)
from ragbound.errors import InputError, NotFittedError
from ragbound.stats import (
    META,
    EmpiricalNull,
    NeighbourNull,
    PValueMethod,
    meta_null_scores,
    meta_scores,
    univariate_scores,
)


class ScoredQueries(NamedTuple):
    """Per query: the test statistic (higher = more out-of-knowledge) and its p-value."""

    scores: np.ndarray
    p_values: np.ndarray


class BoundaryDetector:
    """Out-of-knowledge test for single queries, calibrated on in-knowledge queries.

    Works on plain arrays: ``similarities`` has shape (n_queries, >= k), each row the
    top retrieval similarities sorted descending (higher = closer). The statistic is
    oriented so that higher = more out-of-knowledge; ``p_value`` is its right tail
    under the empirical null of the calibration queries, and ``predict`` flags
    out-of-knowledge when p <= alpha.

    A scikit-learn style estimator: the parameters (those of :class:`DetectorConfig`, with
    its defaults) are stored unchanged by ``__init__`` and validated by ``fit``, so
    ``sklearn.base.clone``, ``get_params`` and ``set_params`` work. PyOD names sit beside
    ours: ``decision_function`` (= ``score``), ``decision_scores_`` (the null's scores of
    the calibration rows), ``threshold_`` (= ``critical_value_``) and ``labels_``.

    Parameters:
        statistic: one of mss, knn, avgknn, entropy, energy, fisher, simes.
        k: neighbours used (the paper's default 32).
        tau: temperature of the energy statistic.
        alpha: significance level for ``predict`` and ``critical_value_``.
        p_value_method: ``conformal`` (default, exactly valid for the univariate statistics)
            or ``paper`` (eq. 2 verbatim, slightly anti-conservative); Fisher and Simes
            p-values are only approximately valid (:mod:`ragbound.stats.null`).

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
        statistic: str = DEFAULTS.statistic,
        k: int = DEFAULTS.k,
        tau: float = DEFAULTS.tau,
        alpha: float = DEFAULTS.alpha,
        p_value_method: PValueMethod = DEFAULTS.p_value_method,
    ):
        # stored unchanged and validated in fit (scikit-learn's rule, so clone works)
        self.statistic = statistic
        self.k = k
        self.tau = tau
        self.alpha = alpha
        self.p_value_method = p_value_method

    # ------------------------------------------------------------ parameters
    @classmethod
    def from_config(cls, config: DetectorConfig) -> BoundaryDetector:
        """An unfitted detector with the parameters of ``config``."""
        return cls(**config.model_dump(include=set(TEST_PARAMS)))

    @property
    def config(self) -> DetectorConfig:
        """The parameters as a validated DetectorConfig (InputError if one is bad)."""
        return detector_config(**self.get_params())

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters (``deep`` is accepted for scikit-learn; no sub-estimators)."""
        return {name: getattr(self, name) for name in TEST_PARAMS}

    def set_params(self, **params: Any) -> BoundaryDetector:
        """Set parameters by name and return self; values are validated by the next ``fit``."""
        unknown = set(params) - set(TEST_PARAMS)
        if unknown:
            raise InputError(
                f"unknown parameter(s) {', '.join(sorted(unknown))}; valid: "
                f"{', '.join(TEST_PARAMS)}"
            )
        for name, value in params.items():
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        changed = {n: v for n, v in self.get_params().items() if v != getattr(DEFAULTS, n)}
        return f"BoundaryDetector({', '.join(f'{n}={v!r}' for n, v in changed.items())})"

    # ----------------------------------------------------------------- fitting
    def fit(self, similarities: np.ndarray, y: object = None) -> BoundaryDetector:
        """Build the empirical null from in-knowledge queries' top-k similarities.

        ``y`` is ignored (scikit-learn's signature for unsupervised estimators).
        """
        config = self.config
        if config.statistic == COMBINED:
            raise InputError(
                f"the {COMBINED} statistic is learned from more than similarities: calibrate "
                "it with ragbound calibrate --statistic combined and test with Guard.check"
            )
        sims = _as_sims(similarities, config.k, "calibration similarities")
        if config.statistic in META:
            null_scores = meta_null_scores(config.statistic, sims)
        else:
            null_scores = univariate_scores(config.statistic, sims, tau=config.tau)
        self.config_ = config  # the parameters this fit used; scoring follows them
        # per-neighbour nulls sorted once here, not on every request (meta statistics only)
        self.neighbour_null_ = NeighbourNull(sims) if config.statistic in META else None
        self.null_ = EmpiricalNull(null_scores)
        self.n_calibration_ = len(sims)
        self.critical_value_ = float(self.null_.critical_value(config.alpha, config.p_value_method))
        self.decision_scores_ = np.asarray(null_scores, dtype=np.float64)
        self.threshold_ = self.critical_value_
        self.labels_ = (self.decision_scores_ >= self.threshold_).astype(np.int64)
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "null_"):
            raise NotFittedError("BoundaryDetector is not fitted: call fit(calibration) first")

    # --------------------------------------------------------------- inference
    def score(self, similarities: np.ndarray) -> np.ndarray:
        """Raw test statistic per query (higher = more out-of-knowledge).

        Uses the parameters of the last ``fit`` (``config_``): after ``set_params``, fit again.
        """
        self._check_fitted()
        config = self.config_
        sims = _as_sims(similarities, config.k, "similarities")
        if config.statistic in META:
            return meta_scores(config.statistic, self.neighbour_null_, sims)
        return univariate_scores(config.statistic, sims, tau=config.tau)

    def decision_function(self, similarities: np.ndarray) -> np.ndarray:
        """PyOD's name for :meth:`score`: higher = more out-of-knowledge."""
        return self.score(similarities)

    def score_p_value(self, similarities: np.ndarray) -> ScoredQueries:
        """Statistic and calibrated p-value of every query, computed once."""
        scores = self.score(similarities)
        return ScoredQueries(
            scores, self.null_.p_values(scores, method=self.config_.p_value_method)
        )

    def p_value(self, similarities: np.ndarray) -> np.ndarray:
        """Calibrated p-value per query: right tail of the in-knowledge null."""
        return self.score_p_value(similarities).p_values

    def predict(self, similarities: np.ndarray) -> np.ndarray:
        """True where the query is out-of-knowledge at level alpha (p <= alpha)."""
        return self.p_value(similarities) <= self.config_.alpha


def _as_sims(similarities: np.ndarray, k: int, what: str) -> np.ndarray:
    """The first k columns of a finite, non-empty (n_queries, >= k) similarity array."""
    sims = np.asarray(similarities, dtype=np.float64)
    if sims.ndim != 2 or sims.shape[0] == 0:
        raise InputError(f"{what} must be a non-empty (n_queries, k) array, got {sims.shape}")
    if sims.shape[1] < k:
        raise InputError(f"{what} have {sims.shape[1]} columns but k={k}")
    if not np.isfinite(sims).all():
        raise InputError(f"{what} contain NaN or infinite values")
    return np.ascontiguousarray(sims[:, :k])
