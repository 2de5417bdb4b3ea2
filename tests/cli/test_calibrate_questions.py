"""Where the questions of a calibration's null came from: recorded by ``calibrate``, and a null
of synthetic questions alone marked approximate wherever ``check`` shows p-values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbound.detect.calibration import APPROXIMATE
from ragbound.knowledge import KnowledgeBase
from tests.cli.runner import run
from tests.cli.test_calibrate_real import synth_file
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE

QUESTION = "How do bees make honey?"


@pytest.fixture(scope="module")
def bm25_kb(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    kb_dir = tmp_path_factory.mktemp("questions") / "kb"
    KnowledgeBase.build([corpus_dir], embedder="bm25").save(kb_dir)
    return kb_dir


def calibrate(monkeypatch, capsys, kb_dir: Path, *args: str) -> tuple[dict, str]:
    """``calibrate --json`` with ``args``; the printed info and the saved manifest's questions."""
    code, out, err = run(monkeypatch, capsys, "calibrate", str(kb_dir), "--k", "3", *args)
    assert code == 0, err
    manifest = json.loads((kb_dir / "calibration" / "manifest.json").read_text())
    return manifest["questions"], out


def decided_test(monkeypatch, capsys, kb_dir: Path) -> dict:
    """The boundary test of ``decide --json`` on one question."""
    code, out, err = run(monkeypatch, capsys, "decide", str(kb_dir), QUESTION, "--json")
    assert code == 0, err
    return json.loads(out)["test"]


def test_synthetic_questions_alone_are_recorded_and_marked_approximate(
    monkeypatch, capsys, bm25_kb: Path, tmp_path: Path
) -> None:
    synthetic = synth_file(tmp_path / "synth.jsonl", IN_KNOWLEDGE + MORE_IN_KNOWLEDGE)
    n = len(IN_KNOWLEDGE + MORE_IN_KNOWLEDGE)
    questions, out = calibrate(monkeypatch, capsys, bm25_kb, "--queries", str(synthetic))
    assert questions == {
        "origin": "synthetic",
        "n_real": 0,
        "n_synthetic": n,
        "n_unknown": 0,
        "declared": False,
    }
    assert APPROXIMATE in " ".join(out.split())
    assert decided_test(monkeypatch, capsys, bm25_kb)["approximate"] is True
    code, out, err = run(monkeypatch, capsys, "decide", str(bm25_kb), QUESTION)
    assert code == 0, err
    assert sum(APPROXIMATE in line for line in out.splitlines()) == 1  # one line


def test_a_plain_file_is_of_unknown_origin_until_declared(
    monkeypatch, capsys, bm25_kb: Path, tmp_path: Path
) -> None:
    plain = tmp_path / "questions.txt"
    plain.write_text("\n".join(IN_KNOWLEDGE + MORE_IN_KNOWLEDGE) + "\n")
    questions, out = calibrate(monkeypatch, capsys, bm25_kb, "--queries", str(plain))
    assert questions["origin"] == "unknown" and questions["n_unknown"] == 28
    assert "--questions real|synthetic" in " ".join(out.split())
    assert decided_test(monkeypatch, capsys, bm25_kb)["approximate"] is False

    questions, _ = calibrate(
        monkeypatch, capsys, bm25_kb, "--queries", str(plain), "--questions", "real"
    )
    assert questions["origin"] == "real" and questions["n_real"] == 28 and questions["declared"]
    code, out, _ = run(monkeypatch, capsys, "decide", str(bm25_kb), QUESTION)
    assert code == 0 and APPROXIMATE not in out

    questions, out = calibrate(
        monkeypatch, capsys, bm25_kb, "--queries", str(plain), "--questions", "synthetic", "--json"
    )
    assert questions["origin"] == "synthetic" and json.loads(out)["questions"] == questions


def test_records_that_say_real_beside_synthetic_ones_make_a_mixed_null(
    monkeypatch, capsys, bm25_kb: Path, tmp_path: Path
) -> None:
    synthetic = synth_file(tmp_path / "synth.jsonl", MORE_IN_KNOWLEDGE)
    real = [json.dumps({"query": q, "source": "real"}) for q in IN_KNOWLEDGE]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(synthetic.read_text() + "\n".join(real) + "\n")
    questions, out = calibrate(monkeypatch, capsys, bm25_kb, "--queries", str(mixed))
    assert (questions["origin"], questions["n_real"], questions["n_synthetic"]) == (
        "mixed",
        len(IN_KNOWLEDGE),
        len(MORE_IN_KNOWLEDGE),
    )
    assert APPROXIMATE not in out
    assert decided_test(monkeypatch, capsys, bm25_kb)["approximate"] is False


def test_with_null_queries_the_null_file_decides(
    monkeypatch, capsys, bm25_kb: Path, tmp_path: Path
) -> None:
    synthetic = synth_file(tmp_path / "synth.jsonl", MORE_IN_KNOWLEDGE)
    real = tmp_path / "real.txt"
    real.write_text("\n".join(IN_KNOWLEDGE) + "\n")
    args = ["--queries", str(synthetic), "--null-queries", str(real), "--statistic", "combined"]
    code, _, err = run(monkeypatch, capsys, "calibrate", str(bm25_kb), *args, "--questions", "real")
    assert code == 0, err
    manifest = json.loads((bm25_kb / "calibration" / "manifest.json").read_text())
    assert manifest["questions"]["origin"] == "real"
    assert manifest["questions"]["n_real"] == len(IN_KNOWLEDGE)  # the null, not the learners
    assert decided_test(monkeypatch, capsys, bm25_kb)["approximate"] is False
