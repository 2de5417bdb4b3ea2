"""Query-log rotation: by size or at a new UTC day; the series read as one stream by the
service's monitor and by ``ragbound shift``, with nothing answered lost at the rotation."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from ragbound.detect import Guard
from ragbound.detect.monitor import ShiftMonitor, WindowSpec, load_state
from ragbound.errors import InputError
from ragbound.logseries import file_id, remaining, rotated, series
from ragbound.serve.querylog import QueryLog, read_scores
from ragbound.serve.settings import Rotation
from tests.serve.server import ChildServer, served_kb
from tests.serve.test_parts import _decision
from tests.serve.test_workers import Workers
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

QUERIES = [*IN_KNOWLEDGE, *OUT_OF_KNOWLEDGE]
LINE_BYTES = 260  # about one decision line of _decision


def _queries(lines: list[dict]) -> list[str]:
    return [line["query"] for line in lines]


def _series_lines(log: Path) -> list[dict]:
    """Every line of the series, each whole, oldest file first."""
    found = []
    for file in series(log):
        raw = file.read_bytes()
        assert not raw or raw.endswith(b"\n"), f"{file} ends mid-line"
        found += [json.loads(line) for line in raw.splitlines()]
    return found


def test_a_log_past_its_size_starts_a_new_file_and_reads_as_one(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    log = QueryLog(path, rotation=Rotation(max_bytes=3 * LINE_BYTES))
    for i in range(10):
        log.append([_decision(f"q{i}"), _decision(f"r{i}")])  # a batch never splits
    log.close()
    files = rotated(path)
    assert [f.name for f in files[:2]] == ["log.jsonl.000001", "log.jsonl.000002"]
    assert all(f.stat().st_size <= 3 * LINE_BYTES for f in files)
    assert _queries(_series_lines(path)) == [q for i in range(10) for q in (f"q{i}", f"r{i}")]
    read = read_scores(path, (None if not files else file_id(files[0]), 0), 1)
    assert [line.line for line, _ in read] == list(range(1, 21))
    assert read[-1][1] == (file_id(path), path.stat().st_size)


def test_a_batch_larger_than_the_limit_is_written_whole_into_one_file(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    log = QueryLog(path, rotation=Rotation(max_bytes=10))
    log.append([_decision("a")])
    log.append([_decision(q) for q in "bcd"])
    log.close()
    assert [len(f.read_text().splitlines()) for f in series(path)] == [1, 3]


def test_a_new_utc_day_starts_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    yesterday = time.strftime("%Y-%m-%dT10:00:00+00:00", time.gmtime(time.time() - 86_400))
    line = {"time": yesterday, "query": "old", "action": "answer", "score": -0.7}
    path.write_text(json.dumps(line) + "\n")
    log = QueryLog(path, rotation=Rotation(daily=True))
    log.append([_decision("today")])
    log.append([_decision("today too")])
    log.close()
    assert [f.name for f in series(path)] == ["log.jsonl.000001", "log.jsonl"]
    assert _queries(_series_lines(path)) == ["old", "today", "today too"]


def test_a_place_in_a_file_that_is_gone_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("")
    with pytest.raises(InputError, match="no longer in the log's series"):
        remaining(path, "0:1", 0)


def test_shift_follows_a_log_across_its_rotation_without_loss_or_repeat(
    minilm_kb_dir: Path, tmp_path: Path
) -> None:
    kb = served_kb(minilm_kb_dir, tmp_path / "kb")
    guard = Guard.load(kb)
    path, state = tmp_path / "log.jsonl", tmp_path / "state.json"
    log = QueryLog(path, rotation=Rotation(max_bytes=12 * LINE_BYTES))
    monitor = ShiftMonitor(guard, WindowSpec(size=10))
    for i in range(25):
        log.append([_decision(QUERIES[i % len(QUERIES)])])
    first = list(monitor.follow(path, state))
    for i in range(25, 47):
        log.append([_decision(QUERIES[i % len(QUERIES)])])
    second = list(monitor.follow(path, state))
    log.close()
    assert len(rotated(path)) >= 2
    assert [w.window for w in first + second] == [0, 1, 2, 3]
    assert load_state(state).line == 47


@pytest.fixture(scope="module")
def kb_dir(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return served_kb(minilm_kb_dir, tmp_path_factory.mktemp("rotation") / "kb")


def _ask(url: str, queries: list[str]) -> None:
    def one(query: str) -> None:
        assert httpx.post(f"{url}/v1/decide", json={"query": query}, timeout=60).status_code == 200

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, queries))


def _served(server: ChildServer | Workers, queries: list[str]) -> int:
    """Ask ``queries``, then stop the service: its exit status; killed whatever happens."""
    try:
        _ask(server.url, queries)
        return server.stop()
    finally:
        server.kill()


def test_the_service_rotates_its_log_and_its_monitor_follows(kb_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    args = ("--log", str(log), "--log-max-bytes", "4KB")
    queries = [f"{QUERIES[i % len(QUERIES)]} ({i})" for i in range(120)]
    assert _served(ChildServer(str(kb_dir), *args).ready(), queries) == 0
    assert len(rotated(log)) >= 3
    assert sorted(_queries(_series_lines(log))) == sorted(queries)
    state = load_state(log.with_name(log.name + ".monitor.json"))
    assert (state.line, state.windows) == (120, 2)
    restarted = ChildServer(str(kb_dir), *args).ready()  # resumes in a rotated file's place
    assert _served(restarted, ["Do bees sleep?"]) == 0
    assert load_state(log.with_name(log.name + ".monitor.json")).line == 121


def test_workers_rotate_one_log_between_them(kb_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    queries = [f"{QUERIES[i % len(QUERIES)]} ({i})" for i in range(100)]
    assert _served(Workers(kb_dir, "--log", str(log), "--log-max-bytes", "4KB"), queries) == 0
    assert len(rotated(log)) >= 3
    lines = _series_lines(log)
    assert sorted(_queries(lines)) == sorted(queries)  # each once, none torn
    assert [line["time"] for line in lines] == sorted(line["time"] for line in lines)
    state = load_state(log.with_name(log.name + ".monitor.json"))
    assert (state.line, state.windows) == (100, 2)


def test_shift_and_score_merge_the_replicas_logs_and_their_rotated_files(
    kb_dir: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    from tests.cli.runner import run

    first, second = tmp_path / "replica-a.jsonl", tmp_path / "replica-b.jsonl"
    logs = [QueryLog(first, rotation=Rotation(max_bytes=5 * LINE_BYTES)), QueryLog(second)]
    asked = [f"{QUERIES[i % len(QUERIES)]} ({i})" for i in range(30)]
    for i, query in enumerate(asked):
        logs[i % 2].append([_decision(query)])
    for log in logs:
        log.close()
    assert rotated(first)
    code, out, err = run(
        monkeypatch, capsys, "shift", str(kb_dir), "--queries", str(first),
        "--queries", str(second), "--window", "10", "--json",
    )  # fmt: skip
    assert code == 0, err
    windows = [json.loads(line) for line in out.splitlines()]
    assert [w["window"] for w in windows] == [0, 1, 2]  # 30 lines of both, each once
    assert "2 logs merged, no state" in err
    scores = tmp_path / "scores.jsonl"
    code, _, err = run(
        monkeypatch, capsys, "test-log", str(kb_dir), str(first), str(second), "--out", str(scores)
    )
    assert code == 0, err
    rows = [json.loads(line) for line in scores.read_text().splitlines()]
    assert [row["query"] for row in rows] == asked  # time order across the replicas
    assert {row["source"] for row in rows} >= {"replica-a.jsonl.000001", "replica-b.jsonl"}
    code, _, err = run(
        monkeypatch, capsys, "shift", str(kb_dir), "--queries", str(first),
        "--queries", str(second), "--state", str(tmp_path / "s.json"),
    )  # fmt: skip
    assert code == 2 and "--state follows one log" in err
