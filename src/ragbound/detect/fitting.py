"""Fitting a calibration: in-knowledge questions searched, and what makes the null kept.

A statistic of the similarities keeps every question's top-k (with a reranker, its relevance
logits of those k chunks); ``combined`` and ``auto`` learn on part of the questions
(:mod:`ragbound.detect.select`) and choose k and the units themselves. The arguments are
those of :meth:`ragbound.detect.guard.Guard.calibrate`, the public door; these functions make
the :class:`Calibration` alone.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ragbound.detect.calibration import Calibration
from ragbound.detect.config import (
    AUTO,
    COMBINED,
    DEFAULTS,
    DetectorConfig,
    NonNegativeInt,
    check_option,
    resolve_tau,
)
from ragbound.detect.rerank import CrossEncoderReranker
from ragbound.detect.resolution import warn_if_coarse
from ragbound.detect.retrieval import rerank_hits, search_in_batches
from ragbound.detect.select import combined_calibration, learn_from_queries
from ragbound.errors import InputError
from ragbound.knowledge.protocol import Knowledge, check_statistic

# the warnings below name the line that called Guard.calibrate
_CALLER_OF_CALIBRATE = 5


@dataclass(frozen=True)
class Fitted:
    """A calibration just made, and the reranker that scored its rows, its model loaded
    already (None: the rows are similarities)."""

    calibration: Calibration
    reranker: CrossEncoderReranker | None = None


def fit_calibration(
    kb: Knowledge,
    queries: Sequence[str],
    config: DetectorConfig | None,
    params: dict[str, Any],
    *,
    granularity: str | Sequence[str] | None = None,
    null_queries: Sequence[str] | None = None,
    seed: int | None = None,
    queries_source: str = "",
    progress: bool = False,
) -> Fitted:
    """The calibration of ``kb`` on ``queries``, its detector ``config`` (default:
    :data:`DEFAULTS`) with the fields in ``params`` replaced (``tau="auto"``: the embedder's
    training temperature). Arguments as :meth:`ragbound.detect.guard.Guard.calibrate`'s."""
    params = dict(params)
    if "tau" in params:
        params["tau"] = resolve_tau(params["tau"], kb.embedder_name)
    statistic = params.pop("statistic", None) or (config or DEFAULTS).statistic
    check_statistic(kb, statistic)
    if statistic in (COMBINED, AUTO):
        return fit_learned(
            kb,
            queries,
            (config or DEFAULTS).updated(**params),
            statistic,
            k=params.get("k"),
            granularity=granularity,
            null_queries=null_queries,
            seed=seed,
            queries_source=queries_source,
            progress=progress,
        )
    if null_queries is not None or seed is not None:
        raise InputError(
            f"null_queries and seed are for statistic {COMBINED} or {AUTO}; {statistic} "
            "learns nothing: calibrate it on the real questions"
        )
    k_given = params.get("k") is not None or (config is not None and "k" in config.model_fields_set)
    return fit_rows(
        kb if granularity is None else kb.at_granularity(granularity),
        queries,
        (config or DEFAULTS).updated(statistic=statistic, **params),
        k_given=k_given,
        queries_source=queries_source,
        progress=progress,
    )


def fit_rows(
    kb: Knowledge,
    queries: Sequence[str],
    config: DetectorConfig,
    *,
    k_given: bool = True,
    queries_source: str = "",
    progress: bool = False,
) -> Fitted:
    """The calibration of a statistic of the similarities: every query's top-k kept (or the
    reranker's rows of them). A default k (not ``k_given``) is cut to the knowledge's size."""
    config = _k_within(kb, config, k_given)
    if len(queries) < 2:
        raise InputError(f"calibration needs at least 2 in-knowledge queries, got {len(queries)}")
    reranker = None if config.reranker is None else CrossEncoderReranker(config.reranker)
    if reranker is not None:
        config = config.updated(reranker=str(reranker.folder))
    hits = search_in_batches(kb, queries, config.k, progress=progress)
    rows = hits.similarities
    if reranker is not None:
        rows = rerank_hits(kb, reranker, queries, hits, config.k, progress=progress)
    calibration = Calibration.create(
        queries,
        rows,
        kb_fingerprint=kb.fingerprint,
        config=config,
        queries_source=queries_source,
        search=kb.describe(),
        reranker_revision=None if reranker is None else reranker.revision,
        granularity=kb.granularity,
    )
    warn_if_coarse(len(queries), config.alpha, stacklevel=_CALLER_OF_CALIBRATE)
    return Fitted(calibration, reranker)


def fit_learned(
    kb: Knowledge,
    queries: Sequence[str],
    config: DetectorConfig,
    statistic: str,
    *,
    k: int | None = None,
    granularity: str | Sequence[str] | None = None,
    null_queries: Sequence[str] | None = None,
    seed: int | None = None,
    queries_source: str = "",
    progress: bool = False,
) -> Fitted:
    """The calibration of ``combined`` or ``auto``: learned on a part of ``queries``, the null
    made of the rest (or of ``null_queries``). They search every indexed unit and choose k:
    a ``k``, ``granularity`` or ``config.reranker`` the caller chose is refused."""
    given = (("k", k), ("reranker", config.reranker), ("granularity", granularity))
    named = [name for name, value in given if value is not None]
    if named:
        raise InputError(
            f"statistic {statistic} searches every indexed unit and chooses k: it takes "
            f"no {' or '.join(named)}"
        )
    if isinstance(null_queries, str):
        raise InputError("null_queries must be a list of questions, not one string")
    seed = 0 if seed is None else check_option(NonNegativeInt, seed, "seed")
    learned = learn_from_queries(
        kb, queries, config, statistic=statistic, seed=seed, null_queries=null_queries
    )
    picked = learned.picked_single
    if picked is None:
        return Fitted(combined_calibration(kb, learned, config, seed, queries_source))
    fitted = fit_rows(
        kb.at_granularity(picked.granularity),
        learned.conformal,
        config.updated(statistic=picked.statistic, k=picked.k),
        queries_source=queries_source,
        progress=progress,
    )
    manifest = fitted.calibration.manifest
    fitted.calibration.manifest = manifest.model_copy(update={"selection": learned.selection})
    return fitted


def _k_within(kb: Knowledge, config: DetectorConfig, given: bool) -> DetectorConfig:
    """``config`` with the default k cut to the knowledge base's size, with a warning (a
    30-article knowledge base has fewer chunks than the default 32); a k the caller gave
    that is too large stays, and the search refuses it naming both."""
    size = len(kb)
    if given or config.k <= size or size < 1:
        return config
    warnings.warn(
        f"k={config.k} (the default) is more than the knowledge base's {size} chunks: "
        f"calibrated with k={size}, every chunk",
        UserWarning,
        stacklevel=_CALLER_OF_CALIBRATE,
    )
    return config.updated(k=size)
