"""Every table and line the CLI prints fits an 80-column terminal, without wrapping.

Each command runs twice through the real entry point, with ``COLUMNS=80`` and ``COLUMNS=200``
(rich sizes its console from it): the two outputs must be the same (nothing squeezed nor
wrapped at 80) and no line may pass 80 characters. The test's temporary folder, which a
user's paths replace, is shortened to ``<tmp>`` first.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.cli.runner import run, write_log
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, MORE_OUT_OF_KNOWLEDGE, OUT_OF_KNOWLEDGE
from tests.tripwires.tripwire_texts import SAFE, UNSAFE, write_tripwire_file

WIDTH = 80


def run_at_80(monkeypatch, capsys, tmp: Path, *args: str) -> str:
    """stdout and stderr of ``ragbound ARGS`` at 80 columns, checked to fit them and to be
    what a 200-column terminal shows."""
    shown = {}
    for columns in (WIDTH, 200):
        monkeypatch.setenv("COLUMNS", str(columns))
        code, out, err = run(monkeypatch, capsys, *args)
        assert code == 0, err
        shown[columns] = (out + err).replace(str(tmp), "<tmp>")
    text = shown[WIDTH]
    assert_fits(text, args[0])
    assert text == shown[200], f"ragbound {args[0]}: wrapped or squeezed at {WIDTH} columns"
    return text


def assert_fits(text: str, command: str) -> None:
    too_long = [line for line in text.splitlines() if len(line) > WIDTH]
    assert too_long == [], f"ragbound {command}: lines over {WIDTH} columns"


@pytest.fixture
def kb(monkeypatch, capsys, minilm_kb_dir: Path, tmp_path: Path) -> Path:
    """A copy of the bees-and-trains knowledge base, calibrated on 28 in-knowledge queries,
    with the bees-and-trains tripwires."""
    target = tmp_path / "kb"
    shutil.copytree(minilm_kb_dir, target)
    calibration = write_lines(tmp_path / "calibration.txt", IN_KNOWLEDGE + MORE_IN_KNOWLEDGE)
    source = write_tripwire_file(tmp_path / "tripwires.jsonl")
    args = ["calibrate", str(target), "--queries", str(calibration), "--k", "4"]
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    code, out, err = run(monkeypatch, capsys, "tripwire", "add", str(target), str(source))
    assert code == 0 and "added 4 tripwire(s)" in out, err
    assert_fits((out + err).replace(str(tmp_path), "<tmp>"), "tripwire add")
    return target


def write_lines(path: Path, texts: list[str]) -> Path:
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return path


def test_calibrate_auto_fits(monkeypatch, capsys, minilm_kb_dir: Path, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    shutil.copytree(minilm_kb_dir, kb)
    queries = write_lines(tmp_path / "queries.txt", IN_KNOWLEDGE + MORE_IN_KNOWLEDGE)
    args = ["calibrate", str(kb), "--queries", str(queries), "--statistic", "auto", "--seed", "1"]
    text = run_at_80(monkeypatch, capsys, tmp_path, *args)
    assert "(picked)" in text


def test_check_score_and_tripwire_tables_fit(monkeypatch, capsys, kb: Path, tmp_path: Path) -> None:
    queries = [*MORE_IN_KNOWLEDGE[:2], OUT_OF_KNOWLEDGE[0], UNSAFE[0], SAFE[0]]
    text = run_at_80(monkeypatch, capsys, tmp_path, "decide", str(kb), *queries)
    assert "in knowledge" in text and "out of knowledge" in text
    flowing = " ".join(text.split())
    assert all(" ".join(q.split()) in flowing for q in queries), "each query is printed whole"
    listed = run_at_80(monkeypatch, capsys, tmp_path, "tripwire", "list", str(kb), "--history")
    assert "harm" in listed and "sabotage" in listed
    checked = run_at_80(monkeypatch, capsys, tmp_path, "tripwire", "check", str(kb), *queries)
    assert "harm" in checked
    batch = write_lines(tmp_path / "batch.txt", OUT_OF_KNOWLEDGE + MORE_OUT_OF_KNOWLEDGE)
    scores = tmp_path / "scores.jsonl"
    scored = run_at_80(
        monkeypatch, capsys, tmp_path, "test-log", str(kb), str(batch), "--out", str(scores)
    )
    assert "scores.jsonl" in scored


def test_shift_one_shot_and_monitor_fit(monkeypatch, capsys, kb: Path, tmp_path: Path) -> None:
    batch = write_lines(tmp_path / "batch.txt", OUT_OF_KNOWLEDGE + MORE_OUT_OF_KNOWLEDGE)
    text = run_at_80(monkeypatch, capsys, tmp_path, "shift", str(kb), "--queries", str(batch))
    assert "shift" in text
    log = write_log(tmp_path / "log.jsonl", MORE_IN_KNOWLEDGE[10:] + MORE_OUT_OF_KNOWLEDGE[:6])
    args = ["shift", str(kb), "--queries", str(log), "--window", "6", "--restart"]
    windows = run_at_80(monkeypatch, capsys, tmp_path, *args)
    assert "ALARM" in windows and "2 window(s) tested" in windows


def test_tune_and_evaluate_tables_fit(monkeypatch, capsys, kb: Path, tmp_path: Path) -> None:
    labelled = tmp_path / "labelled.csv"
    rows = [f'"{q}",unsafe\n' for q in UNSAFE] + [f'"{q}",safe\n' for q in SAFE]
    labelled.write_text("query,label\n" + "".join(rows), encoding="utf-8")
    args = ["tripwire", "tune", str(kb), "--labelled", str(labelled), "--objective", "f1"]
    tuned = run_at_80(monkeypatch, capsys, tmp_path, *args)
    assert "paper default" in tuned
    # in-knowledge queries that are not calibration queries
    held = write_lines(tmp_path / "held.txt", ["What do bees make?", "What is a locomotive?"])
    ook = write_lines(tmp_path / "ook.txt", OUT_OF_KNOWLEDGE + MORE_OUT_OF_KNOWLEDGE)
    args = ["evaluate", str(kb), "--in-knowledge", str(held), "--out-of-knowledge", str(ook)]
    evaluated = run_at_80(monkeypatch, capsys, tmp_path, *args, "--samples", "2", "--runs", "3")
    assert "AUROC" in evaluated


def test_index_line_fits(monkeypatch, capsys, corpus_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "bm25"
    args = ["index", str(corpus_dir), "--out", str(out), "--embedder", "bm25", "--overwrite"]
    text = run_at_80(monkeypatch, capsys, tmp_path, *args)
    assert "documents" in text and "fingerprint" in text
