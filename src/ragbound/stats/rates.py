"""Confidence intervals for rates measured on a sample (benchmark tables).

The Wilson score interval for a binomial rate lives in :mod:`ragbound.stats.metrics`
(``wilson_interval``); this module adds the percentile bootstrap for any statistic.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from ragbound.stats._validate import FloatArray, as_scores, check_open_unit

DEFAULT_RESAMPLES = 2000


def bootstrap_interval(
    values: ArrayLike,
    statistic: Callable[[FloatArray], float] = np.mean,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int | None = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval (low, high) of ``statistic(values)``.

    ``values`` is a 1-D sample (for a rate: 1 per success, 0 per failure); each of
    ``resamples`` draws ``len(values)`` values with replacement. The same ``seed`` gives the
    same interval. A sample with no spread (all 0 or all 1) gives a zero-width interval,
    which is why rates default to the Wilson interval.
    """
    sample = as_scores(values, "values")
    confidence = check_open_unit(confidence, "confidence")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"resamples must be an integer >= 1, got {resamples!r}")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, sample.size, size=(resamples, sample.size))
    estimates = np.array([float(statistic(sample[row])) for row in draws])
    if not np.isfinite(estimates).all():
        raise ValueError("statistic returned NaN or an infinity on a resample")
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(estimates, [tail, 1.0 - tail])
    return float(low), float(high)
