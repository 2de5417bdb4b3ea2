"""Input checks shared by the stats modules; every failure is a ``ValueError`` with a message."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]


def as_float_array(values: ArrayLike, name: str) -> FloatArray:
    """Convert ``values`` to a float64 array, or raise ``ValueError`` naming ``name``."""
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric, got {type(values).__name__}: {exc}") from exc


def _first_bad(mask: NDArray[np.bool_]) -> str:
    """Describe the first True position of ``mask`` as 'index (i, j)'."""
    index = tuple(int(i) for i in np.argwhere(mask)[0])
    return f"index {index[0]}" if len(index) == 1 else f"index {index}"


def check_finite(array: FloatArray, name: str) -> None:
    """Raise if ``array`` holds NaN or an infinity."""
    bad = ~np.isfinite(array)
    if bad.any():
        kind = "NaN" if np.isnan(array).any() else "infinite values"
        raise ValueError(f"{name} contains {kind} (first at {_first_bad(bad)})")


def as_matrix(values: ArrayLike, name: str) -> FloatArray:
    """A finite 2-D float64 array of shape (n_queries, k) with k >= 1."""
    array = as_float_array(values, name)
    if array.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_queries, k), got shape {array.shape}")
    if array.shape[1] < 1:
        raise ValueError(f"{name} needs k >= 1 columns (neighbours), got shape {array.shape}")
    check_finite(array, name)
    return array


def as_sims(values: ArrayLike, name: str = "sims") -> FloatArray:
    """Similarity matrix (n_queries, k): finite, each row sorted descending (nearest first)."""
    sims = as_matrix(values, name)
    rising = np.diff(sims, axis=1) > 0
    if rising.any():
        row = int(np.argwhere(rising)[0][0])
        raise ValueError(
            f"{name} rows must be sorted descending (column 0 = nearest neighbour, higher = "
            f"closer); row {row} is not. A store that returns distances must convert them to "
            "similarities first."
        )
    return sims


def as_pvals(values: ArrayLike, name: str = "pvals") -> FloatArray:
    """P-value matrix (n_queries, k) with every entry in (0, 1]."""
    pvals = as_matrix(values, name)
    bad = (pvals <= 0) | (pvals > 1)
    if bad.any():
        raise ValueError(f"{name} must lie in (0, 1], got {pvals[bad][0]!r} at {_first_bad(bad)}")
    return pvals


def as_scores(values: ArrayLike, name: str) -> FloatArray:
    """A finite 1-D float64 array with at least one entry."""
    array = as_float_array(values, name)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} needs at least 1 value(s), got 0")
    check_finite(array, name)
    return array


def check_open_unit(value: float, name: str) -> float:
    """Return ``value`` as float if it lies strictly inside (0, 1), else raise."""
    number = float(value)
    if not 0.0 < number < 1.0:  # also rejects NaN
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return number


def check_positive(value: float, name: str) -> float:
    """Return ``value`` as float if it is finite and > 0, else raise."""
    number = float(value)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return number


def check_choice(value: str, choices: tuple[str, ...], name: str) -> str:
    """Return ``value`` if it is one of ``choices``, else raise listing them."""
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(choices)}")
    return value
