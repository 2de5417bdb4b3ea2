"""The native-guard benchmark part: paired timing and its docs/benchmarks.md section."""

from __future__ import annotations

from benchmarks import native_guard
from benchmarks.run import SECTIONS


def test_paired_latency_times_both_calls_on_every_query() -> None:
    seen: list[tuple[str, str]] = []
    part = native_guard.paired_latency(
        lambda q: seen.append(("bare", q)), lambda q: seen.append(("guarded", q)), ["a", "b"]
    )
    assert seen[2:] == [("bare", "a"), ("guarded", "a"), ("bare", "b"), ("guarded", "b")]
    assert part["n"] == 2 and part["bare_p50_ms"] >= 0 and part["ratio_p50"] > 0
    assert set(part) >= {"bare_p99_ms", "guarded_p50_ms", "guarded_p99_ms", "extra_p50_ms"}


def test_the_section_renders_the_saved_part() -> None:
    part = {"n_chunks": 51, "n_calibration": 120, "k": 4, "context_k": 4, "n": 180}
    part |= {"bare_p50_ms": 20.0, "bare_p99_ms": 30.0, "guarded_p50_ms": 20.5}
    part |= {"guarded_p99_ms": 31.0, "ratio_p50": 1.025, "extra_p50_ms": 0.5}
    title, render = SECTIONS["native-guard"]
    text = "\n".join(render({"native_guard": part}))
    assert "| `GatedVectorStoreRetriever` | 20.50 | 31.00 | 1.025 (target <= 1.05) |" in text
    assert "extra time of the guard: 0.50 ms" in text and "vector store" in title
    assert render({}) == []
