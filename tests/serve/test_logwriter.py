"""The service's decisions written alone (:class:`LogWriter`): numbered without a log, one
writer per log (another thread, like another process, is refused), and a failed write not
ready until a write succeeds again."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ragbound.errors import ArtifactError
from ragbound.faults import FAULTS_ENV
from ragbound.serve.logwriter import LogWriter
from ragbound.serve.metrics import Registry, service_registry
from ragbound.serve.querylog import QueryLogError
from ragbound.serve.settings import ServeSettings
from tests.serve.server import log_lines
from tests.serve.test_parts import _decision


def ready_gauge(metrics: Registry) -> float:
    values = metrics.snapshot()["values"]["ragbound_ready"]
    return {tuple(map(tuple, key)): value for key, value in values}[()]


def test_without_a_log_decisions_are_numbered_across_batches():
    writer = LogWriter(ServeSettings(), service_registry())
    first = writer.write([_decision("a"), _decision("b")], ready=True)
    second = writer.write([_decision("c")], ready=True)
    assert [logged.line for logged in first + second] == [1, 2, 3]
    assert writer.log is None and writer.writable(ready=True)


def test_one_writer_holds_a_log_until_it_closes(tmp_path: Path):
    settings = ServeSettings(log=tmp_path / "log.jsonl")
    writer = LogWriter(settings, service_registry())
    with ThreadPoolExecutor(1) as other, pytest.raises(ArtifactError):  # a thread of its own
        other.submit(LogWriter, settings, service_registry()).result()
    writer.write([_decision("a")], ready=True)
    writer.close()
    again = LogWriter(settings, service_registry())
    assert [logged.line for logged in again.write([_decision("b")], ready=True)] == [2]
    again.close()
    assert [line["query"] for line in log_lines(settings.log)] == ["a", "b"]


def test_a_failed_write_is_not_ready_until_a_write_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    faults = tmp_path / "faults"
    monkeypatch.setenv(FAULTS_ENV, str(faults))
    metrics = service_registry()
    writer = LogWriter(ServeSettings(log=tmp_path / "log.jsonl"), metrics)
    metrics.set("ragbound_ready", 1)
    faults.write_text("querylog.write\n")
    with pytest.raises(QueryLogError):
        writer.write([_decision("lost")], ready=True)
    assert writer.error == "cannot write the query log (No space left on device)"
    assert ready_gauge(metrics) == 0
    assert not writer.writable(ready=True)  # the probe beside the log fails too
    faults.write_text("")
    writer.write([_decision("kept")], ready=True)
    assert writer.error is None and ready_gauge(metrics) == 1
    writer.close()
    assert [line["query"] for line in log_lines(tmp_path / "log.jsonl")] == ["kept"]
