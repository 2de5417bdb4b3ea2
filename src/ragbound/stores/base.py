"""What every store returns from a search."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ragbound.errors import InputError


@dataclass(frozen=True)
class Hits:
    """Top-k results for a batch of queries.

    ``similarities`` (n_queries, k) float32, each row sorted descending (higher = closer);
    ``indices`` (n_queries, k) int64 row numbers into the store.
    """

    similarities: np.ndarray
    indices: np.ndarray


def check_k(k: int, size: int) -> None:
    """k must be a positive int no larger than the number of stored chunks."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}")
    if k > size:
        raise InputError(
            f"k={k} is larger than the knowledge base ({size} chunks); "
            f"use k <= {size} (for example --k {min(size, 32)})"
        )
