"""End to end with the real bundled local model on two PolicyBench pages: facts -> QA ->
filters -> leave-one-out run -> evaluation -> labels and agreement -> results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.datasets import data_root
from ragbound.bench import RunDir
from ragbound.bench.labels import LabelSession, agreement_report
from tests.cli.runner import run as run_cli
from tests.markers import needs_local_model

BTT = data_root() / "policybench" / "data"
PAGES = ("BTT_36.txt", "BTT_46.txt")  # road markings and traffic lights: prose, no tables

pytestmark = [
    pytest.mark.slow,
    needs_local_model,
    pytest.mark.skipif(
        not all((BTT / "BTT_txts_from_pdf" / page).is_file() for page in PAGES),
        reason=f"PolicyBench pages not found under {BTT}",
    ),
]


def cli_json(monkeypatch, capsys, *args: str) -> list[dict]:
    code, out, err = run_cli(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_policybench_pages_end_to_end(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.setenv("RAGBOUND_CACHE", str(tmp_path / "cache"))
    docs = [str(BTT / "BTT_txts_from_pdf" / page) for page in PAGES]
    facts, qa, kept = tmp_path / "facts.json", tmp_path / "qa.json", tmp_path / "kept.json"

    cli_json(monkeypatch, capsys, "bench", "facts", *docs, "--out", str(facts))
    fact_set = json.loads(facts.read_text())
    assert len(fact_set["documents"]) == 2 and len(fact_set["facts"]) >= 4
    for fact in fact_set["facts"]:  # each fact cites a sentence of its own document
        assert fact["text"].strip() and fact["sentence"].strip() and fact["sentence_index"] >= 0
    cli_json(monkeypatch, capsys, "bench", "qa", str(facts), "--out", str(qa))
    pairs = json.loads(qa.read_text())["pairs"]
    assert len(pairs) >= 4 and all(p["question"].strip() and p["answer"].strip() for p in pairs)
    cli_json(monkeypatch, capsys, "bench", "filter", str(qa), "--out", str(kept))
    filtered = json.loads(kept.read_text())
    assert len(filtered["kept"]) + len(filtered["dropped"]) == len(pairs) and filtered["kept"]

    config = tmp_path / "bench.toml"
    config.write_text(
        'knowledge = ["kept.json"]\nmodels = ["local"]\nstrategies = ["direct", "rag"]\n'
        'prompts = ["bench-system-conservative"]\nk = 2\nlimit = 2\nout = "run"\n'
    )
    summary = cli_json(monkeypatch, capsys, "bench", "run", str(config))[-1]
    assert summary["failed"] == 0 and summary["done"] == summary["items"] >= 2
    run = RunDir(tmp_path / "run")
    # leave-one-out: no question ever sees its own pair in its context
    for item in run.inputs():
        assert all(c.qa_id != item.qa_id for c in item.context)

    evaluation = cli_json(monkeypatch, capsys, "bench", "evaluate", str(run.root))[-1]
    abstention = next(s for s in evaluation["specs"] if s["spec"] == "abstention")
    assert abstention["n_evaluated"] == summary["items"]
    assert sum(abstention["outcomes"].values()) + abstention["n_unresolved"] == summary["items"]

    # two annotators (scripted here) label the whole sample; one disagrees on the first item
    session = LabelSession(run.root, ["abstention"], n=summary["items"])
    for annotator in ("ann", "bob"):
        for number, item in enumerate(session.items):
            says = "yes" if "know" in item.answer.lower() else "no"
            if annotator == "bob" and number == 0:
                says = "no" if says == "yes" else "yes"
            session.record(annotator, item.input_id, {"abstention": says})
    report = agreement_report(run.root)
    assert report.annotators == ["ann", "bob"] and len(report.disagreements) == 1
    assert report.pairs[0].n_items == len(session.items) and report.pairs[0].observed < 1
    versus = next(e for e in report.evaluators if e.task == "abstention")
    assert sum(map(sum, versus.confusion)) + versus.evaluator_failed + len(versus.unresolved) == (
        len(session.items)
    )
    printed = cli_json(monkeypatch, capsys, "bench", "agreement", str(run.root))[-1]
    assert printed["disagreements"][0]["input_id"] == report.disagreements[0].input_id

    results = cli_json(monkeypatch, capsys, "bench", "results", str(run.root))[-1]
    cells = results["evaluators"][0]["cells"]
    assert {c["strategy"] for c in cells} == {"direct", "rag"}
    assert all(c["abstention"]["n"] + c["verdicts"]["abstention"]["unparsed"] >= 1 for c in cells)
