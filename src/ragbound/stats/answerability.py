"""How several conformal tests share one error budget.

The gate runs the relevance test and the answerability test on every question; a question is
turned away when either flags it. :func:`shared_alpha` picks the one level both run at so
that the share of calibration questions (answerable by construction) flagged by either stays
at alpha; :func:`calibration_p_values` gives each calibration question the p-value a new
question exchangeable with it would get. Scores are oriented as everywhere in the package:
higher = more out of knowledge.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ragbound.stats._validate import FloatArray, check_open_unit


def calibration_p_values(scores: ArrayLike) -> FloatArray:
    """Each calibration score's conformal p-value against the others:
    ``(1 + #{j != i: s_j >= s_i}) / n`` (higher score = more extreme).

    What a new question exchangeable with them would get against n - 1 of them; a little
    smaller than against all n, so a threshold chosen on these errs on the safe side.

    >>> calibration_p_values([0.1, 0.5, 0.5, 0.9]).tolist()
    [1.0, 0.75, 0.75, 0.25]
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or s.size < 2:
        raise ValueError("calibration_p_values needs a 1-d array of at least 2 scores")
    ordered = np.sort(s)
    at_least = s.size - np.searchsorted(ordered, s, side="left")  # itself included
    return at_least / s.size


def shared_alpha(p_values: ArrayLike, alpha: float) -> float:
    """The level each of several tests runs at so that, together, they flag at most
    ``alpha`` of the calibration questions.

    ``p_values`` is (n, m): each of n calibration questions' leave-one-out p-value
    (:func:`calibration_p_values`) under each of m tests. A question is flagged when any of
    its p-values is <= the level; the level returned is the largest such that the share
    flagged is <= ``alpha`` (alpha itself when one test: nothing to share). When even the
    smallest p-value flags too many (fewer than 1 / alpha questions), half of it: a level > 0
    that flags nothing, as no single test can at that alpha either. Tests that agree
    (correlated p-values) keep a level near alpha; independent ones fall toward a Bonferroni
    split (alpha / m).

    >>> p = [[0.1, 0.9], [0.9, 0.1], [0.5, 0.5], [0.9, 0.9]]
    >>> shared_alpha(p, 0.5)
    0.1
    >>> shared_alpha(p, 0.25)
    0.05
    """
    check_open_unit(alpha, "alpha")
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] == 0 or p.shape[1] == 0:
        raise ValueError("p_values must be (n questions, m tests), both >= 1")
    if p.shape[1] == 1:
        return float(alpha)
    smallest = np.sort(p.min(axis=1))
    n = smallest.size
    allowed = int(np.floor(alpha * n + 1e-9))  # questions that may be flagged
    if allowed >= n:
        return float(alpha)
    # flagged at level a: #{smallest <= a}; the largest a keeping it <= allowed lies just
    # under the (allowed + 1)-th smallest
    below = smallest[allowed]
    candidates = smallest[smallest < below]
    level = float(candidates.max()) if candidates.size else float(smallest[0]) / 2
    return min(level, float(alpha))
