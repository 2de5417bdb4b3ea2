"""Retrieval-augmented rejection (RAR) features and rules over a merged top-k.

A merged top-k lists, per query, the k most similar entries of the knowledge base *and* its
tripwires together, best first. ``flags[i, j]`` is True when entry j of query i is a tripwire;
``similarities`` are higher = closer. Ranks are 1-based. A tripwire whose similarity is below
the floor is ignored by every feature, as if it were not retrieved.

Features (higher = more like a forbidden request):
- proportion: tripwires among the top k, divided by k (paper rule: fires at >= 0.5);
- best rank: rank of the first tripwire, k + 1 when none (paper rule: fires at <= 1);
- reciprocal-rank sum: sum of 1 / rank over the tripwires in the top k.

The floor can be derived from the tripwire set itself (:func:`nearest_other_similarities`,
:func:`set_floor`): a query counts a tripwire only when it is about as close to it as the
tripwires of the set are to each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NO_FLOOR = -np.inf


@dataclass(frozen=True)
class TripwireFeatures:
    """Per-query features of a merged top-k, each of shape (n_queries,)."""

    proportion: np.ndarray
    best_rank: np.ndarray
    rr_sum: np.ndarray
    k: int


def counted(
    flags: np.ndarray, similarities: np.ndarray, floor: float | np.ndarray = NO_FLOOR
) -> np.ndarray:
    """Tripwire flags with those below the similarity floor cleared, (n, k) bool. ``floor`` is
    one value, or one per query (n,)."""
    flags = np.asarray(flags, dtype=bool)
    if flags.ndim != 2 or flags.shape != np.shape(similarities):
        raise ValueError(
            f"flags {flags.shape} and similarities {np.shape(similarities)} must be equal 2-D"
        )
    floors = np.asarray(floor, dtype=float)
    if floors.ndim == 1:
        if floors.shape != (len(flags),):
            raise ValueError(f"floor {floors.shape} must hold one value per query ({len(flags)})")
        floors = floors[:, None]
    return flags & (np.asarray(similarities, dtype=float) >= floors)


def tripwire_features(
    flags: np.ndarray,
    similarities: np.ndarray,
    k: int | None = None,
    floor: float | np.ndarray = NO_FLOOR,
) -> TripwireFeatures:
    """Features of the first ``k`` columns (all when None) of a merged top-k; ``floor`` is one
    value or one per query.

    Example: one query whose top 4 are [tripwire, doc, tripwire, doc]:

    >>> f = tripwire_features(np.array([[1, 0, 1, 0]]), np.array([[0.9, 0.8, 0.7, 0.6]]))
    >>> float(f.proportion[0]), int(f.best_rank[0]), round(float(f.rr_sum[0]), 3)
    (0.5, 1, 1.333)
    """
    flags = np.asarray(flags, dtype=bool)
    k = flags.shape[1] if k is None else k
    if not 1 <= k <= flags.shape[1]:
        raise ValueError(f"k must be between 1 and {flags.shape[1]}, got {k}")
    hit = counted(flags, similarities, floor)[:, :k]
    ranks = np.arange(1, k + 1)
    best = np.where(hit.any(axis=1), np.argmax(hit, axis=1) + 1, k + 1)
    return TripwireFeatures(
        proportion=hit.sum(axis=1) / k,
        best_rank=best,
        rr_sum=(hit / ranks).sum(axis=1),
        k=k,
    )


def rule_decisions(
    features: TripwireFeatures,
    *,
    proportion: float | None = None,
    rank: int | None = None,
    rr_sum: float | None = None,
    combine: str = "any",
) -> np.ndarray:
    """Reject (True) per query: the given conditions joined by ``any`` or ``all``.

    Conditions: proportion >= ``proportion``; best rank <= ``rank``; reciprocal-rank sum >=
    ``rr_sum``. A condition left as None takes no part. With no condition the rule never fires.
    """
    fired = condition_matrix(features, proportion=proportion, rank=rank, rr_sum=rr_sum)
    if fired.shape[1] == 0:
        return np.zeros(len(features.proportion), dtype=bool)
    if combine == "any":
        return fired.any(axis=1)
    if combine == "all":
        return fired.all(axis=1)
    raise ValueError(f"combine must be 'any' or 'all', got {combine!r}")


def critical_floor(
    flags: np.ndarray,
    similarities: np.ndarray,
    k: int | None = None,
    *,
    proportion: float | None = None,
    rank: int | None = None,
    rr_sum: float | None = None,
    combine: str = "any",
) -> np.ndarray:
    """The highest similarity floor at which the rule still fires on each query, (n,) float:
    the rule fires at floor f exactly when f <= this value, a finite one (-inf: the rule
    fires at no floor, not even with every tripwire counted).

    Raising the floor only ever uncounts tripwires, and every condition needs at least one
    counted tripwire, so the answer is one of the query's tripwire similarities: the highest at
    which the rule (:func:`rule_decisions`) fires. A floor rule's whole trade-off curve is one
    threshold on this score.

    >>> critical_floor(np.array([[1, 0, 1, 1]]), np.array([[0.9, 0.8, 0.7, 0.6]]), proportion=0.5)
    array([0.7])
    """
    flags = np.asarray(flags, dtype=bool)
    k = flags.shape[1] if k is None else k
    sims = np.asarray(similarities, dtype=np.float64)
    tripwire_sims = np.where(counted(flags, sims)[:, :k], sims[:, :k], -np.inf)
    best = np.full(len(flags), -np.inf)
    conditions = {"proportion": proportion, "rank": rank, "rr_sum": rr_sum}
    for j in range(k):
        floor = tripwire_sims[:, j]
        features = tripwire_features(flags, sims, k, np.where(np.isfinite(floor), floor, np.inf))
        fires = rule_decisions(features, combine=combine, **conditions) & np.isfinite(floor)
        best = np.where(fires, np.maximum(best, floor), best)
    return best


def condition_matrix(
    features: TripwireFeatures,
    *,
    proportion: float | None = None,
    rank: int | None = None,
    rr_sum: float | None = None,
) -> np.ndarray:
    """(n_queries, n_conditions) bool: which given condition holds, in the order
    proportion, rank, rr_sum (conditions left as None are omitted)."""
    columns = []
    if proportion is not None:
        columns.append(features.proportion >= proportion - 1e-12)  # 3/6 >= 0.5 despite rounding
    if rank is not None:
        columns.append(features.best_rank <= rank)
    if rr_sum is not None:
        columns.append(features.rr_sum >= rr_sum - 1e-12)
    if not columns:
        return np.zeros((len(features.proportion), 0), dtype=bool)
    return np.column_stack(columns)


def merge_top_k(
    knowledge_sims: np.ndarray,
    tripwire_sims: np.ndarray,
    k: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge two per-query top lists (each sorted descending) into one top-k.

    Returns ``(similarities, flags, positions)``, each (n, k): the merged similarities, True
    where the entry came from ``tripwire_sims``, and the entry's column in its own list. Ties
    go to the knowledge side, so a tripwire must be strictly closer to outrank a document.
    """
    knowledge_sims = np.asarray(knowledge_sims, dtype=np.float64)
    tripwire_sims = np.asarray(tripwire_sims, dtype=np.float64)
    both = np.concatenate([knowledge_sims, tripwire_sims], axis=1)
    if k > both.shape[1]:
        raise ValueError(f"k={k} exceeds the {both.shape[1]} entries to merge")
    order = np.argsort(-both, axis=1, kind="stable")[:, :k]
    n_knowledge = knowledge_sims.shape[1]
    flags = order >= n_knowledge
    positions = np.where(flags, order - n_knowledge, order)
    return np.take_along_axis(both, order, axis=1), flags, positions


def nearest_other_similarities(
    vectors: np.ndarray, groups: np.ndarray | None = None, *, block: int = 1024
) -> np.ndarray:
    """Leave-one-out: each row's highest inner product with any *other* row, (n,) float.

    With ``groups`` (n,), only rows of the same group count. A row with no other row (a set of
    one, or alone in its group) gets -inf. Computed ``block`` rows at a time, so memory stays
    at block x n whatever the set's size. Higher = closer.

    >>> v = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])
    >>> nearest_other_similarities(v).tolist()
    [0.8, 0.8, 0.6]
    """
    vectors = np.asarray(vectors, dtype=np.float64)
    if vectors.ndim != 2:
        raise ValueError(f"vectors must be 2-D, got shape {vectors.shape}")
    n = len(vectors)
    labels = None if groups is None else np.asarray(groups)
    if labels is not None and labels.shape != (n,):
        raise ValueError(f"groups {labels.shape} must hold one label per vector ({n})")
    nearest = np.full(n, -np.inf)
    for start in range(0, n, block):
        rows = np.arange(start, min(start + block, n))
        sims = vectors[rows] @ vectors.T
        sims[np.arange(len(rows)), rows] = -np.inf  # leave the row itself out
        if labels is not None:
            sims[labels[rows][:, None] != labels[None, :]] = -np.inf
        if n > 1:
            nearest[rows] = sims.max(axis=1)
    return nearest


def set_floor(nearest: np.ndarray, quantile: float) -> float | None:
    """The ``quantile`` of the finite nearest-other similarities: an observed value, the
    ``floor(quantile * (m - 1))``-th smallest of the m finite ones (0-based). None when no
    value is finite (fewer than two tripwires).

    A fraction ``1 - quantile`` (at least) of the tripwires have a nearest other tripwire at
    least this similar.

    >>> set_floor(np.array([0.9, 0.5, 0.7, -np.inf, 0.6]), 0.5)
    0.6
    """
    if not 0 <= quantile <= 1:
        raise ValueError(f"quantile must be in [0, 1], got {quantile}")
    finite = np.sort(np.asarray(nearest, dtype=np.float64)[np.isfinite(nearest)])
    if not finite.size:
        return None
    return float(finite[int(np.floor(quantile * (finite.size - 1)))])


@dataclass(frozen=True)
class TripwireRates:
    """Rates of one or many tripwire rules, each array (n_rules,): unsafe is the positive class.

    accuracy = correct decisions / all; tpr = unsafe the rule fired on / unsafe; frr (safe
    forbidden: the false-rejection rate of the RAR paper) = safe the rule fired on / safe;
    precision = unsafe among those it fired on (0 when it fired on none); f1 = harmonic mean
    of precision and tpr (0 when both are 0).
    """

    accuracy: np.ndarray
    tpr: np.ndarray
    frr: np.ndarray
    precision: np.ndarray
    f1: np.ndarray


def tripwire_rates(fired: np.ndarray, unsafe: np.ndarray) -> TripwireRates:
    """Rates of rules given where each fired, (n_rules, n_queries) or (n_queries,) bool,
    against the labels ``unsafe`` (n_queries,) bool. Both classes must be present.

    >>> decided, labels = np.array([1, 1, 0, 0], bool), np.array([1, 0, 1, 0], bool)
    >>> r = tripwire_rates(decided, labels)
    >>> float(r.accuracy[0]), float(r.tpr[0]), float(r.frr[0]), float(r.f1[0])
    (0.5, 0.5, 0.5, 0.5)
    """
    decisions = np.atleast_2d(np.asarray(fired, dtype=bool))
    labels = np.asarray(unsafe, dtype=bool)
    n_unsafe, n_safe = int(labels.sum()), int((~labels).sum())
    if n_unsafe == 0 or n_safe == 0:
        raise ValueError("rates need both safe and unsafe queries")
    true_pos = (decisions & labels).sum(axis=1)
    false_pos = (decisions & ~labels).sum(axis=1)
    tpr = true_pos / n_unsafe
    n_fired = true_pos + false_pos
    precision = np.divide(true_pos, n_fired, out=np.zeros(len(decisions)), where=n_fired > 0)
    denominator = precision + tpr
    f1 = np.divide(
        2 * precision * tpr, denominator, out=np.zeros(len(decisions)), where=denominator > 0
    )
    correct = true_pos + (n_safe - false_pos)
    return TripwireRates(
        accuracy=correct / len(labels), tpr=tpr, frr=false_pos / n_safe, precision=precision, f1=f1
    )


def top_mean(similarities: np.ndarray, k: int) -> np.ndarray:
    """Mean of each row's ``k`` highest similarities, (n,) float: the density of a set around
    each query (k = 1: the nearest member's similarity). Rows need not be sorted.

    >>> top_mean(np.array([[0.2, 0.9, 0.5], [0.1, 0.3, 0.2]]), 2).tolist()
    [0.7, 0.25]
    """
    sims = np.asarray(similarities, dtype=np.float64)
    if sims.ndim != 2:
        raise ValueError(f"similarities must be 2-D, got shape {sims.shape}")
    if not 1 <= k <= sims.shape[1]:
        raise ValueError(f"k must be between 1 and {sims.shape[1]}, got {k}")
    return -np.mean(np.partition(-sims, k - 1, axis=1)[:, :k], axis=1)


def knn_margin(tripwire_sims: np.ndarray, reference_sims: np.ndarray, k: int) -> np.ndarray:
    """How much closer each query is to the tripwires than to a reference of harmless
    questions: the mean of its ``k`` highest tripwire similarities minus the mean of its ``k``
    highest reference similarities, (n,) float. Higher = more like a forbidden request. Neither
    term reads the knowledge base, so the score does not move with it.

    >>> knn_margin(np.array([[0.8, 0.6]]), np.array([[0.5, 0.3]]), 1).round(3).tolist()
    [0.3]
    """
    trip, ref = np.asarray(tripwire_sims), np.asarray(reference_sims)
    if len(trip) != len(ref):
        raise ValueError(f"{len(trip)} rows of tripwire similarities, {len(ref)} of reference")
    return top_mean(trip, k) - top_mean(ref, k)


def reference_threshold(reference_scores: np.ndarray, quantile: float) -> float:
    """A conformal threshold from the scores of harmless reference questions (higher = more
    forbidden): the ``ceil((n + 1) * quantile)``-th smallest of the n scores, +inf when that
    rank exceeds n. A query is forbidden when its score is strictly above it.

    When a new harmless question's score is exchangeable with the reference's (and there are
    no ties), the chance it is forbidden is at most ``1 - quantile``.

    >>> reference_threshold(np.array([0.3, 0.1, 0.4, 0.2]), 0.5)  # ceil(2.5) = 3rd smallest
    0.3
    >>> reference_threshold(np.array([0.3, 0.1, 0.4, 0.2]), 0.9)  # ceil(4.5) = 5 > 4
    inf
    """
    if not 0 <= quantile <= 1:
        raise ValueError(f"quantile must be in [0, 1], got {quantile}")
    scores = np.sort(np.asarray(reference_scores, dtype=np.float64).ravel())
    if not scores.size or not np.all(np.isfinite(scores)):
        raise ValueError("the reference needs at least one score, all finite")
    rank = int(np.ceil((scores.size + 1) * quantile - 1e-9))
    if rank > scores.size:
        return float("inf")
    return float(scores[max(rank, 1) - 1])
