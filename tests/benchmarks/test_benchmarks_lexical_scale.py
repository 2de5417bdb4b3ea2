"""benchmarks/lexical_scale.py: a small index measured for real, and its table."""

from __future__ import annotations

import pytest

from benchmarks import datasets, lexical_scale


def test_a_small_index_is_measured_and_tabled(monkeypatch):
    reason = datasets.missing_reason()
    if reason:
        pytest.skip(reason)
    monkeypatch.setattr(lexical_scale, "LATENCY_QUERIES", 5)
    monkeypatch.setattr(lexical_scale, "CACHE_CHUNKS", 50)
    row = lexical_scale.measure(500)
    assert row["n_chunks"] == 500 and row["vocabulary"] > 1000
    assert row["peak_mb"] >= row["peak_before_mb"] > 0
    assert 0 < row["search_p50_ms"] <= row["search_p99_ms"]
    assert 0 < row["cache_kb_ids"] < row["cache_kb_sets"]  # ids take less than string sets
    lines = lexical_scale.lexical_markdown({"lexical-scale": {"rows": [row], "threads": "1"}})
    assert any(line.startswith("| 500 |") for line in lines)
    assert lexical_scale.lexical_markdown({}) == []


def test_sizes_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("BENCH_LEXICAL_CHUNKS", "10, 20")
    assert lexical_scale._sizes() == [10, 20]
    for bad in ("", "abc", "0", "-5"):
        monkeypatch.setenv("BENCH_LEXICAL_CHUNKS", bad)
        with pytest.raises(SystemExit, match="BENCH_LEXICAL_CHUNKS"):
            lexical_scale._sizes()
