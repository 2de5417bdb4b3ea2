"""``make demo`` in-process on the bundled sample: every part, 80 columns, real MiniLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbound.demo import (
    CHAT,
    NEAR,
    WIDTH,
    Example,
    main,
    miss_summary,
    outcome,
    prepare,
    sample_corpus,
)
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
    rows = [line for line in lines if line.startswith(("  in knowledge", "  OUT of knowledge"))]
    assert len(rows) == 6
    for row in rows:  # every row is marked against its label, whatever the p-values were
        flagged = row.startswith("  OUT")
        expected_out = not row.endswith("answerable")
        assert outcome(expected_out, flagged) in row.split()  # "false alarm" as two words
    caught = sum(row.startswith("  OUT") for row in rows[2:])
    assert any(line.startswith(f"{caught} of 4 out-of-knowledge questions") for line in lines)
    assert any(line.startswith("measured at alpha=0.05") for line in lines)


def test_each_outcome_compares_the_verdict_with_the_label():
    assert outcome(expected_out=True, flagged=True) == "caught"
    assert outcome(expected_out=True, flagged=False) == "missed"
    assert outcome(expected_out=False, flagged=True) == "false alarm"
    assert outcome(expected_out=False, flagged=False) == "correct"


def test_the_summary_counts_misses_from_the_verdicts_not_the_row_order():
    rows = [
        Example("a", "answerable", False),
        Example("b", NEAR, True),
        Example("c", "off-topic", True),
        Example("d", NEAR, True),
    ]
    assert miss_summary(rows, [False, True, True, True], 0.05) == [
        "3 of 3 out-of-knowledge questions flagged at alpha 0.05, 0 missed"
    ]
    first, missed = miss_summary(rows, [False, False, True, True], 0.05)
    assert first == "2 of 3 out-of-knowledge questions flagged at alpha 0.05, 1 missed"
    assert missed.startswith(f"missed: {NEAR}, the online test's hard case")
    first, missed, alarm = miss_summary(rows, [True, True, False, True], 0.1)
    assert first.endswith("alpha 0.1, 1 missed") and missed == "missed: off-topic"
    assert alarm.startswith("1 of 1 answerable questions flagged")


def test_a_chat_reads_its_follow_ups_with_the_turns_before(demo_run):
    _, lines = demo_run
    start = lines.index("a chat, turn by turn: p-value of the turn alone, then in the chat")
    turns, results = lines[start + 1 : start + 9 : 2], lines[start + 2 : start + 9 : 2]
    decided = {turn.strip(): result.split() for turn, result in zip(turns, results, strict=True)}
    assert set(decided) == {turn for turn, _ in CHAT}
    # "alone P ACTION in the chat P ACTION (read ...)"
    assert (decided["ok"][2], decided["ok"][7]) == ("abstain", "answer")
    switch = decided["Who won the 1998 world cup?"]
    assert (switch[2], switch[7]) == ("abstain", "abstain")


def test_forbidden_question_is_found_naming_its_tripwire(demo_run):
    _, lines = demo_run
    forbidden = next(i for i, line in enumerate(lines) if "FORBIDDEN" in line)
    held, named = lines[forbidden + 1], lines[forbidden + 2]
    assert held.split()[:2] == ["held:", "proportion>=0.5"] or "held: rank<=1" in held
    assert any(
        named.strip().startswith(f"{tid} ({topic})") for tid, topic in bundled_tripwires().items()
    )
    rule = next(line for line in lines if line.startswith("rule: forbidden when"))
    assert " or " in rule and " any " not in rule  # the rule reads as the verdict does
    assert any(line.strip().startswith("passed") for line in lines[forbidden:])


def test_drifting_log_raises_the_alarm_only_after_it_drifts(demo_run):
    out, lines = demo_run
    windows = load_run(out / "run").windows
    alarms = [w.window for w in windows if w.alarm]
    assert alarms, "the drifting log never alarmed"
    # the first 30 lines of the log are in-knowledge questions: no alarm there
    assert all(w.last_line > 30 for w in windows if w.alarm)
    assert f"first alarm: window {alarms[0]} " in "\n".join(lines)
    header = next(line for line in lines if line.strip().startswith("window"))
    assert "tested at" in header and "level" not in header
    assert any(line.startswith("tested at: the window's own alpha") for line in lines)


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
