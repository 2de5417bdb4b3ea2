"""A query log that cannot be written: the batch is answered 503 JSON ("cannot write the query
log"), never 200 without its line, ``/readyz`` says 503 until a write succeeds again, and the
service prints one ``error:`` line, no traceback.

The disk is a real one that fills (a 64 KiB tmpfs, where this machine lets the test mount one)
or a write refused at the system call (``RAGBOUND_FAULTS_FILE``, :func:`ragbound.faults.io_fault`,
armed and disarmed while the service runs); the service is a real ``ragbound serve`` child.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ragbound.faults import FAULTS_ENV
from ragbound.serve import querylog
from ragbound.serve.querylog import QueryLog, QueryLogError
from ragbound.serve.settings import Rotation
from tests.serve.server import ChildServer, log_lines, served_kb
from tests.serve.test_parts import _decision
from tests.texts import IN_KNOWLEDGE

REFUSED = "cannot write the query log"
FAULTS = pytest.mark.parametrize(
    ("armed", "reason"),
    [("querylog.write", "No space left on device"), ("querylog.fsync EIO", "Input/output error")],
)


# ------------------------------------------------------------------- the log alone
@FAULTS
def test_a_refused_write_raises_and_leaves_the_log_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, armed: str, reason: str
) -> None:
    faults = tmp_path / "faults"
    monkeypatch.setenv(FAULTS_ENV, str(faults))
    path = tmp_path / "log.jsonl"
    log = QueryLog(path)
    log.append([_decision("q0")])
    before = path.read_bytes()
    faults.write_text(armed + "\n")
    with pytest.raises(QueryLogError, match=reason) as failure:
        log.append([_decision("q1"), _decision("q2")])
    assert failure.value.reason == reason  # the words callers get: no path
    assert path.read_bytes() == before
    with pytest.raises(QueryLogError):
        log.probe()
    faults.write_text("")
    log.probe()
    log.append([_decision("q3")])
    log.close()
    assert [line["query"] for line in log_lines(path)] == ["q0", "q3"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["faults", "log.jsonl"]  # no probe left


def test_a_rotation_whose_new_file_could_not_be_opened_is_finished_next_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.jsonl"
    log = QueryLog(path, rotation=Rotation(max_bytes=10))
    log.append([_decision("q0")])

    def full(_: Path) -> int:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(querylog, "_open_fd", full)
        with pytest.raises(QueryLogError):
            log.append([_decision("q1")])  # renamed the full file, could not open a new one
    assert not path.exists()
    log.append([_decision("q2")])
    log.close()
    assert [line["query"] for line in log_lines(path)] == ["q2"]
    assert [line["query"] for line in log_lines(path.with_name("log.jsonl.000001"))] == ["q0"]


# ------------------------------------------------------------------ the service
@pytest.fixture(scope="module")
def kb_dir(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return served_kb(minilm_kb_dir, tmp_path_factory.mktemp("log-failures") / "kb")


def check(url: str, queries: list[str]) -> httpx.Response:
    return httpx.post(f"{url}/v1/decide/batch", json={"queries": queries}, timeout=60)


def ready_again(url: str) -> httpx.Response:
    """``/readyz`` once it answers 200 (it probes the disk at most once a second), or its
    last answer after a minute."""
    deadline = time.monotonic() + 60
    while (answer := httpx.get(f"{url}/readyz")).status_code != 200:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return answer


def assert_refused(answer: httpx.Response, reason: str) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["error"] == f"{REFUSED} ({reason}); retry later"


def assert_one_error_line(lines: list[str]) -> None:
    text = "".join(lines)
    assert "Traceback" not in text, text
    assert len([line for line in lines if line.startswith(f"error: {REFUSED}")]) == 1, text
    assert "the query log is written again" in text


@FAULTS
def test_a_log_write_refused_is_a_503_until_a_write_succeeds(
    kb_dir: Path, tmp_path: Path, armed: str, reason: str
) -> None:
    faults, log = tmp_path / "faults", tmp_path / "queries.log.jsonl"
    server = ChildServer(str(kb_dir), "--log", str(log), env={FAULTS_ENV: str(faults)}).ready()
    lines = server.drain_stderr()
    try:
        assert check(server.url, ["q0 bees"]).status_code == 200
        faults.write_text(armed + "\n")
        assert_refused(check(server.url, ["q1 bees", "q2 trains"]), reason)
        assert_refused(check(server.url, ["q3 bees"]), reason)
        for _ in range(2):  # the probe fails too while the fault is armed
            readyz = httpx.get(f"{server.url}/readyz")
            assert readyz.status_code == 503 and readyz.json()["error"] == f"{REFUSED} ({reason})"
            time.sleep(1.1)
        assert [line["query"] for line in log_lines(log)] == ["q0 bees"]  # no line refused
        faults.write_text("")
        assert ready_again(server.url).status_code == 200
        assert check(server.url, ["q4 bees"]).status_code == 200
        assert [line["query"] for line in log_lines(log)] == ["q0 bees", "q4 bees"]
    finally:
        server.stop()
    assert_one_error_line(lines)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, mounted for the test (skipped where the machine does not allow it)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_disk_that_fills_is_a_503_and_freeing_it_makes_the_service_ready(
    kb_dir: Path, small_disk: Path
) -> None:
    filler, log = small_disk / "filler", small_disk / "queries.log.jsonl"
    filler.write_bytes(b"\0" * 32 * 1024)  # freed later, to show the recovery
    server = ChildServer(str(kb_dir), "--log", str(log)).ready()
    lines = server.drain_stderr()
    answered: list[str] = []
    try:
        for n in range(100):
            batch = [f"{query} ({n})" for query in IN_KNOWLEDGE]
            answer = check(server.url, batch)
            if answer.status_code != 200:
                break
            answered += batch
        assert_refused(answer, "No space left on device")
        assert answered, "the disk was full before the first batch"
        assert httpx.get(f"{server.url}/readyz").status_code == 503
        # every answered query has its line, and nothing refused has one
        assert [line["query"] for line in log_lines(log)] == answered
        filler.unlink()
        assert ready_again(server.url).status_code == 200
        assert check(server.url, ["after bees"]).status_code == 200
        assert [line["query"] for line in log_lines(log)] == [*answered, "after bees"]
    finally:
        server.stop()
    assert_one_error_line(lines)


def test_workers_sharing_a_log_answer_503_while_it_cannot_be_written(
    kb_dir: Path, tmp_path: Path
) -> None:
    faults, log = tmp_path / "faults", tmp_path / "queries.log.jsonl"
    args = ("--log", str(log), "--workers", "2")
    server = ChildServer(str(kb_dir), *args, env={FAULTS_ENV: str(faults)}).ready()
    lines = server.drain_stderr()
    try:
        faults.write_text("querylog.write\n")
        for n in range(4):  # the kernel spreads them over the workers
            assert_refused(check(server.url, [f"refused bees {n}"]), "No space left on device")
        assert not log.exists() or log_lines(log) == []
        faults.write_text("")
        answers = [check(server.url, [f"bees {n}"]) for n in range(4)]
        assert [answer.status_code for answer in answers] == [200] * 4
        assert sorted(line["query"] for line in log_lines(log)) == [f"bees {n}" for n in range(4)]
    finally:
        server.stop()
    assert "Traceback" not in "".join(lines), "".join(lines)
