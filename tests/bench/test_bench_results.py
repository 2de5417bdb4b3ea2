"""Benchmark results: the paper's rates per cell, intervals, counts of what was left out,
the terminal and JSON output, and the HTML report of a bench run directory."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ragbound.bench.models import Evaluation, ExperimentInput, ExperimentOutput, Provenance
from ragbound.bench.results import (
    UNGROUPED,
    BenchResults,
    CellResult,
    bench_results,
    current_results,
    load_groups,
    manifest_groups,
    write_results,
)
from ragbound.bench.rundir import RunDir
from ragbound.errors import ArtifactError, InputError
from ragbound.report import load_run, write_report
from ragbound.stats import wilson_interval
from tests.cli.runner import run as run_cli

PROVENANCE = Provenance(created_at="2025-01-01T00:00:00+00:00")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def experiment_input(input_id: str, model: str) -> ExperimentInput:
    return ExperimentInput(
        id=input_id,
        mode="leave_one_out",
        qa_id=f"qa-{input_id}",
        question=f"question {input_id}?",
        model=model,
        strategy="rag",
        system_prompt="conservative",
        prompt_version=1,
    )


def output(input_id: str, error: str | None = None) -> ExperimentOutput:
    answer = None if error else f"answer {input_id}"
    return ExperimentOutput(input_id=input_id, answer=answer, error=error, provenance=PROVENANCE)


def verdict(
    input_id: str,
    spec: str,
    outcome: str | None,
    evaluator: str = "judge-a",
    raw: str | None = None,
    error: str | None = None,
) -> Evaluation:
    return Evaluation(
        input_id=input_id,
        spec=spec,
        evaluator=evaluator,
        outcome=outcome,
        raw=raw,
        error=error,
        provenance=PROVENANCE,
    )


def write_run(root: Path) -> RunDir:
    """Cell m1: 10 inputs, 1 failed call; cell m2: 11 inputs, 1 still pending.

    judge-a on m1: abstention yes x3, no x5, one outcome outside yes/no; factuality on the five
    non-abstentions tier_1 x2, tier_2, tier_3 and one failed call. On m2: yes x8, no x2 and
    no factuality verdict at all. judge-b judged abstention on four m1 outputs only.
    """
    run = RunDir(root)
    a = [f"a{i}" for i in range(10)]
    b = [f"b{i}" for i in range(11)]
    run.write_inputs(
        [experiment_input(i, "m1") for i in a] + [experiment_input(i, "m2") for i in b]
    )
    retried = [output("a0", error="connection reset")]  # then answered on the rerun
    failed = [output("a9", error="context too long")]
    run.outputs().append(
        retried + [output(i) for i in a[:9]] + failed + [output(i) for i in b[:10]]
    )
    abstention = (
        [verdict("a1", "abstention", None, error="timeout")]  # retried below
        + [verdict(i, "abstention", "yes") for i in a[:3]]
        + [verdict(i, "abstention", "no") for i in a[3:8]]
        + [verdict("a8", "abstention", "perhaps")]
        + [verdict("a9", "abstention", "yes")]  # on a failed call: stray
        + [verdict(i, "abstention", "yes") for i in b[:8]]
        + [verdict(i, "abstention", "no") for i in b[8:10]]
    )
    run.evaluations("abstention", "judge-a").append(abstention)
    tiers = ["tier_1", "tier_1", "tier_2", "tier_3"]
    factuality = [verdict(i, "factuality", t) for i, t in zip(a[3:7], tiers, strict=True)]
    factuality += [verdict("a7", "factuality", None, error="timeout")]
    factuality += [verdict("a0", "factuality", "tier_3")]  # an abstention: not counted
    run.evaluations("factuality", "judge-a").append(factuality)
    tone = [verdict("a0", "tone", "polite"), verdict("a1", "tone", "rude")]
    tone += [verdict("b0", "tone", "polite"), verdict("b1", "tone", None, raw="hmm")]
    run.evaluations("tone", "judge-a").append(tone)
    run.evaluations("abstention", "judge-b").append(
        [verdict(i, "abstention", "no", evaluator="judge-b") for i in a[:4]]
    )
    return run


@pytest.fixture
def bench_run(tmp_path: Path) -> RunDir:
    return write_run(tmp_path / "run")


def cells_of(results: BenchResults, evaluator: str) -> dict[str, CellResult]:
    (judged,) = [e for e in results.evaluators if e.evaluator == evaluator]
    return {cell.model: cell for cell in judged.cells}


def test_rates_follow_the_papers_formulas(bench_run: RunDir) -> None:
    results = bench_results(bench_run.root)
    assert [e.evaluator for e in results.evaluators] == ["judge-a", "judge-b"]
    cells = cells_of(results, "judge-a")
    m1, m2 = cells["m1"], cells["m2"]
    # abstention: share judged "yes" among outputs with a usable verdict
    assert (m1.abstention.successes, m1.abstention.n) == (3, 8)
    assert (m1.abstention.low, m1.abstention.high) == pytest.approx(wilson_interval(3, 8))
    # factuality: tier 1 + 2 among non-abstentions with a factuality verdict
    assert (m1.factuality.successes, m1.factuality.n) == (3, 4)
    assert m1.factuality.rate == pytest.approx(0.75)
    assert m2.abstention.text() == "0.80 [0.49, 0.94]"
    assert (m2.factuality.n, m2.factuality.rate, m2.factuality.text()) == (0, None, "n/a")
    assert results.n_inputs == 21 and results.n_outputs == 20


def test_nothing_is_left_out_silently(bench_run: RunDir) -> None:
    results = bench_results(bench_run.root)
    m1, m2 = cells_of(results, "judge-a").values()
    assert (m1.n_inputs, m1.n_answered, m1.n_output_errors, m1.n_pending) == (10, 9, 1, 0)
    assert (m2.n_inputs, m2.n_answered, m2.n_output_errors, m2.n_pending) == (11, 10, 0, 1)
    abstention = m1.verdicts["abstention"]
    assert abstention.outcomes == {"yes": 3, "no": 5}
    assert (abstention.unparsed, abstention.errors, abstention.missing) == (1, 0, 0)
    factuality = m1.verdicts["factuality"]  # tallied over the non-abstentions only
    assert factuality.outcomes == {"tier_1": 2, "tier_2": 1, "tier_3": 1}
    assert (factuality.errors, factuality.missing, m1.factuality_excluded) == (1, 0, 1)
    assert m2.verdicts["factuality"].missing == 2 and m2.factuality_excluded == 2
    assert m1.problems() == [
        "1 output error(s)",
        "abstention: 1 unparsed",
        "factuality: 1 error(s)",
        "tone: 7 not judged",
    ]
    assert m2.problems() == [
        "1 pending",
        "factuality: 2 not judged",
        "tone: 1 unparsed, 8 not judged",
    ]
    assert results.evaluators[0].stray_verdicts == 1  # the verdict on the failed call


def test_custom_specs_report_outcome_shares(bench_run: RunDir) -> None:
    judged = bench_results(bench_run.root, "judge-a").evaluators[0]
    assert judged.custom_specs() == ["tone"] and judged.outcomes("tone") == ["polite", "rude"]
    m1, m2 = judged.cells
    assert m1.shares["tone"]["polite"].text() == "0.50 [0.09, 0.91]"
    assert (m2.shares["tone"]["rude"].successes, m2.shares["tone"]["rude"].n) == (0, 1)
    assert m2.verdicts["tone"].unparsed == 1


def test_one_evaluator_at_a_time(bench_run: RunDir) -> None:
    results = bench_results(bench_run.root, evaluator="judge-b")
    (judged,) = results.evaluators
    assert judged.specs == ["abstention"]
    m1, m2 = judged.cells
    assert (m1.abstention.successes, m1.abstention.n) == (0, 4)
    assert m1.abstention.high == pytest.approx(wilson_interval(0, 4)[1])
    assert m2.verdicts["abstention"].missing == 10 and m2.abstention.text() == "n/a"
    with pytest.raises(InputError, match="no evaluations by 'judge-c'; evaluators: judge-a"):
        bench_results(bench_run.root, evaluator="judge-c")


def test_per_group_breakdown(bench_run: RunDir, tmp_path: Path) -> None:
    mapping = {f"qa-{p}{i}": "pension" for p in "ab" for i in range(5)}
    mapping |= {f"qa-a{i}": "traffic" for i in range(5, 10)}
    mapping |= {f"qa-b{i}": "traffic" for i in range(5, 10)}
    path = tmp_path / "groups.json"
    path.write_text(json.dumps(mapping))
    judged = bench_results(bench_run.root, "judge-a", groups=load_groups(path)).evaluators[0]
    rows = {(c.group, c.model): c for c in judged.by_group}
    assert list(rows) == [
        (UNGROUPED, "m2"),
        ("pension", "m1"),
        ("pension", "m2"),
        ("traffic", "m1"),
        ("traffic", "m2"),
    ]
    assert rows[("pension", "m1")].abstention.n == 5  # a0..a4: yes x3, no x2
    assert rows[("pension", "m1")].abstention.successes == 3
    assert rows[(UNGROUPED, "m2")].n_pending == 1
    assert sum(c.n_inputs for c in judged.by_group) == 21
    path.write_text(json.dumps({"qa-a0": 3}))
    with pytest.raises(InputError, match="'qa-a0'"):
        load_groups(path)


def write_manifest(run: RunDir) -> None:
    """The part of run.json that names the knowledge sets and their questions."""
    sets = [
        {"name": "pension", "qa_ids": [f"qa-{p}{i}" for p in "ab" for i in range(5)]},
        {"name": "traffic", "qa_ids": [f"qa-{p}{i}" for p in "ab" for i in range(5, 11)]},
    ]
    run.manifest_path.write_text(json.dumps({"format": "ragbound.bench.run/1", "sets": sets}))


def test_groups_default_to_the_knowledge_sets_of_run_json(bench_run: RunDir) -> None:
    assert manifest_groups(bench_run.root) is None  # no run.json
    write_manifest(bench_run)
    groups = manifest_groups(bench_run.root)
    assert groups is not None and (groups["qa-a0"], groups["qa-b10"]) == ("pension", "traffic")
    judged = current_results(bench_run.root).evaluators[0]
    assert [(c.group, c.model) for c in judged.by_group] == [
        ("pension", "m1"),
        ("pension", "m2"),
        ("traffic", "m1"),
        ("traffic", "m2"),
    ]
    one_set = {"sets": [{"name": "pension", "qa_ids": ["qa-a0"]}]}
    for manifest in (one_set, {"sets": [{"name": "x"}, {"name": "y"}]}, ["not", "a", "dict"]):
        bench_run.manifest_path.write_text(json.dumps(manifest))
        assert manifest_groups(bench_run.root) is None


def test_bootstrap_intervals_are_seeded(bench_run: RunDir) -> None:
    first = bench_results(bench_run.root, "judge-a", interval="bootstrap", seed=3)
    again = bench_results(bench_run.root, "judge-a", interval="bootstrap", seed=3)
    m2 = cells_of(first, "judge-a")["m2"].abstention
    assert m2 == cells_of(again, "judge-a")["m2"].abstention
    assert m2.low is not None and m2.high is not None and m2.low < 0.8 < m2.high
    assert first.interval == "bootstrap"
    with pytest.raises(InputError, match="unknown interval 'normal'"):
        bench_results(bench_run.root, interval="normal")
    with pytest.raises(InputError, match="confidence"):
        bench_results(bench_run.root, confidence=95)


def test_runs_without_evaluations_or_inputs_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="not a benchmark run"):
        bench_results(tmp_path)
    run = RunDir(tmp_path)
    run.write_inputs([experiment_input("a0", "m1")])
    with pytest.raises(ArtifactError, match="no evaluations yet"):
        bench_results(tmp_path)


def test_results_json_is_reused_only_while_fresh(bench_run: RunDir) -> None:
    written = bench_results(bench_run.root, "judge-b")
    write_results(bench_run.root, written)
    assert current_results(bench_run.root) == written  # as `bench results` left it
    bench_run.results_path.write_text('{"format": "ragbound.bench.results/0"}')
    assert len(current_results(bench_run.root).evaluators) == 2  # unreadable: recomputed
    write_results(bench_run.root, written)
    later = bench_run.results_path.stat().st_mtime_ns + 1_000_000
    os.utime(bench_run.outputs().path, ns=(later, later))  # a new output since
    assert [e.evaluator for e in current_results(bench_run.root).evaluators] == [
        "judge-a",
        "judge-b",
    ]


def test_the_results_command(bench_run: RunDir, monkeypatch, capsys) -> None:
    root = str(bench_run.root)
    code, out, err = run_cli(monkeypatch, capsys, "bench", "results", root, "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload == json.loads(bench_run.results_path.read_text())
    assert payload["evaluators"][0]["cells"][1]["abstention"]["successes"] == 8
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run_cli(
        monkeypatch, capsys, "bench", "results", root, "--evaluator", "judge-a"
    )
    assert code == 0, err
    assert "0.80 [0.49, 0.94]" in out and "0.75 [0.30, 0.95]" in out
    assert "polite" in out and "wrote" in out and "per group" not in out
    write_manifest(bench_run)
    code, out, err = run_cli(
        monkeypatch, capsys, "bench", "results", root, "--evaluator", "judge-b"
    )
    assert code == 0, err
    assert "per group" in out and "traffic" in out
    code, _, err = run_cli(monkeypatch, capsys, "bench", "results", root, "--evaluator", "x")
    assert code == 2 and "no evaluations by 'x'" in err


class _Tables(HTMLParser):
    """Cell texts of every table on a page, by table id."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.images = 0
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._table = dict(attrs)["id"] or ""
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img" and (dict(attrs)["src"] or "").startswith("data:image/png;base64,"):
            self.images += 1

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None


def test_the_html_report_of_a_bench_run(bench_run: RunDir, tmp_path: Path) -> None:
    page = write_report(load_run(bench_run.root), tmp_path / "report.html").read_text()
    assert "http://" not in page and "https://" not in page
    parsed = _Tables()
    parsed.feed(page)
    assert parsed.images == 2  # one chart per evaluator
    header, m1, m2 = parsed.tables["bench-judge-a"]
    assert header[:3] == ["model", "strategy", "prompt"]
    assert m1[:6] == ["m1", "rag", "conservative", "10", "9", "8"]
    assert m1[6:8] == ["0.38 [0.14, 0.69]", "0.75 [0.30, 0.95]"]
    assert m2[6:8] == ["0.80 [0.49, 0.94]", "n/a"]
    assert "1 pending" in m2[8]
    assert parsed.tables["bench-judge-a-tone"][1][3:] == ["0.50 [0.09, 0.91]"] * 2
    assert parsed.tables["bench-judge-b"][1][6] == "0.00 [0.00, 0.49]"
    assert "bench-judge-a-groups" not in parsed.tables
    write_manifest(bench_run)
    page = write_report(load_run(bench_run.root), tmp_path / "report.html").read_text()
    parsed = _Tables()
    parsed.feed(page)
    groups = parsed.tables["bench-judge-a-groups"]
    assert [row[:2] for row in groups[1:]] == [
        ["pension", "m1"],
        ["pension", "m2"],
        ["traffic", "m1"],
        ["traffic", "m2"],
    ]
    assert groups[1][7] == "0.60 [0.23, 0.88]"  # a0..a4: yes x3 of 5


@pytest.mark.skipif(
    CHROMIUM is None or importlib.util.find_spec("playwright") is None,
    reason="needs Debian's chromium (apt install chromium) and the playwright package",
)
def test_the_bench_report_renders_in_headless_chromium(bench_run: RunDir, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    out = write_report(load_run(bench_run.root), tmp_path / "report.html")
    errors: list[str] = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(out.as_uri())
        widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.naturalWidth)")
        table = page.inner_text("#bench-judge-a")
        browser.close()
    assert errors == [] and len(widths) == 2 and min(widths) > 100
    assert "0.80 [0.49, 0.94]" in table
