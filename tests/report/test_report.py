"""Run folders, plots and the HTML report, checked in a real headless Chromium."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks.shift import write_shift_rates
from ragbound.detect import DEFAULT_STATISTIC, Guard
from ragbound.detect.evaluate import evaluate, evaluation_inputs, statistic_scores
from ragbound.detect.monitor import ShiftMonitor, WindowSpec
from ragbound.detect.shift import shift_test
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.report import load_run, record_evaluation, record_shift, record_windows, write_report
from ragbound.report.plots import POOLED_AUROC
from ragbound.stats import ks_two_sample
from tests.browser import launch, needs_chromium, page_errors
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, MORE_OUT_OF_KNOWLEDGE, OUT_OF_KNOWLEDGE


@pytest.fixture(scope="module")
def run_dir(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder with every part: evaluation, batch shift, monitor, shift rates."""
    root = tmp_path_factory.mktemp("run")
    guard = Guard.calibrate(
        KnowledgeBase.load(minilm_kb_dir), IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10], k=4
    )
    ik, ook = MORE_IN_KNOWLEDGE[10:], OUT_OF_KNOWLEDGE + MORE_OUT_OF_KNOWLEDGE
    ik_file, ook_file = root / "held-out.txt", root / "off-topic.txt"
    ik_file.write_text("\n".join(ik) + "\n")
    ook_file.write_text("\n".join(ook) + "\n")
    scored = statistic_scores(guard, ik, ook)
    report = evaluate(guard, ik, ook, samples=6, runs=3, scored=scored)
    record_evaluation(root, report, scored, evaluation_inputs(guard, ik_file, ook_file))
    record_shift(root, shift_test(guard, ook))
    log = root / "log.jsonl"
    log.write_text(
        "".join(
            json.dumps({"time": 1_700_000_000 + 60 * i, "query": q}) + "\n"
            for i, q in enumerate(ik + ook)
        )
    )
    record_windows(root, ShiftMonitor(guard, WindowSpec(size=5), correction="none").follow(log))
    write_shift_rates(root, small_shift_rate_experiment())
    return root


def small_shift_rate_experiment() -> dict:
    rng = np.random.default_rng(0)
    rows = []
    for ratio in (0.0, 0.5, 1.0):
        p = [
            ks_two_sample(rng.normal(size=30), rng.normal(1.5 * (1 - ratio), 1.0, 30)).p_value
            for _ in range(20)
        ]
        rows.append({"ratio": ratio, "shifted_rate": float(np.mean(np.array(p) <= 0.05))})
    return {
        "trials": 20,
        "size": 30,
        "alpha": 0.05,
        "ratios": [0.0, 0.5, 1.0],
        "mss": {"toy": {"rows": rows}},
    }


def test_the_run_folder_reads_back_every_part(run_dir: Path) -> None:
    run = load_run(run_dir)
    assert run.evaluation is not None and set(run.scores) == set(run.evaluation.statistics)
    assert run.shift is not None and run.shift.shifted
    assert [w.n for w in run.windows] == [5] * (len(run.windows))
    assert run.windows[-1].alarm
    assert run.shift_rates is not None and run.shift_rates["mss"]["toy"]["rows"][0]["ratio"] == 0.0


def test_an_empty_run_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nothing to report"):
        load_run(tmp_path)
    with pytest.raises(InputError, match="no such run folder"):
        load_run(tmp_path / "missing")


def test_the_report_is_self_contained(run_dir: Path, tmp_path: Path) -> None:
    out = write_report(load_run(run_dir), tmp_path / "report.html")
    page = out.read_text()
    assert "http://" not in page and "https://" not in page  # nothing fetched from anywhere
    assert page.count("data:image/png;base64,") == 7 + 1 + 1 + 1  # histograms, ROC, rates, monitor
    assert "3 runs x 6 per side" in page  # 6 of the 6 in-knowledge and of 16 out, 3 times


def test_without_matplotlib_the_report_has_its_tables_and_names_the_extra(
    run_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    from ragbound.report import plots

    monkeypatch.setattr(plots, "can_plot", lambda: False)  # as in a core-only install
    page = write_report(load_run(run_dir), tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<img" not in page and "<table" in page
    assert page.count("Plot not drawn") >= 2 and "pip install &#x27;ragbound[report]&#x27;" in page
    with pytest.raises(InputError, match=r"ragbound\[report\]"):
        plots.histogram("mss", {"in": [0.1], "out": [0.2]})


def test_the_default_statistic_comes_first_marked_then_the_others_alphabetically(
    run_dir: Path, tmp_path: Path
) -> None:
    run = load_run(run_dir)
    assert run.evaluation is not None and run.evaluation.default_statistic == DEFAULT_STATISTIC
    page = write_report(run, tmp_path / "report.html").read_text()
    table = page[page.index("<table id='evaluation'>") :]
    names = re.findall(r"<tr><td>([^<]+)</td>", table[: table.index("</table>")])
    others = sorted(set(run.evaluation.statistics) - {DEFAULT_STATISTIC})
    assert names == [f"{DEFAULT_STATISTIC} (default)", *others]
    captions = re.findall(r"<figcaption>(\w+): in- vs out-of-knowledge", page)
    assert captions == [DEFAULT_STATISTIC, *others]  # the histograms in the table's order


def test_the_report_names_the_inputs_of_the_evaluation(
    run_dir: Path, minilm_kb_dir: Path, corpus_dir: Path, tmp_path: Path
) -> None:
    page = write_report(load_run(run_dir), tmp_path / "report.html").read_text()
    inputs = page[page.index("<table id='inputs'>") :]
    inputs = inputs[: inputs.index("</table>")]
    for label, value in [
        ("knowledge base", minilm_kb_dir),
        ("corpus", corpus_dir),
        ("in-knowledge questions", run_dir / "held-out.txt"),
        ("out-of-knowledge questions", run_dir / "off-topic.txt"),
        ("embedder", "all-MiniLM-L6-v2"),
    ]:
        assert f"<td>{label}</td><td><code>{value}</code></td>" in inputs
    when = re.search(r"<td>evaluated at \(UTC\)</td><td><code>([^<]+)</code>", inputs)
    assert when, "no evaluation time"
    age = dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(when.group(1))
    assert dt.timedelta(0) <= age < dt.timedelta(hours=1)  # recorded when the run was made


def test_a_run_folder_without_inputs_says_so(run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    saved = json.loads((copy / "evaluation.json").read_text())
    del saved["inputs"]  # as benchmarks/run.py records an evaluation
    (copy / "evaluation.json").write_text(json.dumps(saved))
    page = write_report(load_run(copy), tmp_path / "report.html").read_text()
    assert "Inputs not recorded" in page


def test_the_two_aurocs_are_named_under_the_table_and_in_the_roc_legend(
    run_dir: Path, tmp_path: Path
) -> None:
    page = write_report(load_run(run_dir), tmp_path / "report.html").read_text()
    note = re.search(r"<p id='auroc-note'>(.*?)</p>", page)
    assert note and "the mean of 3 draws" in note.group(1)
    assert f"&ldquo;{POOLED_AUROC}&rdquo;" in note.group(1)
    assert f"<figcaption>ROC curves per statistic; legend: {POOLED_AUROC}</figcaption>" in page


def test_text_from_the_run_folder_is_escaped(run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    shift = json.loads((copy / "shift.json").read_text())
    (copy / "shift.json").write_text(json.dumps({**shift, "test": "<b>ks</b>"}))
    rates = json.loads((copy / "shift_rates.json").read_text())
    (copy / "shift_rates.json").write_text(json.dumps({**rates, "trials": "<i>20</i>"}))
    page = write_report(load_run(copy), tmp_path / "report.html").read_text()
    assert "<b>" not in page and "<i>20" not in page
    assert "&lt;B&gt;KS&lt;/B&gt;" in page and "&lt;i&gt;20&lt;/i&gt;" in page


@needs_chromium
def test_the_report_renders_in_headless_chromium(run_dir: Path, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    run = load_run(run_dir)
    out = write_report(run, tmp_path / "report.html")
    with sync_playwright() as driver:
        browser = launch(driver)
        page = browser.new_page()
        errors = page_errors(page)
        page.goto(out.as_uri())
        page.wait_for_load_state("load")
        widths = page.eval_on_selector_all(
            "img", "imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)"
        )
        evaluation = page.inner_text("#evaluation")
        monitor = page.inner_text("#monitor")
        shift_rates = page.inner_text("#shift-rates")
        browser.close()
    assert errors == []
    assert len(widths) == 10 and all(width > 100 for width in widths)
    rows = evaluation.splitlines()[1:]  # the header first, then one row per statistic
    for row, name in zip(rows, run.evaluation.ordered(), strict=True):
        metrics = run.evaluation.statistics[name]
        assert row.startswith(f"{run.evaluation.label(name)}\t{metrics.auroc:.3f}\t")
    assert rows[0].startswith(f"{DEFAULT_STATISTIC} (default)\t")
    for window in run.windows:
        assert f"{window.p_value:.4g}" in monitor
    assert "0.0\t1.000" in shift_rates or "0.0\t0.9" in shift_rates


def test_the_report_and_plot_commands(run_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    import sys

    from ragbound.cli import main

    out, plots = tmp_path / "r.html", tmp_path / "plots"
    monkeypatch.setattr(
        sys, "argv", ["ragbound", "report", str(run_dir), "--out", str(out), "--plot", str(plots)]
    )
    main()
    assert out.is_file() and len(list(plots.glob("*.png"))) == 10
    assert (plots / "roc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setattr(sys, "argv", ["ragbound", "report", str(tmp_path / "empty")])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2 and "no such run folder" in capsys.readouterr().err
