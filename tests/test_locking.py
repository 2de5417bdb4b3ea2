"""The single-writer lock across processes and threads, the crash hook and file checksums."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from ragbound.artifacts import check_sha256, file_sha256
from ragbound.errors import ArtifactError
from ragbound.locking import lock_path, writer_lock

SRC = Path(__file__).resolve().parents[1] / "src"

HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from ragbound.locking import writer_lock
    with writer_lock(Path(sys.argv[1]), what="test"):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
    """
)


def hold_in_child(directory: Path, seconds: float) -> subprocess.Popen:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_a_second_process_is_refused_after_its_timeout_and_named(tmp_path: Path):
    child = hold_in_child(tmp_path / "kb", 30)
    try:
        waits: list[str] = []
        with (
            pytest.raises(ArtifactError, match=rf"pid {child.pid}\) is writing the test"),
            writer_lock(tmp_path / "kb", what="test", timeout=0.3, on_wait=waits.append),
        ):
            pass
        assert len(waits) == 1 and f"pid {child.pid}" in waits[0]
    finally:
        child.kill()
        child.wait()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path):
    child = hold_in_child(tmp_path / "kb", 30)
    child.kill()  # SIGKILL: no cleanup runs, the kernel drops the flock
    child.wait()
    assert lock_path(tmp_path / "kb").exists()
    with writer_lock(tmp_path / "kb", what="test", timeout=0):
        pass


def test_threads_take_turns_and_one_thread_may_nest(tmp_path: Path):
    inside = 0
    most = 0
    guard = threading.Lock()

    def write() -> None:
        nonlocal inside, most
        # the second, nested acquisition by the same thread must not deadlock
        with (
            writer_lock(tmp_path / "kb", what="test", timeout=30),
            writer_lock(tmp_path / "kb", what="test", timeout=0),
        ):
            with guard:
                inside += 1
                most = max(most, inside)
            time.sleep(0.02)
            with guard:
                inside -= 1

    threads = [threading.Thread(target=write) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == 1


def test_the_lock_file_sits_beside_the_directory(tmp_path: Path):
    assert lock_path(tmp_path / "kb") == tmp_path.absolute() / ".kb.lock"


def test_checksums_name_a_changed_file(tmp_path: Path):
    path = tmp_path / "vectors.npy"
    path.write_bytes(b"\x00" * 1000)
    digest = file_sha256(path)
    assert digest == "541b3e9daa09b20bf85fa273e5cbd3e80185aa4ec298e765db87742b70138a53"
    check_sha256(path, digest, "vectors")
    check_sha256(path, None, "vectors")  # not recorded: nothing to check
    path.write_bytes(b"\x00" * 999 + b"\x01")
    with pytest.raises(ArtifactError, match=r"vectors .*vectors.npy is damaged"):
        check_sha256(path, digest, "vectors")
    with pytest.raises(ArtifactError, match="not found"):
        check_sha256(tmp_path / "gone.npy", digest, "vectors")


def test_an_armed_crash_point_kills_the_process_and_others_do_not():
    code = (
        "from ragbound.faults import crash_point; crash_point('a:other'); print('alive', "
        "flush=True); crash_point('a:step'); print('after')"
    )
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "RAGBOUND_CRASH_AT": "x,a:step"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == -9 and done.stdout == "alive\n"
