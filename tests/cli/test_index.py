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
    code, out, err = run(monkeypatch, capsys, "decide", str(kb), "tithe paid to the lord", "--json")
    assert code == 0, err
    neighbours = json.loads(out)["neighbours"]
    assert "Millers once paid a tithe to the lord." in neighbours[0]["text"]


def test_records_ids_and_keys_are_document_ids_unless_at_line(monkeypatch, capsys, tmp_path):
    from ragbound.knowledge import KnowledgeBase

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    records = [{"id": "pmid-0", "text": "Bees make honey."}, {"text": "Trains run on rails."}]
    (corpus / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    keyed = {"21645374": {"text": "Lace plants perforate their leaves."}}
    (corpus / "keyed.json").write_text(json.dumps(keyed, indent=2))
    for option, ids in (
        ([], ["21645374", "pmid-0", "records.jsonl:2"]),
        (["--id-field", "@line"], ["keyed.json:0", "records.jsonl:1", "records.jsonl:2"]),
    ):
        kb = tmp_path / f"kb{len(option)}"
        args = ["index", str(corpus), "--out", str(kb), "--embedder", "bm25", *option]
        code, _, err = run(monkeypatch, capsys, *args)
        assert code == 0, err
        assert [c.doc_id for c in KnowledgeBase.load(kb).chunks] == ids


def test_a_repeated_record_id_says_how_to_index_by_line(monkeypatch, capsys, tmp_path):
    corpus = tmp_path / "paragraphs.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": "article-1", "text": t}) + "\n" for t in ("One.", "Two."))
    )
    args = ["index", str(corpus), "--out", str(tmp_path / "kb"), "--embedder", "bm25"]
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "error: duplicate document id 'article-1'" in err
    assert "give --id-field @line for file-and-line ids" in err
    code, _, err = run(monkeypatch, capsys, *args, "--id-field", "@line")
    assert code == 0, err
