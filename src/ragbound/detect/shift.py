"""Offline query-distribution shift (paper 1, section 3.3): do these queries still match?

The reference is the calibration's in-knowledge queries; the test batch is new queries. The
KS test compares the distributions of one test statistic (higher = more out-of-knowledge);
the MMD test compares the query embeddings themselves. A small p-value means the batch has
drifted away from what the corpus covers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

from ragbound.detect.config import DEFAULTS, Alpha, NonNegativeInt, PositiveInt, check_option
from ragbound.detect.guard import Guard
from ragbound.errors import InputError
from ragbound.results import ShiftReport
from ragbound.stats import ks_two_sample, mmd_permutation_test

if TYPE_CHECKING:
    from ragbound.engines import Search

ShiftTest = Literal["ks", "mmd"]
SHIFT_TESTS: tuple[str, ...] = ("ks", "mmd")
# Below this many reference queries the KS p-value is too coarse to mean anything.
MIN_REFERENCE = 20


def reference_scores(guard: Guard, statistic: str | None = None) -> np.ndarray:
    """The KS reference sample: the detector's own null scores of the calibration queries.

    For Fisher and Simes these are the leave-one-out scores the p-values use, not each
    calibration row scored against a null that contains itself.
    """
    scores = guard.null_scores(statistic)
    _check_reference(scores.size)
    return scores


def _check_reference(n: int) -> None:
    if n < MIN_REFERENCE:
        raise InputError(
            f"the calibration holds {n} queries; a shift test needs at least "
            f"{MIN_REFERENCE} (calibrate on more in-knowledge queries)"
        )


def shift_test(
    guard: Guard,
    queries: Sequence[str],
    *,
    test: ShiftTest = "ks",
    statistic: str | None = None,
    alpha: float = DEFAULTS.alpha,
    n_permutations: int = 1000,
    seed: int = 0,
    progress: bool = False,
    search: Search | None = None,
) -> ShiftReport:
    """Test whether ``queries`` come from the calibration queries' distribution.

    ``search`` gives the KS test's top-k similarities (default: the guard's own, in this
    process; see :mod:`ragbound.engines` for Ray).

    Example:
        >>> report = shift_test(guard, todays_queries)  # doctest: +SKIP
        >>> report.shifted, round(report.p_value, 4)  # doctest: +SKIP
        (True, 0.0001)
    """
    _check_shift_options(queries, test, alpha, n_permutations, seed)
    if test == "mmd":
        return _mmd(guard, queries, alpha, n_permutations, seed, progress)
    reference = reference_scores(guard, statistic)
    scored = guard.score_with_search(queries, search, statistic=statistic, progress=progress)
    result = ks_two_sample(reference, scored.scores, alpha=alpha)
    return ShiftReport(
        test="ks",
        score_statistic=scored.statistic,
        statistic=result.statistic,
        p_value=result.p_value,
        alpha=alpha,
        shifted=result.shifted,
        # inf: batch too small for any KS distance to reach alpha (shifted is then False)
        critical_value=result.critical_value if math.isfinite(result.critical_value) else None,
        n_reference=result.n_reference,
        n_test=result.n_test,
        method=result.method_used,
        kb_fingerprint=guard.kb.fingerprint,
    )


def _check_shift_options(
    queries: Sequence[str], test: str, alpha: float, n_permutations: int, seed: int
) -> None:
    """Refuse bad options with an InputError naming the option (before any retrieval)."""
    if isinstance(queries, str):
        raise InputError("queries must be a sequence of query strings, not one string")
    if not queries:
        raise InputError("the batch to test is empty")
    if test not in SHIFT_TESTS:
        raise InputError(f"unknown shift test {test!r}; expected one of {list(SHIFT_TESTS)}")
    check_option(Alpha, alpha, "alpha")
    check_option(PositiveInt, n_permutations, "n_permutations")
    check_option(NonNegativeInt, seed, "seed")


def _mmd(
    guard: Guard,
    queries: Sequence[str],
    alpha: float,
    n_permutations: int,
    seed: int,
    progress: bool,
) -> ShiftReport:
    reference_queries = guard.calibration.queries
    _check_reference(len(reference_queries))
    if len(queries) < 2:
        raise InputError("the MMD test needs at least 2 queries in the batch")
    reference = guard.kb.embed(reference_queries, progress=progress)
    batch = guard.kb.embed(list(queries), progress=progress)
    result = mmd_permutation_test(reference, batch, n_permutations=n_permutations, seed=seed)
    return ShiftReport(
        test="mmd",
        score_statistic=None,
        statistic=result.statistic,
        p_value=result.p_value,
        alpha=alpha,
        shifted=bool(result.p_value <= alpha),
        n_reference=result.n_x,
        n_test=result.n_y,
        method="permutation",
        kb_fingerprint=guard.kb.fingerprint,
    )
