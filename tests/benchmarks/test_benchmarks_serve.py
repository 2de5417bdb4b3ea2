"""The serve benchmark's arithmetic and verdicts (benchmarks/serve.py); no server, no timing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.serve import (
    TARGETS,
    Target,
    cores_used,
    fsync_p50_ms,
    growth_pct,
    interleave,
    level_summary,
    measures,
    one_client_floor,
    parse_options,
    percentile,
    ratio,
    serve_markdown,
    split_count,
    target_rows,
    verdict,
)


def setting(
    label: str,
    levels: dict,
    decide_p50: float,
    memory: dict | None = None,
    embed_per_s: float | None = None,
    embed_sorted_per_s: float | None = None,
) -> dict:
    decide = level_summary([decide_p50], 1.0, 0)
    return {
        "label": label,
        "decide": decide,
        "levels": levels,
        "memory": memory,
        "embed_per_s": embed_per_s,
        "embed_sorted_per_s": embed_sorted_per_s,
    }


def test_a_level_summary_is_percentiles_of_the_answered_and_throughput_over_wall_time() -> None:
    # 1..100 ms: numpy's linear p50 of 100 values is (50 + 51) / 2, p99 is 99 + 0.01
    summary = level_summary([float(ms) for ms in range(1, 101)], seconds=4.0, errors=3)
    assert summary == {
        "requests": 103,
        "p50_ms": 50.5,
        "p99_ms": pytest.approx(99.01),
        "throughput_per_s": 25.0,
        "errors": 3,
    }


def test_nothing_answered_has_no_percentiles_and_a_zero_throughput() -> None:
    summary = level_summary([], seconds=2.0, errors=5)
    assert summary["p50_ms"] is None and summary["p99_ms"] is None
    assert summary["throughput_per_s"] == 0.0 and summary["requests"] == 5


def test_ratio_and_growth() -> None:
    assert ratio(23.0, 20.0) == pytest.approx(1.15)
    assert ratio(None, 20.0) is None and ratio(3.0, None) is None and ratio(3.0, 0.0) is None
    assert growth_pct(400.0, 410.0) == pytest.approx(2.5)
    assert growth_pct(400.0, 380.0) == pytest.approx(-5.0)


@given(st.lists(st.floats(0, 1e4), min_size=1, max_size=50))
def test_the_p50_lies_between_the_extremes_and_below_the_p99(values: list[float]) -> None:
    p50, p99 = percentile(values, 50), percentile(values, 99)
    assert p50 is not None and p99 is not None
    assert min(values) <= p50 <= p99 <= max(values)


def test_verdicts_follow_each_targets_direction_and_the_bound_itself_passes() -> None:
    at_most, at_least = Target("a", "a", "<=", 1.15), Target("b", "b", ">=", 3.0)
    strictly_below = Target("c", "c", "<", 5.0)
    assert [verdict(v, at_most) for v in (1.15, 1.16)] == ["pass", "fail"]
    assert [verdict(v, at_least) for v in (3.0, 2.99)] == ["pass", "fail"]
    assert [verdict(v, strictly_below) for v in (4.99, 5.0)] == ["pass", "fail"]
    assert verdict(None, at_most) == ""


def test_the_measures_are_the_issues_ratios_of_one_setting() -> None:
    levels = {
        "1": level_summary([20.0, 24.0, 28.0], seconds=0.072, errors=0),  # p50 24, 41.7/s
        "16": level_summary([100.0, 300.0], seconds=0.01, errors=2),  # 200/s
    }
    memory = {"growth_pct": 1.5}
    got = measures(setting("1", levels, decide_p50=20.0, memory=memory))
    assert got["http1_over_decide_p50"] == pytest.approx(1.2)
    assert got["throughput16_over_1"] == pytest.approx(200 / (3 / 0.072))
    assert got["p99_16_ms"] == pytest.approx(298.0)
    assert got["errors_16"] == 2
    assert got["rss_growth_pct"] == 1.5
    assert got["gateway_over_decide_p50"] is None  # not benchmarked yet


def test_the_targets_table_has_a_column_pair_per_setting_and_skips_unmeasured_rows() -> None:
    levels = {
        "1": level_summary([10.0], seconds=0.01, errors=0),  # 100/s
        "16": level_summary([50.0] * 4, seconds=0.01, errors=0),  # 400/s
    }
    memory = {"growth_pct": 7.0}
    primary = setting("1 thread", levels, 10.0, memory, embed_per_s=500.0, embed_sorted_per_s=800)
    other = setting("2 workers x 1 thread", levels, decide_p50=5.0, embed_per_s=400.0)
    table = target_rows([primary, other])
    rows = {row[0]: row[2:] for row in table}
    assert len(rows) == len(TARGETS) - 1  # no gateway row
    assert rows["one client: HTTP p50 / in-process decide p50"] == ["1", "pass", "2", "fail"]
    assert rows["16 clients: throughput / one client's"] == ["4", "pass", "4", "pass"]
    batches = "16 clients: throughput / bare embedding, batches of 16 as they came"
    assert rows[batches] == ["0.8", "fail", "1", "pass"]
    # the offline ceiling is printed, never judged; unmeasured for the second setting
    offline = next(row for row in table if "sorted by length" in row[0])
    assert offline[1:] == ["none", "0.5", "", "", ""]
    assert rows["RSS growth over the memory run, %"] == ["7", "fail", "", ""]


def test_the_markdown_names_every_setting_level_and_the_memory_run() -> None:
    levels = {
        "1": level_summary([10.0], 0.01, 0) | {"paired_ratio_p50": 1.234},
        "16": level_summary([50.0], 0.01, 1),
    }
    memory = {
        "requests": 2000,
        "clients": 64,
        "seconds": 20.0,
        "errors": 0,
        "rss_mb": [400.0, 402.0, 404.0],
        "rss_before_mb": 400.0,
        "rss_after_mb": 404.0,
        "growth_pct": 1.0,
        "second_half_growth_pct": 0.5,
    }
    part = {
        "kb": "a test KB",
        "query_mix": {"A": 2, "B": 1},
        "actions": {"answer": 0.5, "abstain": 0.25, "reject": 0.25},
        "settings": [
            setting("1 thread", levels, 8.0, memory, embed_per_s=120.0, embed_sorted_per_s=160),
            setting("2 workers x 1 thread", levels, 9.0, embed_per_s=150.0, embed_sorted_per_s=200),
        ],
    }
    text = "\n".join(serve_markdown(part))
    assert "| 2 workers x 1 thread | 16 | 2 | 50.0 | 50.0 | 100.0 | 1 |" in text
    assert "| 1 thread | in-process decide | 1 | 8.0 | 8.0 |  |  |" in text
    assert "2,000 `/v1/decide` requests from 64 clients" in text
    assert "after each tenth: 402, 404 MB; growth over the second half 0.5%" in text
    assert "answer 50%, abstain 25%, reject 25%" in text
    assert "1 thread: 1.23; 2 workers x 1 thread: 1.23." in text
    assert "1 thread: 120.0 and 160.0; 2 workers x 1 thread: 150.0 and 200.0." in text


def test_one_client_s_floor_adds_decide_an_empty_round_trip_and_an_fsync(tmp_path) -> None:
    levels = {"1": level_summary([10.0], 0.01, 0) | {"healthz_p50_ms": 0.8}}
    primary = setting("1 thread", levels, 8.0) | {"fsync_p50_ms": 0.25}
    (blank, sentence) = one_client_floor(primary)
    assert blank == ""
    assert "p50 0.80 ms; an append" in sentence and "disk p50 0.25 ms" in sentence
    assert "8.0 ms that is 9.1 ms, 1.13 x decide" in sentence
    assert one_client_floor(setting("1 thread", {"1": level_summary([10.0], 0.01, 0)}, 8.0)) == []
    assert 0 < fsync_p50_ms(tmp_path) < 1000 and not list(tmp_path.iterdir())


def test_the_cores_each_side_used_at_16_clients_are_named_per_setting() -> None:
    busy = level_summary([50.0], 0.01, 0) | {"server_cores": 1.234, "client_cores": 0.2}
    one = setting("1 thread", {"16": busy}, 8.0)
    other = setting("2 workers x 1 thread", {"16": level_summary([50.0], 0.01, 0)}, 8.0)
    (blank, sentence) = cores_used([one, other])
    assert blank == "" and "1 thread: the service 1.23, the clients 0.20." in sentence
    assert "2 workers" not in sentence  # not measured there
    assert cores_used([other]) == []


@pytest.mark.parametrize(
    ("total", "parts", "expected"),
    [(10, 3, [4, 3, 3]), (2000, 10, [200] * 10), (3, 10, [1, 1, 1]), (5, 1, [5])],
)
def test_the_memory_run_is_split_into_near_equal_segments(
    total: int, parts: int, expected: list[int]
) -> None:
    assert split_count(total, parts) == expected


def test_interleave_keeps_every_query_in_a_seeded_order() -> None:
    sets = {"a": [f"a{i}" for i in range(20)], "b": ["b0", "b1"]}
    pool = interleave(sets, seed=3)
    assert sorted(pool) == sorted(sets["a"] + sets["b"])
    assert pool == interleave(sets, seed=3) != interleave(sets, seed=4)


def test_options_come_from_the_command_line_over_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("BENCH_SERVE_REQUESTS", "2000")
    monkeypatch.setenv("BENCH_SERVE_THREADS", "2")
    options = parse_options(["--per-level", "50"])
    assert (options.requests, options.per_level, options.threads) == (2000, 50, 2)
    assert parse_options(["--requests", "0", "--threads", "2"]).requests == 0
    for bad in (["--threads", "0"], ["--threads", "many"], ["--per-level", "0"]):
        with pytest.raises(SystemExit):
            parse_options(bad)
