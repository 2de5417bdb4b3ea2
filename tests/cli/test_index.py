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
