"""Agreement between raters on categorical labels: accuracy, confusion matrix, Cohen's and
Fleiss' kappa.

Labels are any hashable values (``"yes"``, ``"tier_1"``). ``categories`` fixes the order of
rows and columns; every label must be one of them. Kappa is chance-corrected agreement,
``(observed - expected) / (1 - expected)``: 1 is perfect agreement, 0 is what chance gives,
negative is worse than chance. When chance alone gives perfect agreement (every rater used one
and the same category) the ratio is 0/0; we return 1.0 there, since the raters agree on every
item, where scikit-learn returns NaN.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ragbound.stats._validate import FloatArray, as_float_array, check_finite


def _index(categories: Sequence[Hashable]) -> dict[Hashable, int]:
    index = {category: i for i, category in enumerate(categories)}
    if len(index) != len(categories):
        raise ValueError(f"categories must be distinct, got {list(categories)}")
    if not index:
        raise ValueError("categories must not be empty")
    return index


def _paired(a: Sequence[Hashable], b: Sequence[Hashable], names: tuple[str, str]) -> None:
    if len(a) != len(b):
        raise ValueError(f"{names[0]} and {names[1]} differ in length: {len(a)} vs {len(b)}")
    if not a:
        raise ValueError(f"{names[0]} and {names[1]} are empty: nothing to compare")


def _categories(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[Hashable]:
    """Every label seen, sorted when the labels can be compared."""
    seen = list(dict.fromkeys([*a, *b]))
    try:
        return sorted(seen)  # type: ignore[type-var]
    except TypeError:
        return seen


def confusion_matrix(
    truth: Sequence[Hashable],
    predicted: Sequence[Hashable],
    categories: Sequence[Hashable] | None = None,
) -> np.ndarray:
    """Counts (n_categories, n_categories): row = ``truth`` label, column = ``predicted`` label.

    ``categories`` defaults to every label seen, sorted.
    """
    _paired(truth, predicted, ("truth", "predicted"))
    order = list(categories) if categories is not None else _categories(truth, predicted)
    index = _index(order)
    unknown = [label for label in (*truth, *predicted) if label not in index]
    if unknown:
        raise ValueError(f"label {unknown[0]!r} is not one of the categories {order}")
    matrix = np.zeros((len(order), len(order)), dtype=np.int64)
    for row, column in zip(truth, predicted, strict=True):
        matrix[index[row], index[column]] += 1
    return matrix


def accuracy(truth: Sequence[Hashable], predicted: Sequence[Hashable]) -> float:
    """Share of items where ``predicted`` equals ``truth`` (a fraction in [0, 1])."""
    _paired(truth, predicted, ("truth", "predicted"))
    return sum(t == p for t, p in zip(truth, predicted, strict=True)) / len(truth)


def _kappa(observed: float, expected: float) -> float:
    if np.isclose(expected, 1.0):
        return 1.0  # one category used by everyone: full agreement (0/0 otherwise)
    return float((observed - expected) / (1.0 - expected))


def cohen_kappa(
    a: Sequence[Hashable],
    b: Sequence[Hashable],
    categories: Sequence[Hashable] | None = None,
) -> float:
    """Cohen's kappa of two raters who labelled the same items (``a[i]``, ``b[i]`` for item i).

    Expected agreement uses each rater's own marginal shares. Symmetric in ``a`` and ``b``;
    in [-1, 1].
    """
    matrix = confusion_matrix(a, b, categories).astype(np.float64)
    total = matrix.sum()
    observed = np.trace(matrix) / total
    expected = float(matrix.sum(axis=1) @ matrix.sum(axis=0)) / total**2
    return _kappa(observed, expected)


def rating_counts(
    ratings: Sequence[Sequence[Hashable]], categories: Sequence[Hashable]
) -> np.ndarray:
    """The Fleiss table: ``counts[i, j]`` = raters who put item i in category j.

    ``ratings[i]`` holds item i's labels, one per rater.
    """
    index = _index(categories)
    counts = np.zeros((len(ratings), len(categories)), dtype=np.int64)
    for item, labels in enumerate(ratings):
        for label in labels:
            if label not in index:
                raise ValueError(f"item {item}: label {label!r} is not one of {list(categories)}")
            counts[item, index[label]] += 1
    return counts


def fleiss_kappa(counts: np.ndarray | Sequence[Sequence[float]]) -> float:
    """Fleiss' kappa from a table (n_items, n_categories) of rater counts (Fleiss 1971).

    Every row must sum to the same number of raters n >= 2. Agreement on item i is
    ``(sum_j n_ij^2 - n) / (n (n - 1))``; expected agreement is ``sum_j p_j^2`` with ``p_j``
    the share of all ratings in category j.
    """
    table: FloatArray = as_float_array(counts, "counts")
    if table.ndim != 2 or table.shape[0] < 1 or table.shape[1] < 1:
        raise ValueError(f"counts must be a non-empty 2-D table, got shape {table.shape}")
    check_finite(table, "counts")
    if (table < 0).any() or not np.array_equal(table, np.round(table)):
        raise ValueError("counts must be non-negative whole numbers")
    raters = table.sum(axis=1)
    if not np.all(raters == raters[0]) or raters[0] < 2:
        raise ValueError(f"every item needs the same number (>= 2) of raters, got {raters}")
    n = raters[0]
    per_item = (np.square(table).sum(axis=1) - n) / (n * (n - 1))
    shares = table.sum(axis=0) / table.sum()
    return _kappa(float(per_item.mean()), float(np.square(shares).sum()))
