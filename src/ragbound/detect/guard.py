"""Guard: a knowledge base plus its calibration; ``check(query)`` gives a typed Verdict."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragbound.corpus.provenance import origins_of
from ragbound.detect.answerability import AnswerabilityModel
from ragbound.detect.answers import AnswerabilityTest, check_request
from ragbound.detect.calibration import Calibration, NullQuestions
from ragbound.detect.canary import CanaryCheck, check_canaries, verify_canaries
from ragbound.detect.config import DetectorConfig
from ragbound.detect.fitting import fit_calibration
from ragbound.detect.online import OnlineTest
from ragbound.detect.provenance import Questions, record_provenance, record_reading
from ragbound.detect.resolution import Resolution, resolution
from ragbound.detect.storage import floor_reference, save_calibration
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.protocol import Knowledge, check_statistic

if TYPE_CHECKING:
    from ragbound.llm import LLM
    from ragbound.tripwires.floor import Reference


class Guard(OnlineTest):
    """Online out-of-knowledge checks against one knowledge base.

    The online test of its knowledge against its calibration (:class:`OnlineTest`: ``check``,
    ``score``, ...), the answerability test beside it (``self.answers``), made by
    :meth:`calibrate` (:mod:`~ragbound.detect.fitting`), saved and opened again.

    Example:
        >>> kb = KnowledgeBase.load("kb/")  # doctest: +SKIP
        >>> guard = Guard.calibrate(kb, in_knowledge_questions)  # doctest: +SKIP
        >>> verdict = guard.check("How do I bake sourdough bread?")  # doctest: +SKIP
        >>> verdict.out_of_knowledge, verdict.p_value  # doctest: +SKIP
        (True, 0.0033)
    """

    def __init__(
        self,
        kb: Knowledge,
        calibration: Calibration,
        *,
        force: bool = False,
        granularity: str | Sequence[str] | None = None,
    ):
        """Pair knowledge with its calibration (refused if they do not match). ``kb`` is a
        :class:`KnowledgeBase` or any other :class:`~ragbound.knowledge.protocol.Knowledge`
        (e.g. a :class:`~ragbound.knowledge.retriever.RetrieverKnowledge` over the user's own
        search). The guard searches at the calibration's granularity (``self.kb`` is the
        knowledge at that granularity); another ``granularity`` is refused unless ``force``."""
        calibration.check_compatible(kb.fingerprint, force=force)
        check_statistic(kb, calibration.manifest.detector.statistic)
        searched = kb.at_granularity(calibration.granularity_for(granularity, force=force))
        calibration.check_search(searched.describe(), force=force)
        super().__init__(searched, calibration)
        self.answers = AnswerabilityTest(self)
        self._reference: Reference | None = None

    # ------------------------------------------------------------- lifecycle
    @classmethod
    def calibrate(
        cls,
        kb: Knowledge,
        queries: Sequence[str],
        config: DetectorConfig | None = None,
        *,
        queries_source: str = "",
        granularity: str | Sequence[str] | None = None,
        progress: bool = False,
        null_queries: Sequence[str] | None = None,
        seed: int | None = None,
        questions: Questions | None = None,
        answerability: str | None = None,
        llm: LLM | str | None = None,
        **params: Any,
    ) -> Guard:
        """Calibrate on in-knowledge queries: the empirical null new queries are tested against.

        ``config`` holds the detector's parameters (default: :class:`DetectorConfig`'s);
        keyword ``params`` (statistic, k, tau, alpha, p_value_method, reranker) override
        single fields, and an unknown or bad one is an InputError naming it. ``tau="auto"``
        takes the embedder's training temperature (:func:`resolve_tau`).

        A statistic of the similarities (mss, knn, avgknn, entropy, energy, fisher, simes):
        every query's top-k is retrieved and kept as the null. With a reranker the null keeps
        its relevance logits of the k chunks (:meth:`test_rows`); the folder is recorded
        resolved, with its revision. ``granularity`` (``"sentence"``, ``"chunk,window"``,
        ...): the indexed units chunks are scored by (default: the knowledge base's own, as
        indexed); it is recorded.

        ``statistic="combined"`` learns one score from several retrieval signals, and
        ``statistic="auto"`` picks among every candidate (the simplest within one standard
        error of the best, else MSS). Both learn on a seeded part of ``queries`` (``seed``,
        default 0), or on all of them when ``null_queries`` (real in-knowledge questions) alone
        make the null, and choose k and the units: ``k``, ``reranker`` and ``granularity`` are
        refused, and ``null_queries`` and ``seed`` are refused with the other statistics
        (:mod:`ragbound.detect.fitting`).

        ``questions``: where the questions that make the null came from, kept in the
        manifest (``questions``, a :class:`NullQuestions`): ``"real"`` or ``"synthetic"`` for
        all of them, or a mapping of each question to its origin
        (:func:`ragbound.corpus.provenance.question_origins` reads it from a query file);
        None: unknown. A null of synthetic questions alone marks every verdict
        ``approximate`` ("p-values approximate: no real questions").

        ``answerability`` (``"coverage"``, or ``"judge"`` with ``llm``; None: off) adds the
        answerability test (:mod:`ragbound.detect.answers`), calibrated on the same
        questions: a :class:`~ragbound.gate.Gate` then also abstains on a question in scope
        whose retrieved chunks do not hold what it asks, the two tests sharing alpha. Not
        with ``combined`` or ``auto``.

        Example (synthetic questions teach the score, real ones certify it)::

            guard = Guard.calibrate(kb, synthetic, statistic="auto", null_queries=real,
                                    queries_source="real.txt", questions="real")
        """
        if answerability is not None:
            check_request(answerability, llm)  # refused before any search
        origins_of((), questions)  # a bad value is refused before any search
        fitted = fit_calibration(
            kb,
            queries,
            config,
            params,
            granularity=granularity,
            null_queries=null_queries,
            seed=seed,
            queries_source=queries_source,
            progress=progress,
        )
        guard = cls(kb, fitted.calibration)
        record_provenance(guard.kb, guard.calibration, questions)
        guard.keep_reranker(fitted.reranker)
        if answerability is not None:
            guard.with_answerability(answerability, llm=llm, progress=progress)
        return guard

    def save(
        self,
        *,
        on_wait: Callable[[str], None] | None = None,
        folder: str | Path | None = None,
    ) -> Path:
        """Save the calibration inside the knowledge base's directory, under its writer lock,
        refused if the knowledge base changed since it was loaded (:meth:`Calibration.save`);
        or in ``folder`` (created if missing; its ``calibration/`` subfolder is replaced) for
        knowledge with no folder of its own such as a retriever's: :meth:`load_for` opens it
        again against knowledge of the fingerprint it was calibrated against. With a vector
        search the tripwire floor's reference questions are embedded (once per guard: not again
        if a decision did) and kept with it, so a load does not embed them."""
        return save_calibration(
            self.kb, self.calibration, self.reference, folder=folder, on_wait=on_wait
        )

    @property
    def reference(self) -> Reference:
        """The calibration's questions the tripwires' calibrated floor is measured on, one per
        guard (:func:`ragbound.detect.storage.floor_reference`)."""
        if self._reference is None:
            self._reference = floor_reference(self.kb, self.calibration)
        return self._reference

    @classmethod
    def load_for(
        cls,
        kb: Knowledge,
        folder: str | Path,
        *,
        force: bool = False,
        granularity: str | Sequence[str] | None = None,
    ) -> Guard:
        """The calibration saved in ``folder`` (:meth:`save` with ``folder``) on knowledge
        ``kb`` the caller opened (refused if ``kb``'s fingerprint or search differs from the
        one calibrated against, unless ``force``)."""
        calibration = Calibration.load(Path(folder))
        return cls(kb, calibration, force=force, granularity=granularity)

    @classmethod
    def load(
        cls,
        kb_dir: str | Path,
        *,
        force: bool = False,
        granularity: str | Sequence[str] | None = None,
    ) -> Guard:
        """Open a saved knowledge base and its calibration (refused if they do not match, or
        if the canaries moved: :meth:`verify_canaries`)."""
        guard = cls.open(kb_dir, force=force, granularity=granularity)
        guard.verify_canaries(force=force)
        return guard

    @classmethod
    def open(
        cls,
        kb_dir: str | Path,
        *,
        force: bool = False,
        granularity: str | Sequence[str] | None = None,
    ) -> Guard:
        """As :meth:`load` without searching the canaries: nothing is embedded (the shift
        monitor of a service's supervisor reads the calibration only)."""
        kb = KnowledgeBase.load(kb_dir)
        return cls(kb, Calibration.load(Path(kb_dir)), force=force, granularity=granularity)

    def with_answerability(
        self, statistic: str | None, *, llm: LLM | str | None = None, progress: bool = False
    ) -> Guard:
        """This guard with the answerability test calibrated on its calibration questions
        (``statistic`` None: without it; :meth:`AnswerabilityTest.calibrate`). With an
        :class:`~ragbound.llm.LLM` as the judge, give it to ``guard.answers.use_judge(llm)``
        after loading."""
        self.answers.calibrate(statistic, llm=llm, progress=progress)
        return self

    @property
    def answerability(self) -> AnswerabilityModel | None:
        """The calibrated answerability test (None: off)."""
        return self.answers.model

    def calibration_resolution(self) -> Resolution:
        """How finely the calibration resolves its alpha (each test at its share when the
        answerability test shares it): whether anything can be flagged, and how much the
        share flagged varies from one calibration set to another."""
        n = self.calibration.manifest.n_queries
        return resolution(n, self.config.alpha, self.answerability_level())

    def answerability_level(
        self, alpha: float | None = None, statistic: str | None = None
    ) -> float:
        """The level each test runs at when both share ``alpha`` (default: the
        calibration's); ``alpha`` itself without the answerability test."""
        return self.answers.level(alpha, statistic)

    def record_reading(self, reading: str | None) -> Guard:
        """Keep in the manifest the reading the conversations among the calibration queries
        were read with (self; None: standalone questions only): conversations are then
        checked with it by default (:meth:`ragbound.gate.Gate.load`)."""
        record_reading(self.calibration, reading)
        return self

    @property
    def reading(self) -> str | None:
        """The reading the calibration's conversations were read with (None: none held)."""
        return self.calibration.manifest.reading

    @property
    def calibration_id(self) -> str:
        """The calibration's id (every decision made with it records it)."""
        return self.calibration.manifest.id

    @property
    def questions(self) -> NullQuestions:
        """Where the calibration's questions came from (real, synthetic, how many)."""
        return self.calibration.manifest.questions

    def check_canaries(self) -> CanaryCheck:
        """Search the calibration's canaries again: the largest similarity move since
        calibration and whether the top rows changed (:mod:`ragbound.detect.canary`)."""
        return check_canaries(self.kb, self.calibration.manifest.canaries)

    def verify_canaries(self, *, force: bool = False) -> None:
        """Refuse (IncompatibleArtifactError) when the knowledge's similarities moved since
        calibration past the tolerance (a foreign store re-embedded, an endpoint serving
        another model), unless ``force``. Called at load, never per query."""
        verify_canaries(self.kb, self.calibration.manifest.canaries, force=force)
