"""The online test of one knowledge base against its calibration: each query's score (higher =
more out of knowledge), its conformal p-value, and its verdict at alpha."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Self

import numpy as np

from ragbound.detect.boundary import BoundaryDetector
from ragbound.detect.calibration import Calibration
from ragbound.detect.combined import CombinedModel
from ragbound.detect.config import COMBINED, DetectorConfig
from ragbound.detect.rerank import CrossEncoderReranker
from ragbound.detect.retrieval import rerank_hits, search_in_batches
from ragbound.errors import IncompatibleArtifactError, InputError
from ragbound.knowledge.protocol import Knowledge, check_statistic
from ragbound.knowledge.query import Prepared
from ragbound.results import Neighbour, Verdict
from ragbound.stores import Hits

PREVIEW_CHARS = 240


@dataclass(frozen=True)
class BatchScores:
    """A batch's scores (higher = more out of knowledge) and p-values, with the statistic
    that made them and the level they are tested at."""

    scores: np.ndarray
    p_values: np.ndarray
    statistic: str
    alpha: float


@dataclass(frozen=True)
class Scored(BatchScores):
    """:class:`BatchScores` with the rest of the test that made them and the hits searched
    (chunk rows, nearest first)."""

    hits: Hits
    critical_value: float
    k: int
    n_calibration: int


class OnlineTest:
    """The test of queries on ``kb`` (searched at the calibration's granularity) against the
    null of ``calibration``; the fitted detectors and the reranker are made once and kept.

    It reads ``calibration.manifest`` at each call: a manifest replaced (another
    answerability test, say) is the one tested with.
    """

    def __init__(self, kb: Knowledge, calibration: Calibration):
        self.kb = kb
        self.calibration = calibration
        self._detectors: dict[tuple[str | None, float | None], BoundaryDetector] = {}
        self._reranker: CrossEncoderReranker | None = None

    def use_alpha(self, alpha: float | None) -> Self:
        """Decide at ``alpha`` from now on instead of the calibration's (None: keep it), in
        this process: what ``serve --alpha`` does. The calibration on disk is unchanged
        unless it is saved. InputError for an alpha outside (0, 1)."""
        if alpha is not None:
            manifest = self.calibration.manifest
            detector = manifest.detector.updated(alpha=alpha)
            self.calibration.manifest = manifest.model_copy(update={"detector": detector})
            self._detectors.clear()  # keyed by alpha None, which meant the calibration's
        return self

    @property
    def config(self) -> DetectorConfig:
        """The detector parameters saved with the calibration."""
        return self.calibration.manifest.detector

    @property
    def k(self) -> int:
        return self.config.k

    @property
    def approximate(self) -> bool:
        """The null holds synthetic questions alone: its p-values are only approximate."""
        return self.calibration.manifest.questions.approximate

    @property
    def reranker(self) -> CrossEncoderReranker | None:
        """The calibration's cross-encoder, loaded once (None: the rows are similarities).

        Refused (IncompatibleArtifactError) when the model's files changed since calibration.
        """
        folder = self.config.reranker
        if folder is None or self._reranker is not None:
            return self._reranker
        reranker = CrossEncoderReranker(folder)
        recorded = self.calibration.manifest.reranker_revision
        if recorded is not None and reranker.revision != recorded:
            raise IncompatibleArtifactError(
                f"the reranker {folder} changed since this calibration was made (revision "
                f"{recorded}, now {reranker.revision}): calibrate again"
            )
        self._reranker = reranker
        return reranker

    def keep_reranker(self, reranker: CrossEncoderReranker | None) -> None:
        """Use ``reranker``, the one the calibration was just made with (loaded already)."""
        self._reranker = reranker

    def test_rows(
        self, queries: Sequence[str], hits: Hits, *, progress: bool = False
    ) -> np.ndarray:
        """The rows the test scores for these queries' hits: the top-k similarities, or with a
        reranker the k chunks' relevance logits sorted descending (higher = closer, both)."""
        reranker = self.reranker
        if reranker is None:
            return hits.similarities[:, : self.k]
        return rerank_hits(self.kb, reranker, queries, hits, self.k, progress=progress)

    def search_rows(self, queries: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """Retrieve the queries and return the rows the test scores (:meth:`test_rows`)."""
        hits = search_in_batches(self.kb, queries, self.k, progress=progress)
        return self.test_rows(queries, hits, progress=progress)

    def detector(
        self, statistic: str | None = None, alpha: float | None = None
    ) -> BoundaryDetector:
        """The fitted detector for a statistic (default: the calibration's), cached."""
        key = (statistic, alpha)  # as given: a hit skips validating the config per request
        if key in self._detectors:
            return self._detectors[key]
        config = self.config.updated(statistic=statistic, alpha=alpha)
        check_statistic(self.kb, config.statistic)
        if config.statistic == COMBINED:
            raise InputError(
                f"the {COMBINED} statistic has no similarity detector: use Guard.score, "
                "Guard.null_scores or Guard.critical_value, or choose a statistic such as mss"
            )
        detector = BoundaryDetector.from_config(config).fit(self.calibration.similarities)
        self._detectors[key] = detector
        return detector

    def is_learned(self, statistic: str | None = None) -> bool:
        """Whether ``statistic`` (default: the calibration's) is the learned combined score,
        computed in this process from several searches rather than from one row of
        similarities (so it cannot run on another engine)."""
        return (statistic or self.config.statistic) == COMBINED  # cheap: per request

    def combined_model(self) -> CombinedModel:
        """The calibration's learned combined score (InputError: it has none)."""
        model = self.calibration.manifest.combined
        if model is None:
            raise InputError(
                f"this calibration has no {COMBINED} statistic: calibrate with "
                f"--statistic {COMBINED} (or auto), or choose another statistic"
            )
        return model

    def critical_value(self, alpha: float | None = None) -> float:
        """The calibration statistic's critical value at alpha (default: the calibration's);
        math.inf when no score can reach it."""
        config = self.config.updated(alpha=alpha)
        if self.is_learned():
            null = self.combined_model().null()
            return null.critical_value(config.alpha, config.p_value_method)
        return self.detector(alpha=config.alpha).critical_value_

    def null_scores(self, statistic: str | None = None) -> np.ndarray:
        """The calibration queries' scores the p-values compare with (higher = more out of
        knowledge; leave-one-out for Fisher and Simes; the conformal half for combined)."""
        if self.is_learned(statistic):
            return self.combined_model().null().scores
        return self.detector(statistic).decision_scores_

    def search_depth(self) -> int:
        """The nearest chunks :meth:`score` reads of each query's search: ``k``, or the
        combined statistic's feature depth."""
        return self.combined_model().depth if self.is_learned() else self.k

    def score(
        self,
        queries: Sequence[str],
        *,
        statistic: str | None = None,
        alpha: float | None = None,
        hits: Hits | None = None,
        prepared: Prepared | None = None,
        progress: bool = False,
    ) -> Scored:
        """Scores (higher = more out of knowledge) and conformal p-values of a batch.

        ``hits`` (top-k of the knowledge base, k >= ``self.k``) saves the search when the
        caller has it. The combined statistic reads every indexed unit and
        :meth:`search_depth` chunks: given ``prepared`` (``queries`` validated and embedded)
        it does not embed them again, and it reuses ``hits`` for the knowledge base's own
        granularity when they are what that search returns (an exact search at least that
        deep, or an approximate one exactly that deep); it searches the rest itself.
        """
        if self.is_learned(statistic):
            return self._score_combined(queries, alpha, prepared, hits)
        detector = self.detector(statistic, alpha)
        if hits is None:
            hits = search_in_batches(self.kb, queries, self.k, progress=progress)
        scores, p_values = detector.score_p_value(self.test_rows(queries, hits, progress=progress))
        return Scored(
            scores=scores,
            p_values=p_values,
            hits=hits,
            statistic=detector.statistic,
            alpha=detector.alpha,
            critical_value=detector.critical_value_,
            k=detector.k,
            n_calibration=detector.n_calibration_,
        )

    def score_with_search(
        self,
        queries: Sequence[str],
        search: Callable[[Sequence[str]], np.ndarray] | None = None,
        *,
        statistic: str | None = None,
        alpha: float | None = None,
        progress: bool = False,
    ) -> BatchScores:
        """:meth:`score`'s scores and p-values of a batch, whatever the statistic, with the
        rows the test scores from ``search`` (a :data:`ragbound.engines.Search`, which may run
        elsewhere; None: this test's own, :meth:`search_rows`). The combined statistic searches
        every indexed unit itself, in this process, and does not use ``search``."""
        if search is None or self.is_learned(statistic):
            return self.score(queries, statistic=statistic, alpha=alpha, progress=progress)
        detector = self.detector(statistic, alpha)
        scores, p_values = detector.score_p_value(search(queries))
        return BatchScores(scores, p_values, detector.statistic, detector.alpha)

    def _score_combined(
        self,
        queries: Sequence[str],
        alpha: float | None,
        prepared: Prepared | None = None,
        hits: Hits | None = None,
    ) -> Scored:
        """:meth:`score` with the learned combined score (:mod:`ragbound.detect.combined`)."""
        model = self.combined_model()
        config = self.config.updated(alpha=alpha)
        scores, found = model.scores(self.kb, queries, prepared=prepared, hits=hits)
        null = model.null()
        return Scored(
            scores=scores,
            p_values=null.p_values(scores, config.p_value_method),
            hits=found.hits[found.views[-1]],
            statistic=COMBINED,
            alpha=config.alpha,
            critical_value=null.critical_value(config.alpha, config.p_value_method),
            k=self.k,
            n_calibration=null.n,
        )

    def verdict(self, query: str, scored: Scored, row: int, evidence: int) -> Verdict:
        """The Verdict of row ``row`` of a scored batch, with its ``evidence`` nearest chunks."""
        return Verdict(
            query=query,
            statistic=scored.statistic,
            score=float(scored.scores[row]),
            p_value=float(scored.p_values[row]),
            out_of_knowledge=bool(scored.p_values[row] <= scored.alpha),
            alpha=scored.alpha,
            critical_value=scored.critical_value,
            k=scored.k,
            n_calibration=scored.n_calibration,
            approximate=self.approximate,
            neighbours=self.neighbours(scored.hits, row, evidence),
        )

    def check(
        self,
        query: str,
        *,
        statistic: str | None = None,
        alpha: float | None = None,
        evidence: int = 3,
    ) -> Verdict:
        """Test one query: p-value, decision at alpha, and the nearest chunks as evidence."""
        return self.check_many([query], statistic=statistic, alpha=alpha, evidence=evidence)[0]

    def check_many(
        self,
        queries: Sequence[str],
        *,
        statistic: str | None = None,
        alpha: float | None = None,
        evidence: int = 3,
        progress: bool = False,
    ) -> list[Verdict]:
        """Test a batch of queries (embedded in batches; one Verdict per query, in order)."""
        scored = self.score(queries, statistic=statistic, alpha=alpha, progress=progress)
        return [self.verdict(query, scored, i, evidence) for i, query in enumerate(queries)]

    def neighbours(
        self, hits: Hits, row: int, count: int, *, full_text: bool = False
    ) -> list[Neighbour]:
        """The first ``count`` chunks of ``hits`` row ``row``, nearest first, as evidence (text
        cut to ``PREVIEW_CHARS``) or, with ``full_text``, as an LLM's context."""
        out = []
        for rank in range(min(count, hits.indices.shape[1])):
            chunk = self.kb.chunk_at(hits.indices[row, rank])
            out.append(
                Neighbour(
                    rank=rank + 1,
                    chunk_id=chunk.id,
                    doc_id=chunk.doc_id,
                    source=chunk.source,
                    similarity=float(hits.similarities[row, rank]),
                    text=chunk.text if full_text else chunk.text[:PREVIEW_CHARS],
                )
            )
        return out
