"""``ragbound index`` and ``ragbound add``."""

import json

from tests.cli.runner import run


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


def test_granularity_is_indexed_calibrated_and_checked(monkeypatch, capsys, tmp_path):
    corpus = tmp_path / "mill.txt"
    corpus.write_text(
        "The mill grinds wheat into flour. Its wheel turns in the river. "
        "Millers once paid a tithe to the lord. The river froze in the winter of 1709. "
        "Then the mill stood still for two months."
    )
    kb = tmp_path / "kb"
    args = ["index", str(corpus), "--out", str(kb), "--embedder", "bm25", "--chunk-words", "12"]
    code, out, err = run(
        monkeypatch, capsys, *args, "--overlap", "0", "--granularity", "sentence", "--json"
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["granularity"] == "sentence" and report["n_units"] == 5
    queries = tmp_path / "queries.txt"
    queries.write_text("\n".join(["mill wheat", "river wheel", "tithe lord", "winter 1709"] * 6))
    base = ["calibrate", str(kb), "--queries", str(queries), "--k", "2", "--json"]
    code, out, err = run(monkeypatch, capsys, *base)
    assert code == 0, err
    assert json.loads(out)["granularity"] == "sentence"
    code, out, err = run(monkeypatch, capsys, *base, "--granularity", "chunk")
    assert code == 0, err
    assert json.loads(out)["granularity"] == "chunk"
    code, out, err = run(monkeypatch, capsys, "check", str(kb), "tithe paid to the lord", "--json")
    assert code == 0, err
    neighbours = json.loads(out)["neighbours"]
    assert "Millers once paid a tithe to the lord." in neighbours[0]["text"]
