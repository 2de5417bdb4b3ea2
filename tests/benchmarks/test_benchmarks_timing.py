"""benchmarks/timing.py: two calls timed in pairs (the attached part's LangChain latency)."""

from __future__ import annotations

from benchmarks.timing import paired_latency


def test_paired_latency_times_both_calls_on_every_query() -> None:
    seen: list[tuple[str, str]] = []
    part = paired_latency(
        lambda q: seen.append(("bare", q)), lambda q: seen.append(("guarded", q)), ["a", "b"]
    )
    assert seen[2:] == [("bare", "a"), ("guarded", "a"), ("bare", "b"), ("guarded", "b")]
    assert part["n"] == 2 and part["bare_p50_ms"] >= 0 and part["ratio_p50"] > 0
    assert set(part) >= {"bare_p99_ms", "guarded_p50_ms", "guarded_p99_ms", "extra_p50_ms"}
