"""The answerability test as a guard runs it: calibrated on the calibration's questions and run
beside the relevance test (an :class:`~ragbound.detect.online.OnlineTest`), the two sharing
one alpha (each at :meth:`AnswerabilityTest.level`). The statistics and the saved model are
:mod:`ragbound.detect.answerability`'s, the LLM judge :mod:`ragbound.detect.judge`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ragbound.detect.answerability import DEPTH as ANSWER_DEPTH
from ragbound.detect.answerability import (
    AnswerabilityModel,
    AnswerabilityVerdict,
    calibrate_answerability,
    check_answerability,
    scored,
)
from ragbound.detect.config import COMBINED
from ragbound.detect.judge import AnswerabilityJudge
from ragbound.detect.names import JUDGE
from ragbound.detect.online import OnlineTest
from ragbound.detect.resolution import warn_if_coarse
from ragbound.detect.retrieval import search_in_batches
from ragbound.errors import InputError
from ragbound.stats import EmpiricalNull
from ragbound.stores import Hits

if TYPE_CHECKING:
    from ragbound.llm import LLM


def check_request(statistic: str, llm: LLM | str | None) -> None:
    """Refuse, before anything is searched, an unknown statistic, or the judge without an LLM
    or with a spec that makes none (a bad spec, a missing server setting)."""
    check_answerability(statistic)
    if statistic != JUDGE:
        return
    if llm is None:
        raise InputError(f"the {JUDGE} answerability test needs an LLM: llm='local', ...")
    if isinstance(llm, str):
        from ragbound.llm import make_llm

        make_llm(llm)


class AnswerabilityTest:
    """The answerability test of ``relevance``'s knowledge, as its calibration's manifest holds
    it (:attr:`model`; None: off). The shared levels, the null and the judge are made once and
    kept."""

    def __init__(self, relevance: OnlineTest):
        self.relevance = relevance
        self._levels: dict[tuple[float, str | None, int], float] = {}
        self._null: tuple[AnswerabilityModel, EmpiricalNull] | None = None
        self._judge: AnswerabilityJudge | None = None

    @property
    def model(self) -> AnswerabilityModel | None:
        """The calibrated answerability test (None: off)."""
        return self.relevance.calibration.manifest.answerability

    def calibrate(
        self, statistic: str | None, *, llm: LLM | str | None = None, progress: bool = False
    ) -> None:
        """Calibrate the test on the calibration's questions and keep it in its manifest
        (``statistic`` None: remove it). ``judge`` needs ``llm``: a spec (recorded, so that a
        gate loading the calibration makes the same model) or an LLM (its ``model_id`` is
        recorded). Refused for the learned statistic, whose null is a part of the questions."""
        calibration = self.relevance.calibration
        self._levels.clear()  # those of the model replaced
        if statistic is None:
            calibration.manifest = calibration.manifest.model_copy(update={"answerability": None})
            return
        check_request(statistic, llm)
        if self.relevance.is_learned():
            raise InputError(
                f"the answerability test needs a statistic of the similarities (mss, knn, "
                f"...): its null and {COMBINED}'s are made of different questions"
            )
        judge = self.use_judge(llm) if statistic == JUDGE else None
        kb, queries = self.relevance.kb, calibration.queries
        hits = search_in_batches(kb, queries, min(ANSWER_DEPTH, len(kb)), progress=progress)
        spec = llm if isinstance(llm, str) else None
        model = calibrate_answerability(
            kb, queries, hits, statistic, judge=judge, llm=spec, progress=progress
        )
        calibration.manifest = calibration.manifest.model_copy(update={"answerability": model})
        alpha, shared = self.relevance.config.alpha, self.level()
        if shared < alpha:  # each test at its share: coarser than alpha alone
            warn_if_coarse(len(queries), alpha, shared, stacklevel=4)

    def use_judge(self, llm: LLM | str | None) -> AnswerabilityJudge:
        """The answerability judge on ``llm`` (a spec, made behind the on-disk response
        cache, or an LLM as it is), kept for the decisions."""
        from ragbound.llm import CachedLLM, ResponseCache, make_llm

        model = CachedLLM(make_llm(llm), ResponseCache()) if isinstance(llm, str) else llm
        if model is None:
            raise InputError("use_judge needs an LLM or its spec")
        self._judge = AnswerabilityJudge(model)
        return self._judge

    @property
    def judge(self) -> AnswerabilityJudge | None:
        """The answerability judge the calibration asks for (None: none), made from its
        recorded spec on first use unless :meth:`use_judge` gave one."""
        model = self.model
        if model is None or model.statistic != JUDGE:
            return None
        if self._judge is None:
            if model.llm is None:
                raise InputError(
                    f"this calibration's judge ({model.model_id}) was an LLM object, not a "
                    "spec: give it again with guard.answers.use_judge(llm)"
                )
            self.use_judge(model.llm)
        return self._judge

    def level(self, alpha: float | None = None, statistic: str | None = None) -> float:
        """The level each test runs at when both share ``alpha`` (default: the
        calibration's), the relevance test scoring ``statistic`` (default: the
        calibration's); ``alpha`` itself without the answerability test."""
        alpha = self.relevance.config.alpha if alpha is None else alpha
        model = self.model
        if model is None:
            return alpha
        key = (alpha, statistic, id(model))  # per request: computed once per alpha
        if key not in self._levels:
            self._levels[key] = model.level(alpha, self.relevance.null_scores(statistic))
        return self._levels[key]

    def verdicts_at(
        self, texts: Sequence[str], hits: Hits, level: float, rows: Sequence[int]
    ) -> list[AnswerabilityVerdict | None]:
        """:meth:`verdicts` of the texts at ``rows`` alone, None for the others: those are
        decided already and not read again (a judge's call is not free)."""
        answers: list[AnswerabilityVerdict | None] = [None] * len(texts)
        if rows:
            rows = list(rows)
            subset = Hits(similarities=hits.similarities[rows], indices=hits.indices[rows])
            found = self.verdicts([texts[i] for i in rows], subset, level)
            for i, verdict in zip(rows, found, strict=True):
                answers[i] = verdict
        return answers

    def verdicts(
        self, texts: Sequence[str], hits: Hits, level: float
    ) -> list[AnswerabilityVerdict]:
        """The test of each text given its ``hits`` (the search the relevance test read, at
        least the model's depth), flagged at ``level``."""
        model = self.model
        if model is None:
            raise InputError("this calibration has no answerability test: calibrate with one")
        if self._null is None or self._null[0] is not model:
            self._null = (model, model.empirical_null())  # built once, not per request
        null = self._null[1]
        found = scored(self.relevance.kb, texts, hits, model.depth, self.judge)
        p_values = null.p_values([c.score for c in found])
        return [
            AnswerabilityVerdict(
                statistic=model.statistic,
                score=c.score,
                p_value=float(p),
                unanswerable=bool(p <= level),
                alpha=level,
                n_calibration=null.n,
                evidence=c.evidence,
            )
            for c, p in zip(found, p_values, strict=True)
        ]
