"""Typed results. They serialise to the same JSON in the API, the CLI (--json) and HTTP."""

from __future__ import annotations

import math

from pydantic import BaseModel, Field, field_serializer


class Neighbour(BaseModel):
    """One retrieved chunk behind a verdict: the evidence a user can read."""

    rank: int = Field(description="1 = nearest")
    chunk_id: str
    doc_id: str
    source: str
    similarity: float = Field(description="higher = closer (cosine, or BM25 score)")
    text: str = Field(description="the chunk text, cut to a preview")


class Verdict(BaseModel):
    """The online out-of-knowledge test for one query.

    ``score`` is the test statistic (higher = more out-of-knowledge); ``p_value`` its right
    tail under the calibrated in-knowledge null. ``critical_value`` is the score at and above
    which queries are out of knowledge (None when no score can reach alpha with this many
    calibration queries).
    """

    query: str
    statistic: str
    score: float
    p_value: float
    out_of_knowledge: bool = Field(description="p_value <= alpha")
    alpha: float
    critical_value: float | None
    k: int
    n_calibration: int = Field(description="calibration queries behind the p-value")
    approximate: bool = Field(
        default=False,
        description="p-values approximate: no real questions (the calibration's null holds "
        "synthetic questions alone)",
    )
    neighbours: list[Neighbour] = Field(default_factory=list)

    @field_serializer("critical_value")
    def _finite_or_none(self, value: float | None) -> float | None:
        return None if value is None or not math.isfinite(value) else value


class StatisticMetrics(BaseModel):
    """Detection quality of one statistic on balanced in/out samples (paper protocol).

    ``tpr_at_5_fpr`` and ``der`` use the critical value calibrated at alpha = 0.05 (what a
    deployment gets); ``fpr`` is the false-positive rate that threshold really gave on the
    in-knowledge test queries; ``tpr_at_5_fpr_oracle`` sets the threshold on the test
    queries themselves (the ROC operating point, an upper bound).
    """

    auroc: float
    auroc_std: float
    auprc: float
    auprc_std: float
    tpr_at_5_fpr: float
    tpr_at_5_fpr_std: float
    der: float
    der_std: float
    fpr: float
    tpr_at_5_fpr_oracle: float


class EvaluationReport(BaseModel):
    """Metrics per statistic, averaged over ``runs`` draws of ``drawn_in`` in-knowledge and
    ``drawn_out`` out-of-knowledge queries: ``samples`` (the size asked) from each side, or
    the whole side when it is smaller. When both draws take every query, one run is made."""

    statistics: dict[str, StatisticMetrics]
    n_in_knowledge: int
    n_out_of_knowledge: int
    n_calibration: int
    samples: int = Field(description="queries asked for per side and draw")
    drawn_in: int = Field(description="in-knowledge queries in each draw")
    drawn_out: int = Field(description="out-of-knowledge queries in each draw")
    runs: int = Field(description="draws made (1 when each draw takes every query)")
    seed: int
    alpha: float
    k: int
    kb_fingerprint: str
    default_statistic: str = Field(description="the statistic calibrate uses unless told otherwise")

    def ordered(self) -> list[str]:
        """The statistics' names, the default first, then the others alphabetically."""
        rest = sorted(name for name in self.statistics if name != self.default_statistic)
        first = [self.default_statistic] if self.default_statistic in self.statistics else []
        return [*first, *rest]

    def label(self, name: str) -> str:
        """``name`` for a table: marked ``(default)`` when it is the default statistic."""
        return f"{name} (default)" if name == self.default_statistic else name

    def draws(self) -> str:
        """The sample behind the numbers, in words (for tables and reports)."""
        if self.drawn_in == self.n_in_knowledge and self.drawn_out == self.n_out_of_knowledge:
            return (
                f"one run on every query ({self.drawn_in} in-knowledge, {self.drawn_out} "
                "out-of-knowledge)"
            )
        runs = f"{self.runs} run{'s' if self.runs != 1 else ''}"
        if self.drawn_in == self.drawn_out:
            return f"{runs} x {self.drawn_in} per side"
        return f"{runs} x {self.drawn_in} in-knowledge and {self.drawn_out} out-of-knowledge"


class EvaluationInputs(BaseModel):
    """What an evaluation ran on, as recorded in its run folder: paths as they were given
    (empty when not known, e.g. knowledge the user's own retriever holds)."""

    knowledge_base: str = Field(description="folder of the knowledge base (empty: not saved)")
    corpus: list[str] = Field(description="the files or folders the knowledge base was built from")
    calibration: str = Field(description="where the calibration questions came from")
    in_knowledge: str = Field(description="file of the in-knowledge test questions")
    out_of_knowledge: str = Field(description="file of the out-of-knowledge test questions")
    embedder: str = Field(description="the embedder's name")
    evaluated_at: str = Field(description="ISO 8601 UTC time of the evaluation")


class ShiftReport(BaseModel):
    """One two-sample test of a batch of queries against the calibration queries.

    ``statistic`` is the KS distance (sup |F_ref - F_test|, in [0, 1]) or the unbiased
    squared MMD; ``p_value`` its p-value (KS: scipy's exact or asymptotic; MMD: permutation,
    counting the observed value); ``shifted`` = p_value <= alpha: the batch does not come
    from the calibration queries' distribution. For KS, ``critical_value`` is the smallest
    statistic that counts as a shift (same distribution as the p-value, so shifted =
    statistic >= critical_value); the paper's large-sample sqrt(-ln(alpha/2) (n+m) / (2nm))
    is :func:`ragbound.stats.ks_critical_value`. None when the batch is too small for any
    statistic to reach alpha.
    """

    test: str
    score_statistic: str | None = Field(description="the per-query statistic KS compares")
    statistic: float
    p_value: float
    alpha: float
    shifted: bool = Field(description="p_value <= alpha")
    critical_value: float | None = None
    n_reference: int
    n_test: int
    method: str = Field(description="exact, asymp or permutation")
    kb_fingerprint: str


class SyntheticCheck(BaseModel):
    """How far the calibration queries sit from real user questions, on the detector's scores
    (higher = more out-of-knowledge) of both sets; saved with a calibration made with
    ``calibrate --real-queries``.

    Two tests, each at ``level / 2`` so a false warning has probability <= ``level``: KS on the
    whole distribution (``ks_statistic``, ``p_value``) and the exceedance test
    (``exceedance_p_value``: do more real questions reach the calibrated critical value than
    the calibration allows, ``expected_fpr`` at most?). ``differ`` = either finds a difference.
    ``real_fpr`` is the share of the real questions whose score reaches the critical value at
    ``alpha``: about alpha when the calibration queries look like real ones; far below (real
    questions sit closer to the corpus) it costs power, far above it raises false alarms.
    """

    synthetic: bool = Field(description="the calibration queries came from ragbound synth")
    real_source: str
    n_calibration: int
    n_real: int
    score_statistic: str
    ks_statistic: float
    p_value: float = Field(description="the KS test's p-value")
    level: float
    differ: bool
    median_calibration: float
    median_real: float
    alpha: float
    critical_value: float
    real_fpr: float
    exceedance_p_value: float = Field(
        description="one-sided: too many real questions reach the critical value"
    )
    expected_fpr: float = Field(
        description="the largest share of real questions reaching it if alike"
    )
    prompt_ids: list[str] = Field(default_factory=list)
    contexts: list[str] = Field(default_factory=list)


class WindowResult(BaseModel):
    """One tested window. ``start``/``end`` are ISO 8601 UTC times of its first and last
    query; ``alarm`` = p_value <= alpha, where alpha is this window's level after the
    false-alarm correction."""

    window: int = Field(description="0-based window counter over the whole stream")
    start: str
    end: str
    first_line: int
    last_line: int
    n: int
    statistic: float = Field(description="KS distance to the calibration queries, in [0, 1]")
    p_value: float
    alpha: float
    alarm: bool
    critical_value: float | None = Field(
        description="the smallest KS distance that raises an alarm at this window's alpha "
        "(same distribution as the p-value); None when no distance can reach it"
    )
    score_statistic: str
