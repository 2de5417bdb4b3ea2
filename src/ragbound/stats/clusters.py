"""k-means clustering of vectors (Lloyd's iterations from k-means++ seeds).

Pure numeric code: rows of a float matrix in, a cluster label per row and the cluster centres
out. Seeded, so the same input and seed give the same clusters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ragbound.stats._validate import FloatArray, as_matrix

MAX_ITERATIONS = 300


@dataclass(frozen=True, eq=False)  # arrays: compare their fields
class Clusters:
    """``labels[i]`` is row i's cluster (0 .. k - 1), ``centres[c]`` the mean of cluster c's
    rows; ``inertia`` the sum of squared distances of the rows to their centres."""

    labels: NDArray[np.int64]
    centres: FloatArray
    inertia: float


def kmeans(points: ArrayLike, k: int, seed: int = 0, restarts: int = 10) -> Clusters:
    """The best (least inertia) of ``restarts`` k-means runs on the rows of ``points``.

    Each run seeds its centres by k-means++ (Arthur and Vassilvitskii 2007: each next centre
    a row drawn with probability proportional to its squared distance to the nearest centre
    so far), then alternates assigning rows to their nearest centre and moving each centre
    to its rows' mean until no row changes cluster. A cluster left empty restarts at the row
    farthest from its centre. Ties go to the lower cluster number.

    >>> found = kmeans([[0.0], [0.1], [5.0], [5.2]], 2)
    >>> sorted(found.centres[:, 0].round(2).tolist()), bool(found.labels[0] == found.labels[1])
    ([0.05, 5.1], True)
    """
    rows = as_matrix(points, "points")
    if not 1 <= k <= rows.shape[0]:
        raise ValueError(f"k must be between 1 and the number of rows ({rows.shape[0]}), got {k}")
    if restarts < 1:
        raise ValueError(f"restarts must be >= 1, got {restarts}")
    rng = np.random.default_rng(seed)
    runs = [_lloyd(rows, _plus_plus_seeds(rows, k, rng)) for _ in range(restarts)]
    return min(runs, key=lambda run: run.inertia)


def _squared_distances(rows: FloatArray, centres: FloatArray) -> FloatArray:
    """(n, k) squared Euclidean distances, never negative."""
    cross = rows @ centres.T
    squared = (rows**2).sum(axis=1)[:, None] - 2.0 * cross + (centres**2).sum(axis=1)[None, :]
    return np.maximum(squared, 0.0)


def _plus_plus_seeds(rows: FloatArray, k: int, rng: np.random.Generator) -> FloatArray:
    chosen = [int(rng.integers(rows.shape[0]))]
    nearest = _squared_distances(rows, rows[chosen])[:, 0]
    for _ in range(1, k):
        total = nearest.sum()
        if total > 0:
            pick = int(rng.choice(rows.shape[0], p=nearest / total))
        else:  # every row already sits on a centre (fewer distinct rows than k)
            pick = int(rng.integers(rows.shape[0]))
        chosen.append(pick)
        nearest = np.minimum(nearest, _squared_distances(rows, rows[[pick]])[:, 0])
    return rows[chosen].copy()


def _lloyd(rows: FloatArray, centres: FloatArray) -> Clusters:
    k = centres.shape[0]
    labels = np.full(rows.shape[0], -1, dtype=np.int64)
    for _ in range(MAX_ITERATIONS):
        distances = _squared_distances(rows, centres)
        new_labels = distances.argmin(axis=1)
        if np.array_equal(new_labels, labels):
            break
        labels = new_labels
        gaps = distances[np.arange(rows.shape[0]), labels]
        for cluster in range(k):
            members = labels == cluster
            if members.any():
                centres[cluster] = rows[members].mean(axis=0)
            else:
                far = int(gaps.argmax())
                centres[cluster], gaps[far] = rows[far], 0.0
    distances = _squared_distances(rows, centres)
    return Clusters(
        labels=labels,
        centres=centres,
        inertia=float(distances[np.arange(rows.shape[0]), labels].sum()),
    )
