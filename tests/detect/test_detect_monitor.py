"""Shift tests and the streaming monitor: windows, false-alarm control, resume, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragbound.detect import Guard
from ragbound.detect.monitor import (
    MonitorState,
    ShiftMonitor,
    WindowSpec,
    is_log,
    load_state,
    parse_time,
    read_log,
    save_state,
)
from ragbound.detect.shift import shift_test
from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.stats.spending import alpha_spending
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, MORE_OUT_OF_KNOWLEDGE, OUT_OF_KNOWLEDGE

CALIBRATION = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10]
HELD_OUT_IK = MORE_IN_KNOWLEDGE[10:]
OOK = OUT_OF_KNOWLEDGE + MORE_OUT_OF_KNOWLEDGE


@pytest.fixture(scope="module")
def guard(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Guard:
    kb_dir = tmp_path_factory.mktemp("monitor") / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(kb_dir)
    guard = Guard.calibrate(KnowledgeBase.load(kb_dir), CALIBRATION, k=4)
    guard.save()
    return guard


def write_log(path: Path, queries: list[str], start: float = 1_700_000_000.0, every: float = 10.0):
    with path.open("a", encoding="utf-8") as out:
        for i, query in enumerate(queries):
            out.write(json.dumps({"time": start + i * every, "query": query}) + "\n")


# ------------------------------------------------------------------ parsing
@pytest.mark.parametrize(
    ("text", "size", "seconds"),
    [("50", 50, None), ("15m", None, 900.0), ("1h", None, 3600.0), ("90s", None, 90.0)],
)
def test_windows_are_query_counts_or_durations(text: str, size, seconds) -> None:
    spec = WindowSpec.parse(text)
    assert (spec.size, spec.seconds) == (size, seconds)


@pytest.mark.parametrize("text", ["0", "-5", "abc", "0m", "1y", ""])
def test_a_bad_window_is_refused(text: str) -> None:
    with pytest.raises(InputError, match="window must be"):
        WindowSpec.parse(text)


def test_timestamps_are_iso_8601_or_epoch_seconds() -> None:
    assert parse_time("2026-01-01T00:00:00Z", "t") == 1767225600.0
    assert parse_time("2026-01-01T01:00:00+01:00", "t") == 1767225600.0
    assert parse_time("2026-01-01 00:00:00", "t") == 1767225600.0  # naive = UTC
    assert parse_time(1767225600, "t") == parse_time("1767225600.0", "t") == 1767225600.0
    for bad in ("yesterday", None, True, float("nan")):
        with pytest.raises(InputError, match=r"log\.jsonl:3"):
            parse_time(bad, "log.jsonl:3")
    assert parse_time(-1e10, "t") == -1e10  # the year 1653: early, but a time


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (1e20, "out of range"),
        (-1e20, "out of range"),
        (10**400, "not finite"),  # an int no float holds
        ("nan", "not finite"),
        ("-inf", "not finite"),
        ("9999-12-31T23:59:59-05:00", "out of range"),
        ("0001-01-01T00:00:00+05:00", "out of range"),
    ],
)
def test_timestamps_beyond_the_calendar_are_input_errors(value: object, says: str) -> None:
    with pytest.raises(
        InputError, match=rf"log\.jsonl:3 \(field 'time'\): the timestamp .* {says}"
    ):
        parse_time(value, "log.jsonl:3 (field 'time')")


def test_a_log_line_that_is_not_utf8_is_named_like_a_record_file(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    first, before_bad = b'{"time": 1, "query": "a b"}\n', b'{"time": 2, "query": "c '
    log.write_bytes(first + before_bad + b'\xe9 d"}\n')
    with pytest.raises(InputError) as caught:
        list(read_log(log))
    offset = len(first) + len(before_bad)  # of the bad byte in the file
    assert str(caught.value) == (
        f"{log}:2: not UTF-8 text (invalid byte 0xe9 at byte offset {offset}); "
        "re-encode the file as UTF-8"
    )


def test_the_log_reader_names_bad_lines_and_leaves_a_partial_last_line(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text('{"time": 1, "query": "a b"}\n\n{"time": 2, "query": "c d"}\n{"time": 3, "qu')
    records = list(read_log(log))
    assert [r.line for r, _ in records] == [1, 3]
    assert records[-1][1] == len('{"time": 1, "query": "a b"}\n\n{"time": 2, "query": "c d"}\n')
    log.write_text('{"time": 1, "query": "a b"}\n{"time": 2}\n')
    with pytest.raises(InputError, match=r"log\.jsonl:2 \(field 'query'\): missing"):
        list(read_log(log))
    log.write_text('{"query": "a b"}\n')
    with pytest.raises(InputError, match=r"log\.jsonl:1 \(field 'time'\): missing"):
        list(read_log(log))
    log.write_text('{"Time": 1, "query": "a b"}\n')
    with pytest.raises(InputError, match=r"\(field 'time'\): missing .*; did you mean 'Time'\?"):
        list(read_log(log))
    log.write_text("not json\n")
    with pytest.raises(InputError, match=r"log\.jsonl:1: not valid JSON"):
        list(read_log(log))
    log.write_text('{"when": 1, "text": "a b"}\n')
    assert [r.query for r, _ in read_log(log, time_field="when", query_field="text")] == ["a b"]
    assert is_log(log, "when") and not is_log(log, "time")


# ------------------------------------------------------------------ windows
def monitor_on_arrays(guard: Guard, window: WindowSpec, **kwargs) -> ShiftMonitor:
    monitor = ShiftMonitor(guard, window, **kwargs)
    monitor.reference = np.random.default_rng(0).normal(size=400)
    return monitor


def feed(monitor: ShiftMonitor, scores: np.ndarray, every: float = 1.0):
    state = MonitorState(log="x", kb_fingerprint="f", settings={})
    lines = np.arange(1, scores.size + 1)
    return monitor.feed_scores(state, lines, lines * every, scores), state


def test_tumbling_and_sliding_count_windows(guard: Guard) -> None:
    scores = np.random.default_rng(1).normal(size=120)
    tumbling, state = feed(monitor_on_arrays(guard, WindowSpec(size=50)), scores)
    assert [(w.first_line, w.last_line, w.n) for w in tumbling] == [(1, 50, 50), (51, 100, 50)]
    assert len(state.buffer) == 20 and state.windows == 2
    sliding, _ = feed(monitor_on_arrays(guard, WindowSpec(size=50), step=25), scores)
    assert [w.first_line for w in sliding] == [1, 26, 51]  # 76..125 is not full yet
    assert [w.window for w in sliding] == [0, 1, 2]


def test_time_windows_close_when_a_later_query_arrives(guard: Guard) -> None:
    scores = np.random.default_rng(2).normal(size=40)
    windows, state = feed(monitor_on_arrays(guard, WindowSpec(seconds=60.0)), scores, every=10.0)
    # queries at 10, 20, ..., 400 s: windows [10, 70), [70, 130), ... each hold 6 queries
    assert [w.n for w in windows] == [6] * 6
    assert windows[1].first_line == 7 and windows[1].last_line == 12
    assert len(state.buffer) == 4  # the open window [370, 430)


def test_sliding_time_windows_overlap_and_gaps_are_skipped(guard: Guard) -> None:
    monitor = monitor_on_arrays(guard, WindowSpec(seconds=60.0), step=30.0)
    scores = np.random.default_rng(5).normal(size=20)
    state = MonitorState(log="x", kb_fingerprint="f", settings={})
    times = np.concatenate([np.arange(10.0, 160.0, 10.0), 10_000.0 + np.arange(5) * 10.0])
    windows = monitor.feed_scores(state, np.arange(1, 21), times, scores)
    # [10, 70), [40, 100), [70, 130), [100, 160): 6 queries each, overlapping by half
    assert [(w.first_line, w.n) for w in windows[:4]] == [(1, 6), (4, 6), (7, 6), (10, 6)]
    assert all(w.last_line <= 15 for w in windows)  # the long gap made no empty windows
    assert state.window_start is not None and state.window_start <= 10_000.0


def test_a_shifted_stream_alarms_and_a_null_stream_does_not(guard: Guard) -> None:
    rng = np.random.default_rng(3)
    null, _ = feed(monitor_on_arrays(guard, WindowSpec(size=100)), rng.normal(size=1000))
    assert not any(w.alarm for w in null)
    shifted, _ = feed(monitor_on_arrays(guard, WindowSpec(size=100)), rng.normal(1.0, 1.0, 300))
    assert all(w.alarm for w in shifted) and all(w.p_value < 1e-6 for w in shifted)


def test_alpha_spending_keeps_false_alarms_over_a_whole_stream_below_alpha(guard: Guard) -> None:
    rng = np.random.default_rng(4)
    spending = monitor_on_arrays(guard, WindowSpec(size=30), alpha=0.1)
    plain = monitor_on_arrays(guard, WindowSpec(size=30), alpha=0.1, correction="none")
    streams, windows = 300, 20
    any_alarm = {"spending": 0, "none": 0}
    for _ in range(streams):
        scores = rng.normal(size=30 * windows)
        for name, monitor in (("spending", spending), ("none", plain)):
            results, _ = feed(monitor, scores)
            any_alarm[name] += any(w.alarm for w in results)
    # family-wise rate: <= alpha with spending (binomial slack), far above it without
    assert any_alarm["spending"] / streams <= 0.1 + 3 * np.sqrt(0.1 * 0.9 / streams)
    assert any_alarm["none"] / streams > 0.5
    assert sum(spending.window_alpha(i) for i in range(10_000)) < 0.1


def test_a_window_too_small_to_alarm_reports_no_critical_value_and_round_trips(
    guard: Guard,
) -> None:
    from ragbound.detect.monitor import WindowResult

    # 2 queries against 400 reference scores: the smallest p-value is about 1.2e-5
    monitor = monitor_on_arrays(guard, WindowSpec(size=2), alpha=1e-6, correction="none")
    windows, _ = feed(monitor, np.full(2, 10.0))
    assert windows[0].critical_value is None and not windows[0].alarm
    assert WindowResult.model_validate_json(windows[0].model_dump_json()) == windows[0]
    bigger, _ = feed(monitor_on_arrays(guard, WindowSpec(size=50)), np.full(50, 10.0))
    assert bigger[0].alarm and bigger[0].statistic >= bigger[0].critical_value


HOUR = 3600.0 * 470_000  # an hour boundary (UTC)


def test_period_restarts_the_spending_sequence_for_count_windows(guard: Guard) -> None:
    monitor = monitor_on_arrays(guard, WindowSpec(size=10), correction="period", period="1h")
    state = MonitorState(log="x", kb_fingerprint="f", settings={})
    times = HOUR - 1800.0 + np.arange(0.0, 7200.0, 60.0)  # one query a minute for two hours
    windows = monitor.feed_scores(state, np.arange(1, 121), times, np.zeros(120))
    # a window belongs to the hour of its first query: 3 start before the boundary, 6 in the
    # next hour, 3 in the one after
    ranks = [0, 1, 2, 0, 1, 2, 3, 4, 5, 0, 1, 2]
    assert [w.alpha for w in windows] == [alpha_spending(0.05, j) for j in ranks]
    assert (state.period_key, state.period_tested) == (470_001, 3)
    spending = monitor_on_arrays(guard, WindowSpec(size=10))
    assert monitor.window_alpha(1000, 0) > 1e5 * spending.window_alpha(1000)


def test_period_splits_alpha_evenly_over_time_windows(guard: Guard) -> None:
    monitor = monitor_on_arrays(guard, WindowSpec(seconds=600.0), correction="period", period="1h")
    assert monitor.period_windows == 7  # at most 7 starts 10 minutes apart fit in an hour
    state = MonitorState(log="x", kb_fingerprint="f", settings={})
    times = HOUR - 1800.0 + np.arange(0.0, 7200.0, 60.0)
    windows = monitor.feed_scores(state, np.arange(1, 121), times, np.zeros(120))
    assert len(windows) == 11 and {w.alpha for w in windows} == {0.05 / 7}
    assert (state.period_key, state.period_tested) == (470_001, 2)  # starts at :00 and :10
    sliding = monitor_on_arrays(
        guard, WindowSpec(seconds=600.0), step=300.0, correction="period", period="1h"
    )
    many = np.arange(0.0, 6 * 3600.0, 20.0)
    windows, _ = feed(sliding, np.zeros(many.size), every=20.0)
    assert {w.alpha for w in windows} == {0.05 / 13} and len(windows) == 6 * 12 - 2


def test_period_keeps_false_alarms_per_period_below_alpha(guard: Guard) -> None:
    rng = np.random.default_rng(7)
    monitor = monitor_on_arrays(
        guard, WindowSpec(seconds=60.0), alpha=0.2, correction="period", period="5m"
    )
    streams, periods = 100, 6
    alarmed_periods = 0
    for _ in range(streams):
        # a query every 2 s from t = 2 s: windows start at 2, 62, ..., five per 5 minutes
        results, _ = feed(monitor, rng.normal(size=150 * periods + 1), every=2.0)
        assert len(results) == 5 * periods
        alarmed_periods += len({w.window // 5 for w in results if w.alarm})
    rate = alarmed_periods / (streams * periods)
    assert rate <= 0.2 + 3 * np.sqrt(0.2 * 0.8 / (streams * periods))


def test_arl_tests_every_window_at_one_over_arl(guard: Guard) -> None:
    monitor = monitor_on_arrays(guard, WindowSpec(size=30), correction="arl", arl=20)
    results, _ = feed(monitor, np.random.default_rng(8).normal(size=30 * 3000))
    assert {w.alpha for w in results} == {0.05}
    rate = np.mean([w.alarm for w in results])
    # false alarms per window <= 1 / arl (KS p-values are conservative), binomial slack
    assert 0.01 < rate <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / len(results))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"correction": "bonferroni"}, "unknown correction"),
        ({"correction": "period"}, "needs a period"),
        ({"correction": "period", "period": "0"}, "period must be"),
        ({"correction": "period", "period": "96"}, "period must be a duration"),
        ({"correction": "period", "period": "1y"}, "period must be"),
        ({"period": "1d"}, "period is used only with correction 'period'"),
        ({"correction": "arl"}, "needs arl"),
        ({"correction": "arl", "arl": 1.0}, "arl must be"),
        ({"correction": "arl", "arl": float("nan")}, "arl must be"),
        ({"correction": "none", "arl": 100}, "arl is used only"),
        ({"alpha": 1.5}, "alpha must be"),
    ],
)
def test_bad_corrections_are_refused_naming_the_option(guard: Guard, kwargs, message) -> None:
    with pytest.raises(InputError, match=message):
        ShiftMonitor(guard, WindowSpec(size=10), **kwargs)


# --------------------------------------------------------------- real logs
def test_the_monitor_resumes_where_it_stopped_and_flags_the_shift(
    guard: Guard, tmp_path: Path
) -> None:
    log, state_path = tmp_path / "queries.jsonl", tmp_path / "state.json"
    write_log(log, HELD_OUT_IK)  # 6 in-knowledge queries
    monitor = ShiftMonitor(guard, WindowSpec(size=6), correction="none")
    first = list(monitor.follow(log, state_path))
    assert len(first) == 1 and not first[0].alarm and first[0].last_line == 6
    write_log(log, OOK[:12], start=1_700_001_000.0)
    second = list(monitor.follow(log, state_path))
    assert [w.window for w in second] == [1, 2]
    assert second[0].first_line == 7  # nothing re-read
    assert all(w.alarm for w in second)
    assert list(monitor.follow(log, state_path)) == []  # nothing new
    assert load_state(state_path).windows == 3


def test_an_interrupted_run_repeats_at_most_a_window_and_never_loses_one(
    guard: Guard, tmp_path: Path
) -> None:
    log, state_path = tmp_path / "queries.jsonl", tmp_path / "state.json"
    write_log(log, (HELD_OUT_IK + OOK)[:18])
    monitor = ShiftMonitor(guard, WindowSpec(size=3), correction="none")
    seen = []
    for window in monitor.follow(log, state_path):
        seen.append(window.window)
        if len(seen) == 2:
            break  # the process dies here
    rest = [w.window for w in monitor.follow(log, state_path)]
    assert set(seen) | set(rest) == set(range(6))


def test_a_resumed_monitor_continues_its_period(guard: Guard, tmp_path: Path) -> None:
    log, state_path = tmp_path / "queries.jsonl", tmp_path / "state.json"
    write_log(log, HELD_OUT_IK[:4])
    monitor = ShiftMonitor(guard, WindowSpec(size=2), correction="period", period="1h")
    first = [w.alpha for w in monitor.follow(log, state_path)]
    write_log(log, HELD_OUT_IK[4:6] + OOK[:2], start=1_700_001_000.0)  # the same hour
    second = [w.alpha for w in monitor.follow(log, state_path)]
    assert first + second == [alpha_spending(0.05, j) for j in range(4)]
    with pytest.raises(InputError, match="other settings"):
        list(
            ShiftMonitor(guard, WindowSpec(size=2), correction="period", period="2h").follow(
                log, state_path
            )
        )


def test_a_damaged_or_mismatched_state_is_refused(guard: Guard, tmp_path: Path) -> None:
    log, state_path = tmp_path / "queries.jsonl", tmp_path / "state.json"
    write_log(log, HELD_OUT_IK)
    monitor = ShiftMonitor(guard, WindowSpec(size=4))
    list(monitor.follow(log, state_path))
    data = json.loads(state_path.read_text())
    data["state"]["offset"] = 0  # edited by hand
    state_path.write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="checksum"):
        list(monitor.follow(log, state_path))
    state_path.write_text("{not json")
    with pytest.raises(ArtifactError, match="corrupt"):
        list(monitor.follow(log, state_path))
    state_path.unlink()
    list(monitor.follow(log, state_path))
    with pytest.raises(InputError, match="other settings"):
        list(ShiftMonitor(guard, WindowSpec(size=5)).follow(log, state_path))
    log.write_text("")  # the log was replaced by a shorter one
    with pytest.raises(InputError, match="replaced"):
        list(monitor.follow(log, state_path))


def test_resume_continues_the_saved_state_and_deletes_what_a_crashed_save_left(
    guard: Guard, tmp_path: Path
) -> None:
    log, state_path = tmp_path / "queries.jsonl", tmp_path / "state.json"
    write_log(log, HELD_OUT_IK[:5])
    monitor = ShiftMonitor(guard, WindowSpec(size=4), correction="none")
    assert monitor.resume(log, state_path) == monitor.new_state(log)  # nothing saved yet
    assert [w.window for w in monitor.follow(log, state_path)] == [0]
    # what a save killed between writing its temporary file and the rename leaves behind
    stale = tmp_path / ".state.json.k2x9_q.tmp"
    stale.write_text('{"checksum": "', encoding="utf-8")
    unrelated = tmp_path / ".other.json.k2x9_q.tmp"
    unrelated.write_text("{}", encoding="utf-8")
    state = monitor.resume(log, state_path)
    assert not stale.exists() and unrelated.exists()
    assert state == load_state(state_path)
    assert (state.windows, state.line, len(state.buffer)) == (1, 5, 1)
    # the resumed state goes on where it stopped: three more scores close window 1
    scores = np.array([0.1, 0.2, 0.3])
    results = monitor.feed_scores(state, np.arange(6, 9), np.arange(3.0), scores)
    assert [(w.window, w.first_line, w.last_line) for w in results] == [(1, 5, 8)]
    assert monitor.resume(log) == monitor.new_state(log)  # no state path: a new state


def test_out_of_order_timestamps_are_an_error_naming_the_line(guard: Guard, tmp_path: Path):
    log = tmp_path / "queries.jsonl"
    write_log(log, HELD_OUT_IK[:3])
    write_log(log, HELD_OUT_IK[3:], start=1_600_000_000.0)
    with pytest.raises(
        InputError, match=r"queries\.jsonl:4 \(field 'time'\): timestamps out of order"
    ):
        list(ShiftMonitor(guard, WindowSpec(size=2)).follow(log))


def test_state_round_trips(tmp_path: Path) -> None:
    state = MonitorState(
        log="/x.jsonl",
        kb_fingerprint="abc",
        settings={"window_size": 5, "alpha": 0.05, "statistic": "mss", "window_seconds": None},
        offset=120,
        line=7,
        buffer=[(6, 1.5, -0.25), (7, 2.5, 0.125)],
    )
    save_state(tmp_path / "s.json", state)
    assert load_state(tmp_path / "s.json") == state


# ------------------------------------------------------------ offline tests
def test_ks_batch_test_separates_shifted_from_matching_batches(guard: Guard) -> None:
    same = shift_test(guard, HELD_OUT_IK)
    shifted = shift_test(guard, OOK)
    assert same.test == "ks" and same.score_statistic == "mss"
    assert same.n_reference == len(CALIBRATION) and same.n_test == len(HELD_OUT_IK)
    assert not same.shifted and shifted.shifted and shifted.p_value < same.p_value
    assert shifted.critical_value is not None and shifted.statistic > shifted.critical_value


def test_mmd_batch_test_on_embeddings(guard: Guard) -> None:
    shifted = shift_test(guard, OOK, test="mmd", n_permutations=200)
    assert shifted.test == "mmd" and shifted.method == "permutation"
    assert shifted.shifted and shifted.p_value < 0.05
    same = shift_test(guard, HELD_OUT_IK, test="mmd", n_permutations=200)
    assert same.p_value > shifted.p_value


def test_bad_batches_are_refused(guard: Guard) -> None:
    with pytest.raises(InputError, match="empty"):
        shift_test(guard, [])
    with pytest.raises(InputError, match="unknown shift test"):
        shift_test(guard, HELD_OUT_IK, test="t")  # type: ignore[arg-type]
    with pytest.warns(UserWarning, match="cannot flag"):
        small = Guard.calibrate(guard.kb, IN_KNOWLEDGE[:8], k=4)
    with pytest.raises(InputError, match="at least 20"):
        shift_test(small, HELD_OUT_IK)
