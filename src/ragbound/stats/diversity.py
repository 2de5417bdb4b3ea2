"""Diversity selection over a pairwise similarity matrix (KnowOrNot appendix A.2).

Similarities are higher = closer (cosine in [-1, 1]); distance is ``1 - similarity``.
Both filters see only numbers: the caller builds the matrix (TF-IDF or embeddings).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ragbound.stats._validate import FloatArray, as_float_array, as_scores, check_finite


def as_similarity_matrix(values: ArrayLike, name: str = "similarity") -> FloatArray:
    """A finite square matrix, symmetrised as ``(S + Sᵀ) / 2`` so a pair has one similarity.

    Floating-point products such as ``V @ V.T`` are symmetric only up to rounding; averaging
    makes ``S[i, j] == S[j, i]`` exactly, so the order of a pair never changes a decision.
    """
    matrix = as_float_array(values, name)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"{name} must be a square (n, n) matrix, got shape {matrix.shape}")
    check_finite(matrix, name)
    return (matrix + matrix.T) / 2.0


def range_cutoff(scores: ArrayLike, threshold: float) -> float:
    """``min + threshold x (max - min)`` of ``scores``: the keyword filter's cut-off.

    ``threshold`` is a fraction of the range in [0, 1]: 0 keeps every score, 1 keeps only the
    maximum. Equal scores give ``min``, so nothing is cut.

    >>> range_cutoff([0.2, 0.4, 1.2], 0.3)
    0.5
    """
    values = as_scores(scores, "scores")
    fraction = float(threshold)
    if not 0.0 <= fraction <= 1.0:  # also rejects NaN
        raise ValueError(f"threshold must be in [0, 1], got {threshold!r}")
    low, high = float(values.min()), float(values.max())
    return low + fraction * (high - low)


def uniqueness_scores(similarity: ArrayLike) -> FloatArray:
    """Uniqueness of each item: ``1 - max_{j ≠ i} S[i, j]`` (higher = more unique).

    An item with a near-copy in the pool scores about 0; one that shares nothing with any
    other (cosine 0) scores 1. A pool of one item has nothing to be similar to: score 1.

    >>> uniqueness_scores([[1.0, 0.9, 0.0], [0.9, 1.0, 0.5], [0.0, 0.5, 1.0]]).round(3).tolist()
    [0.1, 0.1, 0.5]
    """
    matrix = as_similarity_matrix(similarity)
    n = matrix.shape[0]
    if n < 2:
        return np.ones(n)
    others = matrix.copy()
    np.fill_diagonal(others, -np.inf)
    return 1.0 - others.max(axis=1)


@dataclass(frozen=True)
class GreedySelection:
    """Outcome of :func:`greedy_min_distance`, one entry per item in input order.

    ``kept[i]`` says whether item ``i`` was selected. ``nearest[i]`` is the item, among those
    kept before ``i``, that is most similar to it (-1 for the first item, which has none), and
    ``distance[i]`` is the cosine distance ``1 - S[i, nearest[i]]`` (``inf`` when none).
    """

    kept: NDArray[np.bool_]
    nearest: NDArray[np.int64]
    distance: FloatArray


def greedy_min_distance(similarity: ArrayLike, min_distance: float) -> GreedySelection:
    """Greedy diverse subset: walk the items in input order and keep an item only if its
    distance ``1 - S[i, k]`` to every item ``k`` kept so far is at least ``min_distance``.

    The result satisfies: every two kept items are at least ``min_distance`` apart, and
    every dropped item is closer than ``min_distance`` to some kept item (its ``nearest``).
    Time O(n x kept), memory O(n) beyond the matrix.

    >>> sel = greedy_min_distance([[1.0, 0.9, 0.2], [0.9, 1.0, 0.1], [0.2, 0.1, 1.0]], 0.3)
    >>> sel.kept.tolist(), sel.nearest.tolist()
    ([True, False, True], [-1, 0, 0])
    """
    matrix = as_similarity_matrix(similarity)
    limit = float(min_distance)
    if not np.isfinite(limit):
        raise ValueError(f"min_distance must be finite, got {min_distance!r}")
    n = matrix.shape[0]
    kept = np.zeros(n, dtype=bool)
    nearest = np.full(n, -1, dtype=np.int64)
    best = np.full(n, -np.inf)  # highest similarity of each item to any kept item so far
    distance = np.full(n, np.inf)
    for item in range(n):
        if nearest[item] >= 0:
            distance[item] = 1.0 - best[item]
        if nearest[item] < 0 or distance[item] >= limit:
            kept[item] = True
            later = slice(item + 1, n)  # earlier items keep the nearest they were judged by
            closer = matrix[later, item] > best[later]  # strict: ties keep the earlier item
            best[later][closer] = matrix[later, item][closer]
            nearest[later][closer] = item
    return GreedySelection(kept=kept, nearest=nearest, distance=distance)
