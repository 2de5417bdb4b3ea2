"""The approx benchmark's table: one per statistic, AUROC next to the exact row's."""

from __future__ import annotations

from benchmarks.approx import approx_markdown


def _row(search: str, auroc: float, fpr: float) -> dict:
    row = {"search": search, "calibrated_with": "same", "recall": 0.9, "check_p50_ms": 20.0}
    row["embed_p50_ms"] = 10.0
    for statistic in ("mss", "avgknn"):
        row[f"fpr_{statistic}"] = fpr
        row[f"fpr_splits_{statistic}"] = fpr + 0.001
        row[f"auroc_{statistic}_TruthfulQA"] = auroc
    return row


def test_one_table_per_statistic_with_differences_to_exact():
    part = {
        "n_chunks": 10, "k": 4, "alpha": 0.05, "n_calibration": 5, "n_ik_test": 5,
        "omp_threads": "1", "splits": 20, "statistics": ["mss", "avgknn"], "ook": ["TruthfulQA"],
        "rows": [_row("exact", 0.99, 0.04), _row("HNSW", 0.98, 0.07)],
    }  # fmt: skip
    lines = approx_markdown({"approx": part})
    assert lines.count("**mss**") == 1 and lines.count("**avgknn**") == 1
    hnsw = [line for line in lines if line.startswith("| HNSW")]
    assert len(hnsw) == 2
    assert "| 0.070 | 0.071 | 0.9800 (-0.0100) | 20.0 (2.00) |" in hnsw[0]
    assert approx_markdown({}) == []
