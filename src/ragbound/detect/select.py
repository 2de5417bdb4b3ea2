"""What ``Guard.calibrate(..., statistic="combined" | "auto")`` learns from part of the queries.

The calibration queries are split (seeded, :data:`LEARN_SHARE` to learning) into a learning
part, searched with the full index and with each query's document masked
(:class:`~ragbound.detect.combined.QueryFeatures`), and a conformal part that alone makes the
null of what is learned (with ``null_queries`` every query learns and they make the null).
For ``auto`` every candidate is ranked on the learning part by AUROC, then by the share
flagged at alpha; the simplest within one standard error of the best is proposed, and the
default kept when the masked queries cannot tell (:func:`keep_default_because`). The rules
and the numbers behind them are in docs/online-test.md (``--statistic auto``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# the metrics load on first use, through the package's lazy names: the Guard imports this
# module and must stay light (the CLI starts without numpy's numeric modules)
import ragbound.stats as stats
from ragbound.corpus.queries import split_queries
from ragbound.corpus.units import granularity_label
from ragbound.detect.boundary import BoundaryDetector
from ragbound.detect.calibration import Calibration
from ragbound.detect.combined import (
    Candidate,
    QueryFeatures,
    Selection,
    combined_model,
    feature_depth,
)
from ragbound.detect.config import AUTO, COMBINED, DetectorConfig
from ragbound.errors import InputError
from ragbound.knowledge.protocol import Knowledge
from ragbound.stats import STATISTICS, EmpiricalNull
from ragbound.stats.combined import cross_fitted_scores

LEARN_SHARE = 0.5
# Auto keeps the default (MSS) when leave-documents-out cannot stand in for a question about
# an uncovered topic (see keep_default_because). Fewer than MIN_GROUPS groups left out: the
# standard error treats the masked queries as independent, but queries about one group share
# its neighbourhood, so with a handful of groups the candidates' AUROCs differ by topic, not
# by power (the rule of thumb for clustered errors is 20 to 50 clusters).
MIN_GROUPS = 20
# Near-duplicate siblings: a masked query whose nearest chunk after masking is within
# SIBLING_MARGIN of its nearest before was not moved out of knowledge; more than
# MAX_SIBLING_SHARE of them (the median drop under the margin) and the proxy is mostly
# in-knowledge questions relabelled. Set between BANKING77-OOS's and COVID-QA's median drops
# with MiniLM (0.043 and 0.094): a corpus between them can fall either way.
SIBLING_MARGIN = 0.06
MAX_SIBLING_SHARE = 0.5
# No candidate separating the masked from the full-index queries better than this: the
# proxy does not move the questions, and its ranking is noise.
MIN_PROXY_AUROC = 0.6
CANDIDATE_KS = (1, 4, 8, 32)
# Entropy is left out: it is not monotone in the similarities (a far question whose few
# nearest chunks stand out scores as in knowledge), and the masked examples, all near, cannot
# show that: picked on them, it lost far-set AUROC (0.977 against 0.991, docs/benchmarks.md).
MONOTONE_STATISTICS = tuple(s for s in STATISTICS if s != "entropy")


def candidate_shapes(depth: int) -> list[tuple[str, int]]:
    """(statistic, k) pairs compared: mss reads one neighbour, the others 2 to ``depth``;
    only statistics that never fall as every similarity falls (not entropy)."""
    ks = [k for k in CANDIDATE_KS if 1 < k <= depth]
    return [("mss", 1)] + [(s, k) for s in MONOTONE_STATISTICS if s != "mss" for k in ks]


def _candidate(
    statistic: str, k: int, granularity: str, inside: np.ndarray, outside: np.ndarray, alpha: float
) -> Candidate:
    """The candidate with its AUROC of ``outside`` against ``inside`` scores, and the share of
    ``outside`` flagged at alpha against the ``inside`` scores' null."""
    flagged = float(np.mean(EmpiricalNull(inside).p_values(outside) <= alpha))
    auroc = stats.auroc(inside, outside)
    return Candidate(
        statistic=statistic, k=k, granularity=granularity, auroc=auroc, flagged=flagged
    )


def rank_candidates(learning: QueryFeatures, config: DetectorConfig, seed: int) -> list[Candidate]:
    """Every candidate's estimated power on the learning part, best first (AUROC, flagged)."""
    out = []
    for view in learning.views:
        inside = learning.hits[view].similarities
        outside = learning.masked_hits[view].similarities
        for statistic, k in candidate_shapes(learning.depth):
            detector = BoundaryDetector(statistic=statistic, k=k, tau=config.tau)
            detector.fit(inside[:, :k])
            scores = detector.decision_scores_, detector.score(outside[:, :k])
            out.append(_candidate(statistic, k, granularity_label(view), *scores, config.alpha))
    s_in, s_out = cross_fitted_scores(
        learning.names(),
        learning.matrix(),
        learning.matrix(masked=True),
        np.arange(len(learning.queries)),
        learning.masked_rows,
        seed=seed,
    )
    everything = granularity_label(learning.views[-1])
    out.append(_candidate(COMBINED, learning.depth, everything, s_in, s_out, config.alpha))
    return sorted(out, key=lambda c: (-c.auroc, -c.flagged))


def complexity(candidate: Candidate) -> tuple[bool, int, bool, bool, int]:
    """Sort key, simplest first: combined last, then fewer granularities, the chunk before
    a finer unit, MSS before the k-neighbour statistics, smaller k."""
    return (
        candidate.statistic == COMBINED,
        len(candidate.granularity.split(",")),
        candidate.granularity != "chunk",
        candidate.statistic != "mss",
        candidate.k,
    )


@dataclass(frozen=True)
class ProxyShape:
    """Whether leave-documents-out simulated questions about uncovered topics: how many
    distinct groups the learning queries' masking left out (``n_groups``), and the share of
    masked queries whose nearest chunk after masking is about as close as before
    (``sibling_share``: within :data:`SIBLING_MARGIN`, a near-duplicate sibling left behind)."""

    n_groups: int
    sibling_share: float | None


def proxy_shape(learning: QueryFeatures) -> ProxyShape:
    """The :class:`ProxyShape` of a learning part's masked queries (all units together).
    The sibling share is None for lexical knowledge: BM25 scores have no fixed scale for
    :data:`SIBLING_MARGIN` to be read on (it is set on embedding similarities)."""
    rows = learning.masked_rows
    groups = set().union(*(learning.masked_groups[int(i)] for i in rows))
    if len(rows) == 0 or learning.references is None:  # references: dense knowledge only
        return ProxyShape(len(groups), None)
    view = learning.views[-1]
    full = learning.hits[view].similarities[rows, 0]
    masked = learning.masked_hits[view].similarities[:, 0]
    return ProxyShape(len(groups), float(np.mean(masked >= full - SIBLING_MARGIN)))


def default_candidate(ranked: Sequence[Candidate], granularity: str) -> Candidate:
    """The candidate ``calibrate`` gives without ``--statistic``: MSS at the knowledge base's
    own granularity (chunk MSS when that was not compared)."""
    mss = [c for c in ranked if c.statistic == "mss" and c.k == 1]
    return next((c for c in mss if c.granularity == granularity), None) or min(mss, key=complexity)


def keep_default_because(
    proposed: Candidate,
    default: Candidate,
    best_auroc: float,
    n_in: int,
    n_out: int,
    shape: ProxyShape,
) -> str | None:
    """Why auto keeps ``default`` rather than the one-standard-error rule's ``proposed``
    (None: ``proposed`` stands). In order: too few groups left out, near-duplicate siblings
    left behind, no candidate separating the proxy, ``proposed`` not ahead of the default
    by more than its standard error (``n_in`` full-index and ``n_out`` masked queries)."""
    if shape.n_groups < MIN_GROUPS:
        return f"only {shape.n_groups} groups left out (under {MIN_GROUPS}): too few topics"
    if shape.sibling_share is not None and shape.sibling_share > MAX_SIBLING_SHARE:
        return (
            f"{shape.sibling_share:.0%} of left-out queries kept a near-duplicate sibling "
            "(index --group-field)"
        )
    if best_auroc < MIN_PROXY_AUROC:
        return f"no candidate separates left-out queries (best AUROC {best_auroc:.3f})"
    error = stats.auroc_standard_error(proposed.auroc, n_in, n_out)
    if proposed == default:
        return f"nothing beats it by over one standard error ({error:.3f})"
    if proposed.auroc - default.auroc <= error:
        return (
            f"{proposed.label} beats it by {proposed.auroc - default.auroc:.3f}, within one "
            f"standard error ({error:.3f})"
        )
    return None


def pick_candidate(ranked: Sequence[Candidate], n_in: int, n_out: int) -> tuple[Candidate, float]:
    """The simplest of ``ranked`` (best AUROC first) within one standard error of the best
    AUROC, estimated from ``n_in`` full-index and ``n_out`` masked queries; and that error."""
    best = ranked[0]
    tolerance = stats.auroc_standard_error(best.auroc, n_in, n_out)
    close = [c for c in ranked if c.auroc >= best.auroc - tolerance]
    return min(close, key=lambda c: (complexity(c), -c.auroc)), tolerance


@dataclass(frozen=True)
class Learned:
    """What a learned calibration learned before its null is made: the learning part's
    features (full index and masked), the queries that make the null, and for ``auto`` the
    candidates compared and the one picked."""

    features: QueryFeatures
    conformal: list[str]
    selection: Selection | None

    @property
    def picked_single(self) -> Candidate | None:
        """The statistic auto picked when it is not the combined score (None otherwise)."""
        if self.selection is None or self.selection.picked.statistic == COMBINED:
            return None
        return self.selection.picked


def learn_from_queries(
    kb: Knowledge,
    queries: Sequence[str],
    config: DetectorConfig,
    *,
    statistic: str,
    seed: int,
    null_queries: Sequence[str] | None,
) -> Learned:
    """The learning half of :meth:`ragbound.detect.guard.Guard.calibrate` for ``combined``
    and ``auto``: split the queries (or take ``null_queries`` as the null), search the
    learning part with and without each query's document and, for auto, rank and pick.

    ``config`` gives alpha and tau (statistic, k and granularity are chosen here).
    """
    if statistic not in (COMBINED, AUTO):
        raise InputError(f"statistic must be {COMBINED} or {AUTO}, got {statistic!r}")
    learning, conformal = learning_and_null(list(queries), null_queries, seed)
    if len(learning) < 4 or len(conformal) < 2:
        raise InputError(
            f"--statistic {statistic} needs at least 4 queries to learn from and 2 to make "
            f"the null, got {len(learning)} and {len(conformal)}"
            + ("" if null_queries is not None else " (half of the calibration queries each)")
        )
    learned = QueryFeatures(kb, learning, feature_depth(kb), masked=True)
    selection = None
    if statistic == AUTO:
        ranked = rank_candidates(learned, config, seed)
        n_out = len(learned.masked_rows)
        proposed, tolerance = pick_candidate(ranked, len(learning), n_out)
        default = default_candidate(ranked, granularity_label(kb.granularity))
        shape = proxy_shape(learned)
        reason = keep_default_because(
            proposed, default, ranked[0].auroc, len(learning), n_out, shape
        )
        selection = Selection(
            picked=proposed if reason is None else default,
            proposed=proposed,
            default=default,
            kept_default_because=reason,
            n_groups=shape.n_groups,
            sibling_share=shape.sibling_share,
            candidates=tuple(ranked),
            alpha=config.alpha,
            n_learning=len(learning),
            n_learning_masked=len(learned.masked_rows),
            seed=seed,
            tolerance=tolerance,
        )
    return Learned(features=learned, conformal=conformal, selection=selection)


def learning_and_null(
    queries: list[str], null_queries: Sequence[str] | None, seed: int
) -> tuple[list[str], list[str]]:
    """The learning part and the null part: a seeded split of ``queries`` (LEARN_SHARE to
    learning), or all of them (less any that are also null queries) and ``null_queries``."""
    if null_queries is None:
        return split_queries(queries, LEARN_SHARE, seed=seed)
    nulls = list(null_queries)
    in_null = {_same_text(q) for q in nulls}
    kept = [q for q in queries if _same_text(q) not in in_null]
    if len(kept) < len(queries):
        warnings.warn(
            f"{len(queries) - len(kept)} of the learning queries are also null queries: they "
            "are left out of the learning (the null must be questions the score did not "
            "learn from)",
            UserWarning,
            stacklevel=6,  # the caller of Guard.calibrate
        )
    return kept, nulls


def _same_text(query: str) -> str:
    """A query as compared across the two sets: case and spacing do not make it another
    (the embedder would still find it all but identical to itself)."""
    return " ".join(query.split()).casefold()


def combined_calibration(
    kb: Knowledge,
    learned: Learned,
    config: DetectorConfig,
    seed: int,
    queries_source: str,
) -> Calibration:
    """The combined score's calibration: the model learned on ``learned``, its null the
    conformal queries' scores (searched with every indexed unit)."""
    features = learned.features
    nulls = QueryFeatures(kb, learned.conformal, features.depth, references=features.references)
    model = combined_model(features, nulls, seed)
    view = nulls.views[-1]
    searched = kb.at_granularity(view)
    return Calibration.create(
        learned.conformal,
        nulls.hits[view].similarities,
        kb_fingerprint=kb.fingerprint,
        config=config.updated(statistic=COMBINED, k=features.depth),
        queries_source=queries_source,
        search=searched.describe(),
        granularity=view,
        combined=model,
        selection=learned.selection,
    )
