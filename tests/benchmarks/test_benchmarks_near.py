"""The near out-of-knowledge benchmark's scoring, its score hook and its table."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import near
from ragbound.corpus import Document
from ragbound.corpus.units import unit_params
from ragbound.knowledge import KnowledgeBase
from ragbound.stats import auroc
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE, TOPICS

NEAR = near.NEAR_SETS[0]


def test_quality_uses_conformal_p_values_at_alpha():
    cal = np.arange(19.0)  # 19 calibration scores: a score above all has p = 1/20 = 0.05
    inside = np.array([0.5, 18.5, 30.0, 2.0])  # p = 19/20, 1/20, 1/20, 17/20
    outside = np.array([30.0, 30.0, 1.0, 18.0])  # p = 1/20, 1/20, 18/20, 2/20
    result = near.quality(cal, inside, outside)
    assert result["fpr"] == pytest.approx(2 / 4)
    assert result["flagged"] == pytest.approx(2 / 4)
    assert result["auroc"] == pytest.approx(auroc(inside, outside))


@pytest.fixture
def split() -> near.Split:
    docs = [
        Document(id=topic, text=" ".join(sentences), source=topic)
        for topic, sentences in TOPICS.items()
    ]
    kb = KnowledgeBase.from_documents(docs, embedder="bm25", units=unit_params("sentence", 3))
    half = len(IN_KNOWLEDGE) // 2
    return near.Split(kb, IN_KNOWLEDGE[:half], IN_KNOWLEDGE[half:], {NEAR: OUT_OF_KNOWLEDGE})


def test_statistic_rows_cover_every_statistic_and_the_table_shows_mean_and_spread(
    split: near.Split, monkeypatch
):
    monkeypatch.setattr(near, "K_MAX", 2)
    monkeypatch.setattr(near, "STATISTICS", (("mss", 1), ("avgknn", 2)))
    rows: dict = {}
    for _ in range(2):
        near.collect(rows, near.statistic_rows(split, "sentence"))
    assert list(rows) == ["sentence mss", "sentence avgknn k=2"]
    assert len(rows["sentence mss"][NEAR]["auroc"]) == 2
    header, table = near.quality_table({"rows": rows})
    assert header[0] == "row" and len(table) == 2
    value = rows["sentence mss"][NEAR]["auroc"][0]
    assert table[0][header.index("MMLU-Med AUROC")] == ""
    assert table[0][header.index("COVID-QA AUROC")] == f"{value:.3f} ± 0.000"


def test_an_ablation_dropping_nothing_is_the_combined_row(split: near.Split, monkeypatch):
    monkeypatch.setattr(near, "ABLATIONS", {"all": (), "no gap": ("document_gap",)})
    monkeypatch.setattr(near, "LEARNED", ("combined",))
    split = near.Split(split.kb, IN_KNOWLEDGE, IN_KNOWLEDGE[:6], split.outside)
    rows = near.ablation_rows(split)
    combined = near.learned_rows(split, {})["combined"][NEAR]
    assert list(rows) == ["all", "no gap"]
    for metric in ("auroc", "flagged", "fpr"):
        assert rows["all"][NEAR][metric] == pytest.approx(combined[metric])
