"""Detection metrics (paper section 4.1): AUROC, AUPRC, TPR at 5% FPR, detection error rate.

Out-of-knowledge (OoK) queries are the positive class. Scores are test statistics oriented so
that higher = more OoK; a query is flagged OoK iff ``score >= threshold``. ``scores_in`` are
the in-knowledge (negative) scores, ``scores_out`` the OoK (positive) ones. Rates are fractions
in [0, 1].
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ragbound.stats._validate import FloatArray, as_scores, check_open_unit

ORACLE_FPR = 0.05


class OperatingPoint(NamedTuple):
    """Rates of the rule "flag iff score >= threshold" (fractions in [0, 1])."""

    tpr: float  # share of OoK scores flagged (recall)
    fpr: float  # share of in-knowledge scores flagged
    der: float  # (false positives + false negatives) / all scores


def _ranked_counts(
    scores_in: ArrayLike, scores_out: ArrayLike
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """How many in-knowledge and how many OoK scores sit at each distinct score, highest
    score first (both sides validated)."""
    inside = as_scores(scores_in, "scores_in")
    outside = as_scores(scores_out, "scores_out")
    values, group = np.unique(np.concatenate([inside, outside]), return_inverse=True)
    negatives = np.bincount(group[: inside.size], minlength=values.size)
    positives = np.bincount(group[inside.size :], minlength=values.size)
    return negatives[::-1].astype(np.int64), positives[::-1].astype(np.int64)


def auroc(scores_in: ArrayLike, scores_out: ArrayLike) -> float:
    """Area under the ROC curve: P(OoK score > in-knowledge score), ties counting 1/2.

    The trapezoids under :func:`roc_points` (its corners only), summed as scikit-learn's
    ``roc_auc_score`` sums them, so the two agree to the last bit.
    """
    fpr, tpr = roc_points(scores_in, scores_out)
    return float((np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2.0).sum())


def roc_points(scores_in: ArrayLike, scores_out: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """The ROC curve (fpr, tpr) from (0, 0) to (1, 1): a point per distinct score, flagging
    every score at or above it, but only where the curve turns (a point on the straight line
    between its neighbours, the same step in both rates on either side, is left out)."""
    negatives, positives = _ranked_counts(scores_in, scores_out)
    flagged_in, flagged_out = np.cumsum(negatives), np.cumsum(positives)
    if flagged_in.size > 2:
        turns = (np.diff(flagged_in, 2) != 0) | (np.diff(flagged_out, 2) != 0)
        corner = np.concatenate([[True], turns, [True]])
        flagged_in, flagged_out = flagged_in[corner], flagged_out[corner]
    fpr = np.concatenate([[0], flagged_in]) / flagged_in[-1]
    tpr = np.concatenate([[0], flagged_out]) / flagged_out[-1]
    return fpr, tpr


def auroc_standard_error(area: float, n_in: int, n_out: int) -> float:
    """Hanley and McNeil's (1982) standard error of an AUROC of ``area`` estimated from
    ``n_in`` in-knowledge and ``n_out`` out-of-knowledge scores (closed form, no resampling).

    SE^2 = [A(1 - A) + (n_out - 1)(Q1 - A^2) + (n_in - 1)(Q2 - A^2)] / (n_in n_out), with
    Q1 = A / (2 - A) and Q2 = 2A^2 / (1 + A).

    >>> auroc_standard_error(0.5, 1, 1)
    0.5
    """
    if not 0.0 <= area <= 1.0:
        raise ValueError(f"area must be in [0, 1], got {area}")
    if n_in < 1 or n_out < 1:
        raise ValueError(f"sample sizes must be >= 1, got {n_in} and {n_out}")
    q1, q2 = area / (2.0 - area), 2.0 * area**2 / (1.0 + area)
    variance = area * (1.0 - area) + (n_out - 1) * (q1 - area**2) + (n_in - 1) * (q2 - area**2)
    return math.sqrt(max(variance, 0.0) / (n_in * n_out))


def auprc(scores_in: ArrayLike, scores_out: ArrayLike) -> float:
    """Area under the precision-recall curve (average precision), OoK as positive class.

    ``sum_t (recall_t - recall_t-1) * precision_t`` over the distinct scores t, highest
    first, each flagging every score at or above it; ties are one step.
    """
    negatives, positives = _ranked_counts(scores_in, scores_out)
    found = np.cumsum(positives)
    recall = np.concatenate([[0.0], found / found[-1]])
    precision = found / (found + np.cumsum(negatives))
    terms = np.diff(recall) * precision
    return float(terms[::-1].copy().sum())  # summed from the lowest score up


def rates_at_threshold(
    scores_in: ArrayLike, scores_out: ArrayLike, threshold: float
) -> OperatingPoint:
    """TPR, FPR and detection error rate of "flag iff score >= threshold".

    ``threshold`` may be +inf (nothing flagged) or -inf (everything flagged), not NaN. TPR is
    recall on OoK scores (the paper's text describes precision, but its tables report TPR).
    """
    inside = as_scores(scores_in, "scores_in")
    outside = as_scores(scores_out, "scores_out")
    if math.isnan(threshold):
        raise ValueError("threshold must not be NaN")
    false_pos = int(np.count_nonzero(inside >= threshold))
    true_pos = int(np.count_nonzero(outside >= threshold))
    false_neg = outside.size - true_pos
    return OperatingPoint(
        tpr=true_pos / outside.size,
        fpr=false_pos / inside.size,
        der=(false_pos + false_neg) / (inside.size + outside.size),
    )


def threshold_at_fpr(scores_in: ArrayLike, fpr: float = ORACLE_FPR) -> float:
    """Smallest threshold whose FPR on ``scores_in`` is <= ``fpr`` (flag iff score >= it).

    This maximises TPR under the FPR budget. It is the next float above the in-knowledge score
    that would exceed the budget, or -inf if every score may be flagged.
    """
    inside = np.sort(as_scores(scores_in, "scores_in"))[::-1]
    fpr = check_open_unit(fpr, "fpr")
    allowed = min(inside.size, math.floor(fpr * inside.size) + 1)
    while allowed / inside.size > fpr:  # same float arithmetic as the FPR itself
        allowed -= 1
    if allowed >= inside.size:
        return -math.inf
    return math.nextafter(float(inside[allowed]), math.inf)


def tpr_at_fpr(scores_in: ArrayLike, scores_out: ArrayLike, fpr: float = ORACLE_FPR) -> float:
    """TPR at the oracle ROC operating point: the best TPR with FPR on ``scores_in`` <= fpr."""
    threshold = threshold_at_fpr(scores_in, fpr)
    return rates_at_threshold(scores_in, scores_out, threshold).tpr


def _one_run(inside: FloatArray, outside: FloatArray, threshold: float | None) -> dict[str, float]:
    """All metrics of one balanced draw."""
    result = {
        "auroc": auroc(inside, outside),
        "auprc": auprc(inside, outside),
        "tpr_at_5_fpr_oracle": tpr_at_fpr(inside, outside, ORACLE_FPR),
    }
    if threshold is not None:
        point = rates_at_threshold(inside, outside, threshold)
        result.update(tpr_at_5_fpr=point.tpr, der=point.der, fpr=point.fpr)
    return result


def _summarise(runs: list[dict[str, float]]) -> dict[str, float]:
    """Mean and sample standard deviation (ddof=1; 0 for a single run) of each metric."""
    summary: dict[str, float] = {}
    for key in runs[0]:
        values = np.array([run[key] for run in runs])
        summary[key] = float(values.mean())
        summary[f"{key}_std"] = float(values.std(ddof=1)) if values.size > 1 else 0.0
    return summary


def balanced_runs(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    *,
    samples: int = 300,
    runs: int = 10,
    seed: int = 0,
    threshold: float | None = None,
) -> dict[str, float]:
    """The paper's protocol: metrics averaged over ``runs`` balanced random draws.

    Scores are computed once by the caller; each run draws ``min(samples, len)`` of them from
    each side without replacement (``numpy.random.default_rng(seed)``). When that takes every
    score of both sides, every run would be the same sample: one run is made. Returned keys:
    ``auroc``,
    ``auprc`` and ``tpr_at_5_fpr_oracle`` (threshold set on the drawn in-knowledge scores at 5%
    FPR), each with a ``*_std``; if ``threshold`` is given (a calibrated critical value) also
    ``tpr_at_5_fpr``, ``der`` and ``fpr`` at it, with ``*_std``; plus ``n_in``, ``n_out`` (draw
    sizes) and ``runs`` (made).
    """
    inside = as_scores(scores_in, "scores_in")
    outside = as_scores(scores_out, "scores_out")
    if samples < 1 or runs < 1:
        raise ValueError(f"samples and runs must be >= 1, got samples={samples}, runs={runs}")
    if threshold is not None and math.isnan(threshold):
        raise ValueError("threshold must not be NaN")
    rng = np.random.default_rng(seed)
    n_in, n_out = min(samples, inside.size), min(samples, outside.size)
    if n_in == inside.size and n_out == outside.size:
        runs = 1  # a draw of everything is the same set every time
    draws = [
        _one_run(
            inside[rng.choice(inside.size, size=n_in, replace=False)],
            outside[rng.choice(outside.size, size=n_out, replace=False)],
            threshold,
        )
        for _ in range(runs)
    ]
    return {**_summarise(draws), "n_in": n_in, "n_out": n_out, "runs": runs}


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval (low, high) for a binomial rate ``successes / n``.

    Always contains the point estimate and stays inside [0, 1], also at 0 or n successes.
    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need n >= 1 and 0 <= successes <= n, got successes={successes}, n={n}")
    confidence = check_open_unit(confidence, "confidence")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    rate = successes / n
    denominator = 1 + z * z / n
    centre = (rate + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n))
    return max(0.0, min(centre - half, rate)), min(1.0, max(centre + half, rate))
