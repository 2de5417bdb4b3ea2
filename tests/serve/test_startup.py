"""A real ``ragbound serve`` refuses at start, in one ``error:`` line with exit status 2, what
would otherwise leave it up but never ready, or not up at all: a --log file it did not write,
a port already in use."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.serve.server import free_port, serve_refused, served_kb
from tests.texts import IN_KNOWLEDGE


@pytest.fixture(scope="module")
def kb_dir(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return served_kb(minilm_kb_dir, tmp_path_factory.mktemp("startup") / "kb")


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one ``error:`` line of a refused start (exit status 2, no traceback)."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_a_query_log_kept_for_shift_is_refused_and_left_as_it_was(kb_dir: Path, tmp_path: Path):
    log = tmp_path / "queries.log.jsonl"
    content = "".join(
        json.dumps({"time": f"2026-11-01T10:0{i}:00Z", "query": query}) + "\n"
        for i, query in enumerate(IN_KNOWLEDGE[:3])
    )
    log.write_text(content + '{"time": "2026-11-01T10:09:00Z", "qu')  # a last line cut short
    before = log.read_bytes()
    line = error_line(serve_refused(str(kb_dir), "--log", str(log), "--port", str(free_port())))
    assert line == (
        f"error: {log}: not a decision log written by ragbound serve (line 1 has no 'action' "
        "or 'score' field); --log appends to a log of the service's own: give a path that "
        "does not exist yet, or one ragbound serve wrote"
    )
    assert log.read_bytes() == before  # nothing appended, the unfinished line not cut
    assert [path.name for path in tmp_path.iterdir()] == [log.name]  # no lock or state left


def test_a_port_in_use_is_refused_before_the_knowledge_base_loads(kb_dir: Path, tmp_path: Path):
    damaged = tmp_path / "kb"
    shutil.copytree(kb_dir, damaged)
    (damaged / "manifest.json").write_text("{")  # loading the knowledge base would fail
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = error_line(serve_refused(str(damaged), "--port", str(port)))
    assert line.startswith(f"error: port {port} on 127.0.0.1 is already in use (")
    assert line.endswith("): stop what listens there, or choose another --port")
    free = error_line(serve_refused(str(damaged), "--port", str(free_port())))
    assert "manifest" in free  # with the port free, the damage is what is refused
