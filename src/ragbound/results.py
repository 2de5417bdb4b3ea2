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

    ``score`` is the test statistic (higher = more out-of-knowledge); ``p_value`` its
    right tail under the calibrated in-knowledge null; ``reject`` = p_value <= alpha, i.e.
    the query is judged out of the knowledge base's knowledge. ``critical_value`` is the
    score at and above which queries are rejected (None when no score can reach alpha
    with this many calibration queries).
    """

    query: str
    statistic: str
    score: float
    p_value: float
    reject: bool
    alpha: float
    critical_value: float | None
    k: int
    n_calibration: int
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
    """Metrics per statistic, averaged over ``runs`` balanced draws of ``samples`` each."""

    statistics: dict[str, StatisticMetrics]
    n_in_knowledge: int
    n_out_of_knowledge: int
    n_calibration: int
    samples: int
    runs: int
    seed: int
    alpha: float
    k: int
    kb_fingerprint: str
