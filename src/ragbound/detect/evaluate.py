"""The paper's evaluation protocol: balanced in/out draws, every statistic, averaged runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragbound.artifacts import utc_now

# split_queries lives below the Guard (its learned calibrations split queries too); callers
# that split calibration / test halves import it from here
from ragbound.corpus.queries import split_queries as split_queries
from ragbound.detect.guard import Guard
from ragbound.detect.names import DEFAULT_STATISTIC
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.results import EvaluationInputs, EvaluationReport, StatisticMetrics
from ragbound.stats import STATISTICS, balanced_runs

EVALUATION_ALPHA = 0.05


@dataclass(frozen=True)
class ScoredSets:
    """One statistic's values (higher = more out-of-knowledge) on the in- and
    out-of-knowledge test queries, and the critical value calibrated at alpha = 5%."""

    scores_in: np.ndarray
    scores_out: np.ndarray
    critical_value: float


def evaluate(
    guard: Guard,
    in_knowledge: Sequence[str],
    out_of_knowledge: Sequence[str],
    *,
    statistics: Sequence[str] = STATISTICS,
    samples: int = 300,
    runs: int = 10,
    seed: int = 0,
    progress: bool = False,
    scored: dict[str, ScoredSets] | None = None,
) -> EvaluationReport:
    """AUROC, AUPRC, TPR and DER at the alpha = 5% critical value, for each statistic.

    Each query is retrieved once; every run then draws ``samples`` in- and out-of-knowledge
    queries (without replacement, seeded; a whole side when it is smaller) and the metrics are
    averaged over ``runs``; when both draws take every query, one run is made (the report
    gives the draw sizes and the runs made).
    In-knowledge test queries should be disjoint from the calibration queries; overlap is
    refused because it would flatter every number. ``scored`` reuses values already
    computed by :func:`statistic_scores` on the same queries (e.g. to plot them too).
    """
    _check_inputs(guard, in_knowledge, out_of_knowledge, samples, runs)
    sets = scored or statistic_scores(
        guard, in_knowledge, out_of_knowledge, statistics, progress=progress
    )
    results = {
        name: balanced_runs(
            scored.scores_in,
            scored.scores_out,
            samples=samples,
            runs=runs,
            seed=seed,
            threshold=scored.critical_value,
        )
        for name, scored in sets.items()
    }
    if not results:
        raise InputError("no statistics to evaluate")
    drawn = next(iter(results.values()))  # every statistic scores the same draws
    return EvaluationReport(
        statistics={
            name: StatisticMetrics(**{f: float(result[f]) for f in StatisticMetrics.model_fields})
            for name, result in results.items()
        },
        n_in_knowledge=len(in_knowledge),
        n_out_of_knowledge=len(out_of_knowledge),
        n_calibration=guard.calibration.manifest.n_queries,
        samples=samples,
        drawn_in=int(drawn["n_in"]),
        drawn_out=int(drawn["n_out"]),
        runs=int(drawn["runs"]),
        seed=seed,
        alpha=EVALUATION_ALPHA,
        k=guard.k,
        kb_fingerprint=guard.kb.fingerprint,
        default_statistic=DEFAULT_STATISTIC,
    )


def evaluation_inputs(
    guard: Guard, in_knowledge: str | Path, out_of_knowledge: str | Path
) -> EvaluationInputs:
    """What an evaluation of ``guard`` on these two question files runs on, for its run
    folder: the knowledge base's folder and corpus, the calibration questions' source, the
    embedder, and the time now (UTC)."""
    kb = guard.kb
    segments = kb.manifest.segments if isinstance(kb, KnowledgeBase) else []  # else unknown
    return EvaluationInputs(
        knowledge_base="" if kb.path is None else str(kb.path),
        corpus=list(dict.fromkeys(source for s in segments for source in s.sources)),
        calibration=guard.calibration.manifest.queries_source,
        in_knowledge=str(in_knowledge),
        out_of_knowledge=str(out_of_knowledge),
        embedder=kb.embedder_name,
        evaluated_at=utc_now(),
    )


def statistic_scores(
    guard: Guard,
    in_knowledge: Sequence[str],
    out_of_knowledge: Sequence[str],
    statistics: Sequence[str] = STATISTICS,
    *,
    progress: bool = False,
) -> dict[str, ScoredSets]:
    """Every statistic on both query sets; each query is retrieved once."""
    sims_in = guard.search_rows(in_knowledge, progress=progress)
    sims_out = guard.search_rows(out_of_knowledge, progress=progress)
    sets = {}
    for name in statistics:
        detector = guard.detector(name, EVALUATION_ALPHA)
        sets[name] = ScoredSets(
            detector.score(sims_in), detector.score(sims_out), detector.critical_value_
        )
    return sets


def _check_inputs(
    guard: Guard, ik: Sequence[str], ook: Sequence[str], samples: int, runs: int
) -> None:
    if not ik or not ook:
        raise InputError(
            "evaluation needs at least one in-knowledge and one out-of-knowledge query"
        )
    if samples < 1 or runs < 1:
        raise InputError(f"samples and runs must be positive, got {samples} and {runs}")
    overlap = set(ik) & set(guard.calibration.queries)
    if overlap:
        example = next(iter(overlap))
        raise InputError(
            f"{len(overlap)} in-knowledge test queries are also calibration queries "
            f"(for example {example!r}); evaluate on queries held out from calibration"
        )
