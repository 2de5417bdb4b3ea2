"""The ragbound command, run in-process through its real entry point (main)."""

import json
import sys
from pathlib import Path

import pytest

from ragbound.cli import main
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE


def run(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["ragbound", *args])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def query_files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("queries")
    (root / "ik.txt").write_text("\n".join(IN_KNOWLEDGE) + "\n")
    (root / "ook.jsonl").write_text("".join(json.dumps({"q": q}) + "\n" for q in OUT_OF_KNOWLEDGE))
    (root / "held.csv").write_text("q\nWhat do bees make?\nWhat is a locomotive?\n")
    return {"ik": root / "ik.txt", "ook": root / "ook.jsonl", "held": root / "held.csv"}


def test_index_calibrate_check_evaluate(monkeypatch, capsys, corpus_dir, tmp_path, query_files):
    kb = tmp_path / "kb"
    code, out, err = run(monkeypatch, capsys, "index", str(corpus_dir), "--out", str(kb), "--json")
    assert code == 0, err
    assert json.loads(out)["n_chunks"] == 10

    code, out, err = run(
        monkeypatch,
        capsys,
        "calibrate",
        str(kb),
        "--queries",
        str(query_files["ik"]),
        "--k",
        "4",
        "--alpha",
        "0.1",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["n_queries"] == len(IN_KNOWLEDGE)

    code, out, err = run(
        monkeypatch,
        capsys,
        "check",
        str(kb),
        "Who wrote The Magic Flute?",
        "--queries",
        str(query_files["held"]),
        "--field",
        "q",
        "--json",
    )
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["query"] for r in rows] == [
        "Who wrote The Magic Flute?",
        "What do bees make?",
        "What is a locomotive?",
    ]
    assert rows[0]["reject"] and not rows[1]["reject"]
    assert {"query", "statistic", "score", "p_value", "reject"} <= rows[0].keys()

    code, out, err = run(
        monkeypatch,
        capsys,
        "evaluate",
        str(kb),
        "--in-knowledge",
        str(query_files["held"]),
        "--out-of-knowledge",
        str(query_files["ook"]),
        "--field",
        "q",
        "--samples",
        "2",
        "--runs",
        "3",
        "--json",
    )
    assert code == 0, err
    stats = json.loads(out)["statistics"]
    assert set(stats["mss"]) >= {"auroc", "auprc", "tpr_at_5_fpr", "der"}
    assert len(stats) == 7

    code, out, err = run(monkeypatch, capsys, "check", str(kb), "What is the gauge of a railway?")
    assert code == 0 and "in knowledge" in out


def test_add_command_and_index_refuses_to_overwrite(monkeypatch, capsys, corpus_dir, tmp_path):
    kb = tmp_path / "kb"
    assert (
        run(
            monkeypatch,
            capsys,
            "index",
            str(corpus_dir / "bees"),
            "--out",
            str(kb),
            "--embedder",
            "bm25",
        )[0]
        == 0
    )
    code, _, err = run(monkeypatch, capsys, "index", str(corpus_dir), "--out", str(kb))
    assert code == 2 and "already holds a knowledge base" in err
    code, _, err = run(monkeypatch, capsys, "add", str(kb), str(corpus_dir / "trains"))
    assert code == 2 and "already in the knowledge base" in err  # trains/0.txt is "0.txt" too
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "owls.md").write_text("Owls hunt at night.")
    code, out, err = run(monkeypatch, capsys, "add", str(kb), str(extra), "--json")
    assert code == 0, err
    assert json.loads(out)["n_chunks"] == 6


def test_user_errors_are_one_line_without_traceback(monkeypatch, capsys, tmp_path, minilm_kb_dir):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{broken\n')
    code, _, err = run(monkeypatch, capsys, "index", str(bad), "--out", str(tmp_path / "kb"))
    assert code == 2 and "bad.jsonl:2" in err and "Traceback" not in err
    assert not (tmp_path / "kb").exists()

    code, _, err = run(monkeypatch, capsys, "check", str(minilm_kb_dir), "bees")
    assert code == 2 and "no calibration yet" in err

    code, _, err = run(monkeypatch, capsys, "check", str(tmp_path / "missing"), "bees")
    assert code == 2 and "does not exist" in err


def test_calibration_from_another_kb_is_refused_then_forced(
    monkeypatch, capsys, corpus_dir, tmp_path, query_files
):
    a, b = tmp_path / "a", tmp_path / "b"
    run(monkeypatch, capsys, "index", str(corpus_dir), "--out", str(a), "--embedder", "bm25")
    run(
        monkeypatch,
        capsys,
        "index",
        str(corpus_dir / "bees"),
        "--out",
        str(b),
        "--embedder",
        "bm25",
    )
    assert (
        run(
            monkeypatch,
            capsys,
            "calibrate",
            str(a),
            "--queries",
            str(query_files["ik"]),
            "--k",
            "3",
        )[0]
        == 0
    )
    (b / "calibration").symlink_to(a / "calibration")
    code, _, err = run(monkeypatch, capsys, "check", str(b), "bees")
    assert code == 2 and "calibrate again" in err
    assert run(monkeypatch, capsys, "check", str(b), "bees", "--force")[0] == 0


def test_help_lists_commands(monkeypatch, capsys):
    code, out, _ = run(monkeypatch, capsys, "--help")
    assert code == 0
    for command in ("index", "add", "calibrate", "check", "evaluate"):
        assert command in out


def test_synth_refuses_bad_options_in_one_line(monkeypatch, capsys, minilm_kb_dir, tmp_path):
    out = str(tmp_path / "q.jsonl")
    code, _, err = run(
        monkeypatch, capsys, "synth", str(minilm_kb_dir), "--out", out, "--context", "page"
    )
    assert code == 2 and "--context must be document or chunk" in err

    code, _, err = run(
        monkeypatch, capsys, "synth", str(minilm_kb_dir), "--out", out, "--examples", "nope.json"
    )
    assert code == 2 and "examples file not found: nope.json" in err

    missing_model = str(tmp_path / "absent.gguf")
    code, _, err = run(
        monkeypatch,
        capsys,
        "synth",
        str(minilm_kb_dir),
        "--out",
        out,
        "--llm",
        f"local:{missing_model}",
    )
    assert code == 2 and ("absent.gguf" in err or "llama-cpp-python" in err)
    assert "Traceback" not in err
    assert not Path(out).exists()  # nothing half-written


def test_shift_batch_and_log(monkeypatch, capsys, minilm_kb_dir, tmp_path):
    from ragbound.knowledge import KnowledgeBase
    from tests.texts import MORE_IN_KNOWLEDGE, MORE_OUT_OF_KNOWLEDGE

    kb = tmp_path / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(kb)
    calibration = tmp_path / "cal.txt"
    calibration.write_text("\n".join(IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10]) + "\n")
    code, _, err = run(
        monkeypatch, capsys, "calibrate", str(kb), "--queries", str(calibration), "--k", "4"
    )
    assert code == 0, err

    batch = tmp_path / "batch.txt"
    batch.write_text("\n".join(OUT_OF_KNOWLEDGE + MORE_OUT_OF_KNOWLEDGE) + "\n")
    code, out, err = run(monkeypatch, capsys, "shift", str(kb), "--queries", str(batch), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["test"] == "ks" and report["reject"] and report["n_test"] == 16

    log = tmp_path / "log.jsonl"
    lines = [
        {"time": f"2026-11-0{1 + i // 8}T10:{i % 60:02d}:00Z", "query": q}
        for i, q in enumerate(MORE_IN_KNOWLEDGE[10:] + MORE_OUT_OF_KNOWLEDGE[:6])
    ]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["shift", str(kb), "--queries", str(log), "--window", "6", "--json"]
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    windows = [json.loads(line) for line in out.splitlines()]
    assert [w["n"] for w in windows] == [6, 6]
    assert {"start", "end", "n", "statistic", "p_value", "alarm"} <= set(windows[0])
    assert windows[1]["alarm"] and windows[1]["p_value"] < windows[0]["p_value"]
    assert "2 window(s) tested" in err

    code, out, err = run(monkeypatch, capsys, *args)  # nothing new since the last run
    assert code == 0 and out == "" and "no window completed" in err

    code, out, err = run(monkeypatch, capsys, *args, "--restart")
    assert len(out.splitlines()) == 2

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"time": 1, "query": "How do bees dance?"}\n{"time": 2}\n')
    code, _, err = run(monkeypatch, capsys, "shift", str(kb), "--queries", str(bad))
    assert code == 2 and "bad.jsonl:2 (field 'query'): missing" in err
