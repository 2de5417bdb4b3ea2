"""Progress in a log (stderr not a terminal): a line every interval, nothing for a short job."""

from __future__ import annotations

import pytest

from ragbound.progress import LOG_SECONDS, log_seconds, progress_bar


def test_every_step_is_a_line_at_interval_zero(monkeypatch, capsys) -> None:
    monkeypatch.setenv("RAGBOUND_PROGRESS_SECONDS", "0")
    with progress_bar(4, "embedding chunks", enabled=True) as advance:
        advance(1)
        advance(3)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("embedding chunks: 1 of 4 (25%), ")
    assert ", about " in lines[0] and lines[0].endswith(" left")
    assert lines[1].startswith("embedding chunks: 4 of 4 (100%), ")
    assert len(lines) == 2


@pytest.mark.parametrize("enabled", [True, False])
def test_a_job_shorter_than_the_interval_prints_nothing(monkeypatch, capsys, enabled) -> None:
    monkeypatch.setenv("RAGBOUND_PROGRESS_SECONDS", "1e9")
    with progress_bar(4, "retrieving", enabled=enabled) as advance:
        advance(4)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("5", 5.0), ("0", 0.0)] + [(bad, LOG_SECONDS) for bad in ("", "x", "-1", "nan", "inf")],
)
def test_the_interval_comes_from_the_environment(monkeypatch, raw, seconds) -> None:
    monkeypatch.setenv("RAGBOUND_PROGRESS_SECONDS", raw)
    assert log_seconds() == seconds
