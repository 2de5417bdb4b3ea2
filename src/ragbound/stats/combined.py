"""A learned score over several retrieval features, and the numbers it is learned from.

Pure numeric: the features are summaries of similarity rows (rows sorted descending, higher =
closer) and of word-overlap shares; the score is a standardized linear model, higher = more
out-of-knowledge. Learning it and making its p-value valid (a conformal null on queries the
learning did not see) is :mod:`ragbound.detect.combined`'s business.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from ragbound.stats._validate import FloatArray, as_sims
from ragbound.stats.statistics import energy, entropy

# neighbours averaged by the mean features (besides the whole row, whose width the caller
# picks: 32 unless the knowledge base is small)
FEATURE_KS: tuple[int, ...] = (4,)
# energy temperature in cosine units: a contrastive embedder's (MiniLM's is 0.05)
FEATURE_TAU = 0.05


def similarity_features(prefix: str, sims: ArrayLike) -> dict[str, FloatArray]:
    """Named features of similarity rows (n, k), each higher = closer.

    ``top1``: nearest similarity; ``meanK``: mean of the K nearest, for K in
    :data:`FEATURE_KS` below k and K = k; ``entropy``: minus the softmax entropy of the row
    (a peaked row is closer); ``energy``: minus the free energy at :data:`FEATURE_TAU`.
    Names are ``prefix.name``.

    >>> f = similarity_features("chunk", [[0.9, 0.5, 0.5, 0.5, 0.0]])
    >>> sorted(f)[:3], float(f["chunk.mean4"][0]), float(f["chunk.mean5"][0])
    (['chunk.energy', 'chunk.entropy', 'chunk.mean4'], 0.6, 0.48)
    """
    rows = as_sims(sims)
    width = rows.shape[1]
    out = {f"{prefix}.top1": rows[:, 0].copy()}
    for k in (*(k for k in FEATURE_KS if k < width), width):
        out[f"{prefix}.mean{k}"] = rows[:, :k].mean(axis=1)
    out[f"{prefix}.entropy"] = -entropy(rows)
    out[f"{prefix}.energy"] = -energy(rows, tau=FEATURE_TAU)
    return out


def bm25_idf(document_frequency: ArrayLike, n_documents: int) -> FloatArray:
    """BM25's inverse document frequency ``log(1 + (n - df + 0.5) / (df + 0.5))``, > 0.

    A word in no document weighs most, one in every document least.

    >>> [round(float(w), 4) for w in bm25_idf([0, 1, 4], 4)]
    [2.3026, 1.204, 0.1054]
    """
    df = np.asarray(document_frequency, dtype=np.float64)
    if n_documents < 1 or np.any(df < 0) or np.any(df > n_documents):
        raise ValueError("document frequencies must lie in [0, n_documents], n_documents >= 1")
    return np.log1p((n_documents - df + 0.5) / (df + 0.5))


def weighted_overlap(
    query_ids: ArrayLike,
    query_weights: ArrayLike,
    total: float,
    word_ids: ArrayLike,
    groups: ArrayLike,
    n_groups: int,
) -> float:
    """The largest share of ``total`` held by the query words found in one group of words
    (the maximum of :func:`group_overlaps`; 0.0 when there is no group or no weight).

    >>> weighted_overlap([3, 7], [2.0, 1.0], 4.0, [7, 3, 9], [0, 1, 1], 2)
    0.5
    """
    shares = group_overlaps(query_ids, query_weights, total, word_ids, groups, n_groups)
    return float(shares.max()) if shares.size else 0.0


def group_overlaps(
    query_ids: ArrayLike,
    query_weights: ArrayLike,
    total: float,
    word_ids: ArrayLike,
    groups: ArrayLike,
    n_groups: int,
) -> FloatArray:
    """Each group's share of ``total`` held by the query words found in it.

    ``query_ids`` (sorted, unique) are the query's word ids and ``query_weights`` their
    weights (> 0); ``total`` is the weight of all the query's words (those without an id
    too). ``word_ids`` are the words of ``n_groups`` groups (candidate chunks, sentences)
    concatenated, each group's unique, and ``groups`` the group (0 to n_groups - 1) of each.
    All zeros when there is no weight; empty when there is no group.

    >>> group_overlaps([3, 7], [2.0, 1.0], 4.0, [7, 3, 9], [0, 1, 1], 2).tolist()
    [0.25, 0.5]
    """
    ids = np.asarray(query_ids, dtype=np.int64)
    words = np.asarray(word_ids, dtype=np.int64)
    if n_groups <= 0:
        return np.zeros(0)
    if total <= 0 or ids.size == 0 or words.size == 0:
        return np.zeros(n_groups)
    found = np.isin(words, ids)
    weights = np.asarray(query_weights, dtype=np.float64)[np.searchsorted(ids, words[found])]
    held = np.bincount(np.asarray(groups)[found], weights=weights, minlength=n_groups)
    return held / total


def document_gap(sims: ArrayLike, documents: ArrayLike) -> FloatArray:
    """Per row, the nearest similarity minus the nearest of another document: how far the
    best document stands out (higher = one document answers; near 0 = several tie).

    ``sims`` (n, k) rows sorted descending; ``documents`` (n, k) integer document codes of
    the same entries. A row whose entries all share one document uses its last similarity
    as the other document's (it stands out at least that far).

    >>> document_gap([[0.9, 0.8, 0.5], [0.7, 0.6, 0.6]], [[1, 1, 2], [3, 4, 3]]).round(2).tolist()
    [0.4, 0.1]
    >>> document_gap([[0.9, 0.8]], [[5, 5]]).round(2).tolist()
    [0.1]
    """
    rows = as_sims(sims)
    codes = np.asarray(documents)
    if codes.shape != rows.shape:
        raise ValueError(f"documents must be shaped like sims {rows.shape}, got {codes.shape}")
    other = codes != codes[:, :1]
    nearest_other = np.where(other, rows, -np.inf).max(axis=1)
    nearest_other = np.where(other.any(axis=1), nearest_other, rows[:, -1])
    return rows[:, 0] - nearest_other


def stack_features(features: dict[str, FloatArray], names: tuple[str, ...]) -> FloatArray:
    """The (n, len(names)) matrix of the named features, columns in ``names`` order."""
    missing = [name for name in names if name not in features]
    if missing:
        raise ValueError(f"features missing: {', '.join(missing)}")
    return np.column_stack([np.asarray(features[name], dtype=np.float64) for name in names])


@dataclass(frozen=True)
class LinearScore:
    """``intercept + coef . (x - mean) / scale``: higher = more out-of-knowledge.

    Plain numbers only, so that it can be stored as JSON; ``scale`` entries are > 0.

    >>> LinearScore(("a",), (1.0,), (2.0,), (3.0,), 0.5).score([[5.0]]).tolist()
    [6.5]
    """

    names: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float

    def __post_init__(self) -> None:
        sizes = {len(self.names), len(self.mean), len(self.scale), len(self.coef)}
        if len(sizes) != 1:
            raise ValueError("names, mean, scale and coef must have one entry per feature")
        if not all(s > 0 for s in self.scale):
            raise ValueError("every scale must be > 0")

    def score(self, features: ArrayLike) -> FloatArray:
        """Scores of feature rows (n, len(names)): higher = more out-of-knowledge."""
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != len(self.names):
            raise ValueError(f"features must be (n, {len(self.names)}), got {x.shape}")
        z = (x - np.asarray(self.mean)) / np.asarray(self.scale)
        return z @ np.asarray(self.coef) + self.intercept

    @classmethod
    def fit(
        cls, names: tuple[str, ...], inside: ArrayLike, outside: ArrayLike, *, c: float = 1.0
    ) -> LinearScore:
        """Logistic regression of outside (1) against inside (0) standardized feature rows,
        with every weight <= 0.

        Every feature is oriented higher = closer, so the bound makes the score monotone: a
        query at least as far on every feature never scores as more in-knowledge (a far
        question cannot look closer than a near one). ``c`` is the inverse L2 penalty, as in
        scikit-learn. A constant feature gets scale 1 (and weight 0).
        """
        x_in, x_out = np.asarray(inside, np.float64), np.asarray(outside, np.float64)
        if len(x_in) < 2 or len(x_out) < 2:
            raise ValueError("learning needs at least 2 rows on each side")
        x = np.concatenate([x_in, x_out])
        y = np.concatenate([np.zeros(len(x_in)), np.ones(len(x_out))])
        mean = x.mean(axis=0)
        scale = x.std(axis=0)
        scale[scale <= 1e-12] = 1.0
        coef, intercept = _monotone_logistic((x - mean) / scale, y, c)
        return cls(
            names=tuple(names),
            mean=tuple(mean.tolist()),
            scale=tuple(scale.tolist()),
            coef=tuple(coef.tolist()),
            intercept=intercept,
        )


def _monotone_logistic(z: FloatArray, y: FloatArray, c: float) -> tuple[FloatArray, float]:
    """L2-penalised logistic regression with weights <= 0, intercept free.

    Minimises ``sum log(1 + exp(-s_i t_i)) + ||w||^2 / (2 c)`` with ``t = z w + b`` and
    ``s = 2 y - 1``; returns (w, b). The problem is convex with box bounds, so it is solved to
    its optimum by projected Newton steps (Bertsekas 1982): weights held at 0 whose gradient
    would push them up stay there, the others take a Newton step, halved until the projected
    point lowers the loss enough; it stops when the gradient left is rounding noise (or no
    step lowers the loss).
    """
    problem = _LogisticProblem.of(z, y, c)
    params = np.zeros(z.shape[1] + 1)
    value = problem.loss(params)
    for _ in range(_NEWTON_STEPS):
        gradient, curvature = problem.derivatives(params)
        free = ~problem.held(params, gradient)
        if np.abs(gradient[free]).max() <= _GRADIENT_TOL * len(z):
            break
        step = np.zeros_like(params)
        step[free] = -np.linalg.lstsq(curvature[np.ix_(free, free)], gradient[free])[0]
        found = _line_search(problem, params, step, value, gradient)
        if found is None:
            break
        params, value = found
    return np.minimum(params[:-1], 0.0), float(params[-1])


_NEWTON_STEPS = 100
_GRADIENT_TOL = 1e-12  # per row: the loss and its gradient are sums over rows


@dataclass(frozen=True)
class _LogisticProblem:
    """The loss of :func:`_monotone_logistic`: feature rows with a last column of ones (the
    intercept), labels as signs +-1, and each parameter's L2 penalty (0 for the intercept)."""

    rows: FloatArray
    signs: FloatArray
    penalty: FloatArray

    @classmethod
    def of(cls, z: FloatArray, y: FloatArray, c: float) -> _LogisticProblem:
        """The problem for standardized rows ``z``, 0/1 labels ``y`` and inverse penalty c."""
        return cls(
            rows=np.column_stack([z, np.ones(len(z))]),
            signs=2.0 * y - 1.0,
            penalty=np.append(np.full(z.shape[1], 1.0 / c), 0.0),
        )

    def loss(self, params: FloatArray) -> float:
        margin = -self.signs * (self.rows @ params)
        return float(np.logaddexp(0.0, margin).sum() + 0.5 * (self.penalty * params) @ params)

    def derivatives(self, params: FloatArray) -> tuple[FloatArray, FloatArray]:
        """The loss's gradient and Hessian at ``params``."""
        margin = -self.signs * (self.rows @ params)
        pulled = np.exp(-np.logaddexp(0.0, -margin))  # logistic(margin), without overflow
        gradient = self.rows.T @ (-self.signs * pulled) + self.penalty * params
        weights = pulled * (1.0 - pulled)
        curvature = (self.rows * weights[:, None]).T @ self.rows + np.diag(self.penalty)
        return gradient, curvature

    def project(self, params: FloatArray) -> FloatArray:
        """``params`` with every weight above 0 set to 0 (the intercept is free)."""
        return np.append(np.minimum(params[:-1], 0.0), params[-1])

    def held(self, params: FloatArray, gradient: FloatArray) -> np.ndarray:
        """Weights at (or within a hair of) their bound 0 that the gradient pushes upward."""
        return np.append((params[:-1] >= -1e-12) & (gradient[:-1] < 0), False)


def _line_search(
    problem: _LogisticProblem,
    params: FloatArray,
    step: FloatArray,
    value: float,
    gradient: FloatArray,
) -> tuple[FloatArray, float] | None:
    """The first of step, step / 2, ... whose projection onto the bounds lowers the loss, by
    at least 1e-4 of the decrease the gradient promises, with that loss (None: none does)."""
    size = 1.0
    for _ in range(60):
        moved = problem.project(params + size * step)
        lower = problem.loss(moved)
        if lower < value and lower <= value + 1e-4 * (gradient @ (moved - params)):
            return moved, lower
        size /= 2
    return None


def cross_fitted_scores(
    names: tuple[str, ...],
    inside: ArrayLike,
    outside: ArrayLike,
    inside_query: ArrayLike,
    outside_query: ArrayLike,
    *,
    folds: int = 2,
    seed: int = 0,
) -> tuple[FloatArray, FloatArray]:
    """Out-of-fold scores of a :class:`LinearScore` for inside and outside feature rows.

    ``inside_query[i]`` / ``outside_query[j]`` name the query a row was made from; queries
    are dealt into ``folds`` seeded folds, and each row is scored by a model learned on the
    other folds, so no row is scored by a model that saw its query (in either role).
    """
    x_in, x_out = np.asarray(inside, np.float64), np.asarray(outside, np.float64)
    q_in, q_out = np.asarray(inside_query), np.asarray(outside_query)
    queries = np.unique(np.concatenate([q_in, q_out]))
    dealt = np.random.default_rng(seed).permutation(len(queries)) % folds
    fold_in = dealt[np.searchsorted(queries, q_in)]
    fold_out = dealt[np.searchsorted(queries, q_out)]
    s_in, s_out = np.empty(len(x_in)), np.empty(len(x_out))
    for f in range(folds):
        model = LinearScore.fit(names, x_in[fold_in != f], x_out[fold_out != f])
        s_in[fold_in == f] = model.score(x_in[fold_in == f])
        s_out[fold_out == f] = model.score(x_out[fold_out == f])
    return s_in, s_out
