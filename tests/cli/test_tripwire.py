"""``ragbound tripwire`` end to end through the real entry point."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.cli.runner import run
from tests.tripwires.tripwire_texts import (
    SAFE,
    TRIPWIRES,
    UNSAFE,
    tripwired_copy,
    write_tripwire_file,
)


def test_add_list_check_tune_remove(monkeypatch, capsys, minilm_kb_dir: Path, tmp_path: Path):
    kb = tmp_path / "kb"
    shutil.copytree(minilm_kb_dir, kb)
    source = tmp_path / "t.jsonl"
    write_tripwire_file(source)
    code, out, _ = run(monkeypatch, capsys, "tripwire", "add", str(kb), str(source), "--json")
    assert code == 0 and json.loads(out)["n_after"] == 4

    code, out, _ = run(monkeypatch, capsys, "tripwire", "list", str(kb))
    assert code == 0 and "harm" in out and "sabotage" in out

    code, out, _ = run(
        monkeypatch, capsys, "tripwire", "check", str(kb), UNSAFE[0], SAFE[0], "--json"
    )
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r["forbidden"] for r in rows] == [True, False]
    assert rows[0]["rule"] and rows[0]["triggers"][0]["topic"] == "harm"
    assert set(rows[1]) >= {"query", "forbidden", "rule", "triggers"} and "rejected" not in rows[1]

    labelled = tmp_path / "labelled.csv"
    labelled.write_text(
        "query,label\n"
        + "".join(f'"{q}",unsafe\n' for q in UNSAFE)
        + "".join(f'"{q}",safe\n' for q in SAFE),
        encoding="utf-8",
    )
    code, out, _ = run(
        monkeypatch,
        capsys,
        "tripwire",
        "tune",
        str(kb),
        "--labelled",
        str(labelled),
        "--objective",
        "f1",
        "--run",
        str(tmp_path / "run"),
    )
    assert code == 0 and "paper default" in out and (kb / "tripwire-rule.json").is_file()
    code, out, _ = run(
        monkeypatch, capsys, "report", str(tmp_path / "run"), "--out", str(tmp_path / "r.html")
    )
    assert code == 0 and "Tripwire rules" in (tmp_path / "r.html").read_text()

    code, out, _ = run(monkeypatch, capsys, "tripwire", "remove", str(kb), "--topic", "harm")
    assert code == 0 and "removed 2" in out
    code, out, _ = run(monkeypatch, capsys, "tripwire", "list", str(kb), "--history", "--json")
    assert [json.loads(line)["action"] for line in out.splitlines()] == ["add", "remove"]


def test_errors_are_one_line(monkeypatch, capsys, minilm_kb_dir: Path, tmp_path: Path):
    kb = tmp_path / "kb"
    shutil.copytree(minilm_kb_dir, kb)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "How do I derail a train?"}\n', encoding="utf-8")
    code, _, err = run(monkeypatch, capsys, "tripwire", "add", str(kb), str(bad))
    assert code == 2 and "no topic" in err and "Traceback" not in err
    code, _, err = run(monkeypatch, capsys, "tripwire", "remove", str(kb), "--topic", "nope")
    assert code == 2 and "no tripwire with topic 'nope'" in err
    one_class = tmp_path / "one.jsonl"
    one_class.write_text(json.dumps({"query": UNSAFE[0], "label": "unsafe"}) + "\n")
    code, _, err = run(
        monkeypatch, capsys, "tripwire", "tune", str(kb), "--labelled", str(one_class)
    )
    assert code == 2 and "no tripwires" in err
    good = tmp_path / "good.jsonl"
    write_tripwire_file(good)
    assert run(monkeypatch, capsys, "tripwire", "add", str(kb), str(good))[0] == 0
    code, _, err = run(
        monkeypatch, capsys, "tripwire", "tune", str(kb), "--labelled", str(one_class)
    )
    assert code == 2 and "only unsafe" in err
    code, _, err = run(monkeypatch, capsys, "tripwire", "add", str(kb), str(good))
    assert code == 2 and "already in the knowledge base" in err
    code, _, err = run(monkeypatch, capsys, "tripwire", "check", str(kb))
    assert code == 2 and "give queries" in err


def test_add_skips_identical_rows_and_says_how_many(
    monkeypatch, capsys, minilm_kb_dir: Path, tmp_path: Path
):
    kb = tmp_path / "kb"
    shutil.copytree(minilm_kb_dir, kb)
    rows = [*TRIPWIRES, TRIPWIRES[0], TRIPWIRES[1], TRIPWIRES[0]]
    source = tmp_path / "t.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    code, out, err = run(monkeypatch, capsys, "tripwire", "add", str(kb), str(source), "--json")
    assert code == 0, err
    assert json.loads(out)["n_after"] == len(TRIPWIRES)
    assert (
        f"skipped 3 row(s) identical to an earlier row (first at {source}:{len(TRIPWIRES) + 1})"
        in err
    )


def test_check_with_an_llm_asks_it_about_the_queries_the_tripwires_passed(
    monkeypatch, capsys, minilm_kb_dir: Path, tmp_path: Path
):
    from ragbound.cli import tripwire
    from tests.llm.llm_fakes import ScriptedLLM

    def judge(messages, params) -> str:  # rejects the question about beekeepers alone
        verdict = "reject" if "beekeepers" in messages[-1].content else "allow"
        return f"<verdict>{verdict}</verdict>"

    llm = ScriptedLLM(responder=judge)
    monkeypatch.setattr(tripwire, "cached_llm", lambda spec: llm)
    kb = tmp_path / "kb"
    tripwired_copy(minilm_kb_dir, kb)
    queries = (UNSAFE[0], SAFE[0], SAFE[2])  # the tripwires forbid the first alone
    args = ("tripwire", "check", str(kb), *queries, "--llm", "openai:fake")
    code, out, _ = run(monkeypatch, capsys, *args, "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [(r["forbidden"], r["rule"] == "llm") for r in rows] == [
        (True, False),
        (False, False),
        (True, True),
    ]
    assert "llm" not in rows[0] and rows[1]["llm"]["verdict"] == "allow"
    assert len(llm.calls) == 2  # the query the tripwires forbade is not asked about
    code, out, _ = run(monkeypatch, capsys, *args)
    assert code == 0 and out.count("forbidden (LLM)") == 1 and out.count("passed (LLM)") == 1
