"""``make demo`` in-process on the bundled sample: every part, 80 columns, real MiniLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbound.demo import WIDTH, main, prepare, sample_corpus
from ragbound.errors import InputError
from ragbound.report import load_run
from tests.markers import needs_local_model


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """One run of the demo's non-LLM parts; its output folder and printed lines."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("demo") / "out"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main(["--out", str(out)])
    return out, printed.getvalue().splitlines()


def bundled_tripwires() -> dict[str, str]:
    lines = (sample_corpus() / "tripwires.jsonl").read_text(encoding="utf-8").splitlines()
    return {record["id"]: record["topic"] for record in map(json.loads, lines)}


def test_every_line_fits_80_columns(demo_run):
    _, lines = demo_run
    too_long = [line for line in lines if len(line) > WIDTH]
    assert not too_long
    for part in ("1/4", "2/4", "3/4", "4/4"):
        assert any(line.startswith(part) for line in lines), part


def test_online_test_checks_questions_and_measures_rates(demo_run):
    _, lines = demo_run
    verdicts = [line for line in lines if "p=" in line]
    assert any("in knowledge" in line for line in verdicts)
    assert any("OUT of knowledge" in line for line in verdicts)
    assert any(line.startswith("measured at alpha=0.05") for line in lines)


def test_forbidden_question_is_found_naming_its_tripwire(demo_run):
    _, lines = demo_run
    forbidden = next(i for i, line in enumerate(lines) if "FORBIDDEN" in line)
    named = lines[forbidden + 2]
    assert any(f"tripwire {tid} ({topic})" in named for tid, topic in bundled_tripwires().items())
    assert any(line.strip().startswith("passed") for line in lines[forbidden:])


def test_drifting_log_raises_the_alarm_only_after_it_drifts(demo_run):
    out, lines = demo_run
    windows = load_run(out / "run").windows
    alarms = [w.window for w in windows if w.alarm]
    assert alarms, "the drifting log never alarmed"
    # the first 30 lines of the log are in-knowledge questions: no alarm there
    assert all(w.last_line > 30 for w in windows if w.alarm)
    assert f"first alarm: window {alarms[0]} " in "\n".join(lines)


def test_report_is_written_and_its_path_printed(demo_run):
    out, lines = demo_run
    report = (out / "report.html").resolve()
    assert report.is_file() and report.stat().st_size > 0
    assert str(report) in lines
    assert load_run(out / "run").evaluation is not None
    assert any("make demo DEMO_LLM=1" in line for line in lines)  # the LLM part says how


def test_prepare_refuses_a_folder_that_is_not_the_demos(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(InputError, match="not a demo folder"):
        prepare(tmp_path)


def test_prepare_clears_the_previous_run_of_a_demo_folder(tmp_path: Path):
    prepare(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "monitor.jsonl").write_text("{}\n", encoding="utf-8")
    prepare(tmp_path)  # a rerun must not append to the last run's windows
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@needs_local_model
def test_llm_part_prints_the_abstention_table(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("RAGBOUND_CACHE", str(tmp_path / "cache"))
    main(["--out", str(tmp_path / "out"), "--llm"])
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if len(line) > WIDTH] == []
    row = next(line for line in lines if line.strip().startswith("rag "))
    assert "[" in row  # rates with their intervals
    data = load_run(tmp_path / "out" / "run")
    assert data.bench is not None  # the report includes the benchmark
