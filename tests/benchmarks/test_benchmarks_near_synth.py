"""benchmarks/near_synth.py: its table over splits (no LLM, no data)."""

from __future__ import annotations

from benchmarks import near_synth
from benchmarks.near_synth import REAL, REAL_SAMPLE, SYNTHETIC, markdown, summary_table


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
            row(SYNTHETIC, "mss", 100, 0.02, 0.05, 0.65) | {"check_p": 0.01, "check_warns": True},
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
        "0.010 (1/1 warn)",
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
