"""benchmarks/near_synth.py: its table over splits (no LLM, no data)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import near_synth
from benchmarks.near import NEAR_SETS, Split
from benchmarks.near_synth import (
    REAL,
    REAL_SAMPLE,
    SYNTHETIC,
    markdown,
    real_check,
    summary_table,
)
from ragbound.detect import Guard
from ragbound.knowledge import KnowledgeBase
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE, TOPICS


def row(source: str, statistic: str, n: int, fpr: float, flagged: float, auc: float) -> dict:
    return {
        "source": source,
        "statistic": statistic,
        "n": n,
        "n_null": n // 2 if statistic == "combined" else n,
        "fpr": fpr,
        "flagged": flagged,
        "auroc": auc,
    }


def split(seed: int, shift: float) -> dict:
    return {
        "seed": seed,
        "generation": {"seconds": 12.0, "report": {"kept": 100, "requested": 130}},
        "rows": [
            row(REAL, "mss", 340, 0.05, 0.10 + shift, 0.65),
            row(REAL, "combined", 340, 0.04, 0.40 + shift, 0.85),
            row(REAL_SAMPLE, "mss", 100, 0.06, 0.12, 0.65),
            row(SYNTHETIC, "mss", 100, 0.02, 0.05, 0.65)
            | {"check": {"warns": True, "warn_rates": {"20": 0.9, "50": 1.0}}},
            {"source": SYNTHETIC, "statistic": "combined", "n": 5, "error": "needs at least 6"},
        ],
    }


def test_one_split_shows_its_values_and_the_difference_to_the_real_half():
    header, table = summary_table([split(0, 0.0)])
    assert len(header) == 9 and header[2:4] == ["n (null)", "held-out FPR"]
    rows = {(r[0], r[1]): r for r in table}
    assert rows[REAL, "combined"][2:] == ["340 (170)", "0.040", "0.400", "0.850", "", "", ""]
    assert rows[SYNTHETIC, "mss"][3:] == [
        "0.020",
        "0.050",
        "0.650",
        "-0.050",
        "+0.000",
        "1/1 warn; 0.90 / 1.00",
    ]
    assert rows[REAL_SAMPLE, "mss"][6] == "+0.020"
    # a calibration refused for too few questions says why instead of numbers
    assert rows[SYNTHETIC, "combined"][3] == "refused: needs at least 6"


def test_several_splits_give_mean_and_spread():
    _, table = summary_table([split(0, 0.0), split(1, 0.1)])
    rows = {(r[0], r[1]): r for r in table}
    assert rows[REAL, "mss"][4] == "0.150 ± 0.050"
    # the synthetic rows' difference is per split: 0.05 - 0.10 and 0.05 - 0.20
    assert rows[SYNTHETIC, "mss"][6] == "-0.100 ± 0.050"
    assert len(table) == 5


def test_markdown_names_the_generation_and_the_seeds():
    text = markdown({"alpha": 0.05, "n": 100, "splits": [split(0, 0.0), split(1, 0.0)]})
    assert "seeds 0, 1" in text
    assert "seed 1: 100 kept of 130 calls in 12 s" in text
    assert text.count(f"| {SYNTHETIC} |") == 2


def test_seeds_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("BENCH_NEAR_SYNTH_SEEDS", "0, 3")
    assert near_synth._seeds() == [0, 3]
    monkeypatch.delenv("BENCH_NEAR_SYNTH_SEEDS")
    assert near_synth._seeds() == [0]


def test_the_real_question_check_warns_on_calibration_queries_that_copy_the_documents(
    corpus_dir: Path,
):
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    sentences = [s for texts in TOPICS.values() for s in texts]
    halves = [" ".join(s.split()[: len(s.split()) // 2]) for s in sentences]
    guard = Guard.calibrate(kb, sentences * 2 + halves, k=3)
    check = real_check(guard, IN_KNOWLEDGE + MORE_IN_KNOWLEDGE)
    assert check["warns"] and check["n_first"] == 20
    assert list(check["warn_rates"]) == ["20"]  # 28 real questions: no draws of 50
    assert check["warn_rates"]["20"] > 0.5 and check["pool_fpr"] > 0.05


def test_null_rows_learn_from_every_source_question_and_draw_real_nulls(
    corpus_dir: Path, monkeypatch
):
    monkeypatch.setattr(near_synth, "N_EXAMPLES", 5)
    monkeypatch.setattr(near_synth, "CHECK_SIZES", (4, 50))
    monkeypatch.setattr(near_synth, "CHECK_DRAWS", 10)
    monkeypatch.setattr(near_synth, "NULL_STATISTICS", ("combined",))
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    synthetic = [s for texts in TOPICS.values() for s in texts][:6]
    split = Split(kb, MORE_IN_KNOWLEDGE, IN_KNOWLEDGE, {NEAR_SETS[0]: OUT_OF_KNOWLEDGE})
    rows = {r["source"]: r for r in near_synth.null_rows(split, synthetic, seed=0)}
    assert list(rows) == [REAL_SAMPLE, SYNTHETIC]
    # the real sample learns from 6 of the 11 non-example questions; its draws use the other 5
    assert rows[REAL_SAMPLE]["n_learning"] == 6 and rows[SYNTHETIC]["n_learning"] == 6
    for found in rows.values():
        assert list(found["draws"]) == ["4"]  # no draw of 50 from a pool of 5 or 11
        draws = found["draws"]["4"]
        assert 0 <= draws["fpr_mean"] <= 1 and draws["fpr_std"] >= 0
        assert 0 <= found["examples"]["fpr"] <= 1 and found["picked"] == "combined"
    header, table = near_synth.null_table([{"null_rows": list(rows.values())}])
    assert header[3] == "null: the 5 examples, FPR / flagged" and len(table) == 2
    assert table[1][0] == SYNTHETIC and table[1][4].count("(") == 2 and table[1][5] == ""
