"""``ragbound calibrate --real-queries``: synthetic calibration queries checked against real ones."""

from __future__ import annotations

import json
from pathlib import Path

from ragbound.knowledge import KnowledgeBase
from tests.cli.runner import run
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, MORE_OUT_OF_KNOWLEDGE, OUT_OF_KNOWLEDGE


def synth_file(path: Path, queries: list[str]) -> Path:
    """Queries as `ragbound synth` writes them, with their provenance."""
    provenance = {
        "chunk_id": "c",
        "doc_id": "d",
        "prompt_id": "synth-query",
        "prompt_version": 2,
        "context": "document",
        "model": "scripted",
        "created_at": "2026-01-01T00:00:00Z",
    }
    path.write_text("".join(json.dumps({"query": q} | provenance) + "\n" for q in queries))
    return path


def calibrate_args(corpus_dir: Path, tmp_path: Path, real: list[str]) -> tuple[list[str], Path]:
    """`calibrate` on a BM25 knowledge base with synthetic in-knowledge queries, and a file
    of ``real`` questions; returns the arguments and the knowledge base folder."""
    kb_dir = tmp_path / "kb"
    KnowledgeBase.build([corpus_dir], embedder="bm25").save(kb_dir)
    synthetic = synth_file(tmp_path / "synthetic.jsonl", IN_KNOWLEDGE + MORE_IN_KNOWLEDGE)
    real_file = tmp_path / "real.txt"
    real_file.write_text("\n".join(real) + "\n")
    base = ["calibrate", str(kb_dir), "--queries", str(synthetic), "--k", "3"]
    return [*base, "--real-queries", str(real_file)], kb_dir


def test_synthetic_queries_far_from_the_real_ones_are_warned_about_and_recorded(
    monkeypatch, capsys, corpus_dir: Path, tmp_path: Path
):
    args, kb_dir = calibrate_args(corpus_dir, tmp_path, OUT_OF_KNOWLEDGE + MORE_OUT_OF_KNOWLEDGE)
    base = args[:-2]
    code, out, err = run(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    check = json.loads(out)["synthetic_check"]
    assert check["synthetic"] and check["differ"] and check["prompt_ids"] == ["synth-query@2"]
    assert check["median_real"] > check["median_calibration"]
    assert (
        check["exceedance_p_value"]
        <= check["level"] / 2
        < check["expected_fpr"]
        < check["real_fpr"]
    )
    assert "warning: the synthetic calibration queries differ" in err and "real.txt" in err
    manifest = json.loads((kb_dir / "calibration" / "manifest.json").read_text())
    assert manifest["synthetic_check"] == check

    code, out, err = run(monkeypatch, capsys, *base, "--json")
    assert code == 0, err
    assert "synthetic_check" not in json.loads(out)
    assert "--real-queries" in err  # the reminder
    manifest = json.loads((kb_dir / "calibration" / "manifest.json").read_text())
    assert manifest["synthetic_check"] is None


def test_a_silent_check_on_few_real_questions_says_it_proves_little(
    monkeypatch, capsys, corpus_dir: Path, tmp_path: Path
):
    args, _ = calibrate_args(corpus_dir, tmp_path, MORE_IN_KNOWLEDGE[::2])
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    text = " ".join(err.split())
    assert "real-question check: no difference" in text
    assert "with 8 real questions a silence is weak evidence: give 50 or more" in text


def test_null_queries_make_the_null_and_synthetic_ones_only_learn(
    monkeypatch, capsys, corpus_dir: Path, tmp_path: Path
):
    args, kb_dir = calibrate_args(corpus_dir, tmp_path, MORE_IN_KNOWLEDGE)
    synthetic, real_file = args[3], args[-1]
    base = ["calibrate", str(kb_dir), "--queries", synthetic, "--null-queries", real_file]
    code, _, err = run(monkeypatch, capsys, *base)
    assert code != 0 and "--null-queries needs --statistic combined or auto" in err

    code, out, err = run(monkeypatch, capsys, *base, "--statistic", "combined", "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["n_queries"] == len(MORE_IN_KNOWLEDGE) and info["statistic"] == "combined"
    assert "come from `ragbound synth`" not in err  # the null is made of real questions
    manifest = json.loads((kb_dir / "calibration" / "manifest.json").read_text())
    assert manifest["queries_source"] == real_file
    learned = manifest["combined"]
    # the synthetic file holds the null questions too: they leave the learning
    assert learned["n_learning"] == len(IN_KNOWLEDGE) and "also null queries" in err

    code, out, err = run(monkeypatch, capsys, *base, "--statistic", "combined")
    assert code == 0, err
    text = " ".join(out.split())
    assert f"calibrated on {len(MORE_IN_KNOWLEDGE)} queries ({len(IN_KNOWLEDGE)} other" in text
