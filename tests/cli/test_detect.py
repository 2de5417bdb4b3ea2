"""``ragbound calibrate | check | evaluate`` end to end, and one-line errors."""

import json
from pathlib import Path

import pytest

from ragbound.knowledge import KnowledgeBase
from ragbound.report import load_run
from tests.cli.runner import run
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE


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
        "decide",
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
    assert rows[0]["test"]["out_of_knowledge"] and not rows[1]["test"]["out_of_knowledge"]
    assert [r["action"] for r in rows] == ["abstain", "answer", "answer"]
    assert {"query", "statistic", "score", "p_value", "out_of_knowledge"} <= rows[0]["test"].keys()

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

    code, out, err = run(monkeypatch, capsys, "decide", str(kb), "What is the gauge of a railway?")
    assert code == 0 and "in knowledge" in out


def test_user_errors_are_one_line_without_traceback(monkeypatch, capsys, tmp_path, minilm_kb_dir):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{broken\n')
    code, _, err = run(monkeypatch, capsys, "index", str(bad), "--out", str(tmp_path / "kb"))
    assert code == 2 and "bad.jsonl:2" in err and "Traceback" not in err
    assert not (tmp_path / "kb").exists()

    code, _, err = run(monkeypatch, capsys, "decide", str(minilm_kb_dir), "bees")
    assert code == 2 and "no calibration yet" in err

    code, _, err = run(monkeypatch, capsys, "decide", str(tmp_path / "missing"), "bees")
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
    code, _, err = run(monkeypatch, capsys, "decide", str(b), "bees")
    assert code == 2 and "calibrate again" in err
    assert run(monkeypatch, capsys, "decide", str(b), "bees", "--force")[0] == 0


def test_calibrate_defaults_come_from_the_detector_config_and_tau_auto_resolves(
    monkeypatch, capsys, tmp_path, minilm_kb_dir, query_files
):
    import shutil

    from ragbound.detect.config import DEFAULTS

    kb = tmp_path / "kb"
    shutil.copytree(minilm_kb_dir, kb)
    args = ["calibrate", str(kb), "--queries", str(query_files["ik"]), "--k", "4", "--json"]
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    info = json.loads(out)
    assert (info["tau"], info["statistic"], info["alpha"], info["p_value_method"]) == (
        DEFAULTS.tau,
        DEFAULTS.statistic,
        DEFAULTS.alpha,
        DEFAULTS.p_value_method,
    )
    code, out, err = run(monkeypatch, capsys, *args, "--tau", "auto", "--p-value-method", "paper")
    assert code == 0, err
    info = json.loads(out)
    assert info["tau"] == 0.05 and info["p_value_method"] == "paper"  # MiniLM's temperature
    saved = json.loads((kb / "calibration" / "manifest.json").read_text())
    assert saved["detector"]["tau"] == 0.05


def test_calibrate_auto_prints_its_candidates_and_decide_uses_the_pick(
    monkeypatch, capsys, tmp_path, minilm_kb_dir, query_files
):
    import shutil

    kb = tmp_path / "kb"
    shutil.copytree(minilm_kb_dir, kb)
    args = ["calibrate", str(kb), "--queries", str(query_files["ik"]), "--statistic", "auto"]
    code, out, err = run(monkeypatch, capsys, *args, "--seed", "1", "--json")
    assert code == 0, err
    info = json.loads(out)
    picked = info["selection"]["picked"]
    assert info["statistic"] == picked["statistic"]
    assert info["n_queries"] == len(IN_KNOWLEDGE) // 2  # the other half learned
    best, proposed = info["selection"]["candidates"][0], info["selection"]["proposed"]
    assert proposed["auroc"] >= best["auroc"] - info["selection"]["tolerance"]
    # ten documents: too few to tell candidates apart, so auto keeps the default and says why
    assert picked == info["selection"]["default"] and picked["statistic"] == "mss"
    assert info["selection"]["kept_default_because"].startswith("only ")
    code, out, err = run(monkeypatch, capsys, "decide", str(kb), "bees", "--json")
    assert code == 0, err
    assert json.loads(out)["test"]["statistic"] == picked["statistic"]
    code, out, err = run(monkeypatch, capsys, *args, "--statistic", "combined")
    assert code == 0, err
    text = " ".join(out.split())
    assert "(6 other queries learned the score)" in text and "combined critical value" in text
    code, out, err = run(monkeypatch, capsys, "decide", str(kb), "bees", "--json")
    assert json.loads(out)["test"]["statistic"] == "combined"
    code, out, err = run(monkeypatch, capsys, *args)
    text = " ".join(out.split())
    assert code == 0 and "(picked)" in out and "kept chunk mss (the default): only " in text, err
    assert all(len(line) <= 80 for line in out.splitlines())


def test_evaluate_reports_the_sample_it_drew_and_warns_when_a_file_is_small(
    monkeypatch, capsys, corpus_dir, tmp_path
):
    kb = tmp_path / "kb"
    queries = tmp_path / "calibration.txt"
    queries.write_text("\n".join(IN_KNOWLEDGE) + "\n")
    held = tmp_path / "held.txt"
    held.write_text("What do bees make?\nWhat is a locomotive?\n")
    ook = tmp_path / "ook.txt"
    ook.write_text("\n".join(OUT_OF_KNOWLEDGE) + "\n")
    for args in (
        ["index", str(corpus_dir), "--out", str(kb), "--embedder", "bm25"],
        ["calibrate", str(kb), "--queries", str(queries), "--k", "3"],
    ):
        code, _, err = run(monkeypatch, capsys, *args)
        assert code == 0, err
    evaluate = ["evaluate", str(kb), "--in-knowledge", str(held), "--out-of-knowledge", str(ook)]

    code, out, err = run(monkeypatch, capsys, *evaluate, "--json")  # 2 and 4 queries; 300 asked
    assert code == 0, err
    assert err == (
        f"warning: {held} (2 queries) and {ook} (4 queries) hold fewer than --samples 300; "
        "every draw takes every query, so one run is made instead of 10\n"
    )
    report = json.loads(out)
    assert (report["samples"], report["drawn_in"], report["drawn_out"]) == (300, 2, 4)
    assert report["runs"] == 1
    code, out, _ = run(monkeypatch, capsys, *evaluate)
    assert "one run on every query (2 in-knowledge, 4 out-of-knowledge)" in " ".join(out.split())

    code, out, err = run(monkeypatch, capsys, *evaluate, "--samples", "3", "--runs", "5")
    assert code == 0
    assert (
        err
        == f"warning: {held} (2 queries) holds fewer than --samples 3; each draw takes all of them\n"
    )
    assert "5 runs x 2 in-knowledge and 3 out-of-knowledge" in " ".join(out.split())

    code, out, err = run(monkeypatch, capsys, *evaluate, "--samples", "4", "--runs", "5", "--json")
    assert err.startswith(f"warning: {held} (2 queries) holds fewer than --samples 4; every draw")
    assert json.loads(out)["runs"] == 1  # the other file holds exactly 4: both taken whole

    run_dir = tmp_path / "run"
    drawn = ["--samples", "2", "--runs", "5", "--run", str(run_dir)]
    code, out, err = run(monkeypatch, capsys, *evaluate, *drawn)
    assert code == 0 and err == ""
    assert "5 runs x 2 per side" in " ".join(out.split())
    assert out.index("mss (default)") < out.index("avgknn")  # the default first, then a to z
    inputs = load_run(run_dir).inputs  # what `ragbound report` names
    assert inputs is not None
    assert (inputs.in_knowledge, inputs.out_of_knowledge) == (str(held), str(ook))
    assert (inputs.knowledge_base, inputs.corpus) == (str(kb), [str(corpus_dir)])
    assert inputs.embedder == KnowledgeBase.load(kb).manifest.embedder.name
    assert str(queries) in inputs.calibration
