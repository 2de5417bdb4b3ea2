"""Test statistics of the goodness-of-fit test (paper section 3.2).

Every statistic maps a batch of retrieval similarities to one score per query, oriented so that
**higher = more out-of-knowledge** (OoK). Inputs ``sims`` have shape (n_queries, k); each row is
sorted descending (column 0 = nearest neighbour, higher similarity = closer). Similarities are in
the embedder's units (cosine similarity for normalised embeddings). All functions are vectorised
over the batch and return float64 arrays of shape (n_queries,).

Univariate statistics work on one query's similarities alone. The meta-analytic ones (Fisher,
Simes) combine k per-neighbour p-values; build those with :mod:`ragbound.stats.null`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from ragbound.stats._validate import FloatArray, as_pvals, as_sims, check_choice, check_positive
from ragbound.stats.names import META, UNIVARIATE
from ragbound.stats.names import STATISTICS as STATISTICS  # re-exported (its home is names)


def mss(sims: ArrayLike) -> FloatArray:
    """Maximum similarity score: ``-sims[:, 0]`` (minus the nearest neighbour's similarity)."""
    return -as_sims(sims)[:, 0].copy()


def knn(sims: ArrayLike) -> FloatArray:
    """k-th nearest neighbour: ``-sims[:, -1]``, k being the number of columns."""
    return -as_sims(sims)[:, -1].copy()


def avgknn(sims: ArrayLike) -> FloatArray:
    """Average of the k nearest neighbours: minus the row mean of the similarities."""
    return -as_sims(sims).mean(axis=1)


def entropy(sims: ArrayLike) -> FloatArray:
    """Shannon entropy (nats) of ``softmax(sims)`` over the k columns of each row.

    A flat retrieval distribution (no neighbour stands out) gives a high entropy, which is read
    as more out-of-knowledge, so there is no sign flip. The range is [0, log k]; a constant row
    gives exactly log k. Computed from the log-softmax, so it is stable for large similarities.
    """
    log_p = log_softmax_rows(as_sims(sims))
    return -(np.exp(log_p) * log_p).sum(axis=1)


def energy(sims: ArrayLike, tau: float = 1.0) -> FloatArray:
    """Free energy ``-tau * logsumexp(sims / tau)`` over the k columns of each row.

    ``tau`` is the softmax temperature (> 0, same units as the similarities). The energy lies in
    ``[mss - tau * log k, mss]``: lower similarities give a higher (more OoK) energy.
    """
    tau = check_positive(tau, "tau")
    return -tau * logsumexp_rows(as_sims(sims) / tau)


def log_softmax_rows(values: FloatArray) -> FloatArray:
    """``log(softmax(row))`` of each row of a finite 2-D array, shifted by the row maximum so
    that no exponential overflows."""
    shifted = values - values.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def logsumexp_rows(values: FloatArray) -> FloatArray:
    """``log(sum(exp(row)))`` of each row of a finite 2-D array.

    The row maximum ``top`` is taken out exactly (Blanchard, Higham and Higham 2021): with
    ``count`` entries equal to it and ``rest`` the sum of ``exp(v - top)`` over the others,
    the result is ``log1p(rest / count) + log(count) + top``, accurate also when the others
    are far below the maximum.
    """
    top = values.max(axis=1, keepdims=True)
    at_top = values == top
    count = at_top.sum(axis=1, keepdims=True).astype(np.float64)
    rest = np.where(at_top, 0.0, np.exp(values - top)).sum(axis=1, keepdims=True)
    return (np.log1p(rest / count) + np.log(count) + top)[:, 0]


_UNIVARIATE_FUNCS: dict[str, Callable[[ArrayLike], FloatArray]] = {
    "mss": mss,
    "knn": knn,
    "avgknn": avgknn,
    "entropy": entropy,
}


def univariate_scores(name: str, sims: ArrayLike, *, tau: float = 1.0) -> FloatArray:
    """Compute the univariate statistic ``name`` (one of ``UNIVARIATE``) for every row of sims.

    ``tau`` is used by ``energy`` only. Higher = more out-of-knowledge.
    """
    check_choice(name, UNIVARIATE, "univariate statistic")
    if name == "energy":
        return energy(sims, tau=tau)
    return _UNIVARIATE_FUNCS[name](sims)


def fisher(pvals: ArrayLike) -> FloatArray:
    """Fisher's combination ``-2 * sum_i log p_i`` of each row's k p-values in (0, 1].

    Higher = more out-of-knowledge; all-ones p-values give 0. Under independent uniform p-values
    it follows chi-square with 2k degrees of freedom (not assumed here: the null is empirical).
    """
    # The paper prints "-2 sum p_i"; that is a typo for Fisher's -2 sum log p_i.
    return 0.0 - 2.0 * np.log(as_pvals(pvals)).sum(axis=1)  # 0.0 - avoids -0.0


def simes(pvals: ArrayLike) -> FloatArray:
    """Negated Simes combined p-value ``-min_i k * p_(i) / i`` (p sorted ascending, i = 1..k).

    The Simes p-value is small when some neighbours are surprising; it is negated so that
    higher = more out-of-knowledge. The result lies in [-1, 0).
    """
    ordered = np.sort(as_pvals(pvals), axis=1)
    k = ordered.shape[1]
    ranks = np.arange(1, k + 1, dtype=np.float64)
    return -(k * ordered / ranks).min(axis=1)


_META_FUNCS: dict[str, Callable[[ArrayLike], FloatArray]] = {"fisher": fisher, "simes": simes}


def combine_p_values(name: str, pvals: ArrayLike) -> FloatArray:
    """Combine per-neighbour p-values with the meta statistic ``name`` (one of ``META``)."""
    check_choice(name, META, "meta statistic")
    return _META_FUNCS[name](pvals)
