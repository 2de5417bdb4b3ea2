"""The shift monitor's state under real processes: one monitor per state, kill -9 while
saving, damaged state, and log lines no monitor can read (one error line each)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbound.detect.calibration import Calibration
from ragbound.detect.monitor import load_state
from ragbound.locking import writer_lock
from tests.reliability.damage import one_error_line, truncate
from tests.reliability.processes import KILLED, finish, ragbound, start
from tests.reliability.test_reliability_calibration import calibrate_args
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, MORE_OUT_OF_KNOWLEDGE, OUT_OF_KNOWLEDGE

STREAM = MORE_IN_KNOWLEDGE + OUT_OF_KNOWLEDGE + MORE_OUT_OF_KNOWLEDGE


@pytest.fixture
def calibrated(kb: Path, tmp_path: Path) -> Path:
    queries = tmp_path / "cal.txt"
    queries.write_text("\n".join(IN_KNOWLEDGE + MORE_IN_KNOWLEDGE) + "\n", encoding="utf-8")
    assert ragbound(*calibrate_args(kb, queries)).returncode == 0
    assert Calibration.exists(kb)
    return kb


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "queries.log.jsonl"
    rows = [{"time": 1_790_000_000 + 60 * i, "query": q} for i, q in enumerate(STREAM)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def shift_args(kb_dir: Path, log: Path, state: Path) -> tuple[str | Path, ...]:
    return ("shift", kb_dir, "--queries", log, "--window", "8", "--json", "--state", state)


def windows(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def test_a_second_monitor_of_the_same_state_waits_or_is_refused(
    calibrated: Path, log: Path, tmp_path: Path
):
    state = tmp_path / "state.json"
    args = shift_args(calibrated, log, state)
    with writer_lock(state, what="monitor state"):
        refused = ragbound(*args, RAGBOUND_LOCK_TIMEOUT="0")
        one_error_line(refused, "another process (pid", "writing the monitor state", state.name)
        waiting = start(*args)
        assert waiting.stderr is not None
        line = waiting.stderr.readline()
        assert line.startswith("waiting for another process (pid"), line
    code, out, err = finish(waiting)
    assert code == 0, err
    assert [w["window"] for w in windows(out)] == [0, 1, 2, 3]


@pytest.mark.parametrize("step", ["monitor.save:before-write", "monitor.save:written"])
def test_kill_while_saving_the_state_then_a_rerun_reports_every_window(
    calibrated: Path, log: Path, tmp_path: Path, step: str
):
    clean_state = tmp_path / "clean.json"
    clean = ragbound(*shift_args(calibrated, log, clean_state))
    assert clean.returncode == 0, clean.stderr
    state = tmp_path / "state.json"
    killed = ragbound(*shift_args(calibrated, log, state), crash_at=step)
    assert killed.returncode == KILLED
    (tmp_path / ".state.json.crashed.tmp").write_text("{")
    rerun = ragbound(*shift_args(calibrated, log, state))
    assert rerun.returncode == 0, rerun.stderr
    # at least once: every window shown before the crash or by the rerun, none lost
    expected, again = windows(clean.stdout), windows(rerun.stdout)
    assert {w["window"] for w in windows(killed.stdout) + again} == {w["window"] for w in expected}
    assert again == expected[len(expected) - len(again) :]  # the rerun repeats the last ones
    assert load_state(state).model_dump() == load_state(clean_state).model_dump()
    assert not list(tmp_path.glob(".state.json.*.tmp"))


def test_a_damaged_state_is_one_error_naming_it(calibrated: Path, log: Path, tmp_path: Path):
    state = tmp_path / "state.json"
    assert ragbound(*shift_args(calibrated, log, state)).returncode == 0
    truncate(state)
    one_error_line(ragbound(*shift_args(calibrated, log, state)), state.name, "corrupt")


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b'{"time": 1790000000, "query": "bees \xff dance"}\n', ":3: not UTF-8 text"),
        (b'{"time": 1e20, "query": "bees"}\n', ":3 (field 'time'): the timestamp 1e+20 is out"),
        (b'{"time": -1e20, "query": "bees"}\n', ":3 (field 'time'): the timestamp -1e+20 is"),
        (b'{"time": "nan", "query": "bees"}\n', ":3 (field 'time'): the timestamp 'nan' is not"),
        (b'{"time": "inf", "query": "bees"}\n', ":3 (field 'time'): the timestamp 'inf' is not"),
        # refused as the reader parses it: no float holds it (records.standard_json)
        (b'{"time": 1e400, "query": "bees"}\n', ":3: not valid JSON (the number 1e400 is beyond"),
        (
            b'{"time": "9999-12-31T23:59:59-05:00", "query": "bees"}\n',
            ":3 (field 'time'): the timestamp '9999-12-31T23:59:59-05:00' is out of range",
        ),
    ],
    ids=["not-utf8", "1e20", "-1e20", "nan", "inf", "1e400", "year-10000"],
)
def test_an_unreadable_log_line_is_one_error_naming_file_and_line(
    calibrated: Path, tmp_path: Path, line: bytes, says: str
):
    log = tmp_path / "bad.log.jsonl"
    good = b"".join(
        json.dumps({"time": 1_790_000_000 + i, "query": q}).encode() + b"\n"
        for i, q in enumerate(IN_KNOWLEDGE[:2])
    )
    log.write_bytes(good + line)
    done = ragbound(*shift_args(calibrated, log, tmp_path / "state.json"))
    one_error_line(done, f"{log}{says}")
