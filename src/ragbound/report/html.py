"""One self-contained HTML page for a run: tables and inline PNG plots, no network access."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragbound.artifacts import utc_now, write_text
from ragbound.report import plots
from ragbound.report.bench import bench_images, bench_section
from ragbound.report.markup import escape, figure, table
from ragbound.report.run import RunData

if TYPE_CHECKING:
    from ragbound.results import EvaluationInputs, EvaluationReport, ShiftReport
    from ragbound.tripwires.tune import TuningResult

METRICS = (
    ("AUROC", "auroc"),
    ("AUPRC", "auprc"),
    ("TPR at 5%", "tpr_at_5_fpr"),
    ("DER", "der"),
    ("FPR", "fpr"),
)
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
figure { display: inline-block; margin: 0.5em; }
.alarm { color: #c0392b; font-weight: bold; }
"""


def images(run: RunData) -> dict[str, bytes]:
    """Every plot the run supports, by file stem (none without matplotlib: the page then says
    where each would be)."""
    out: dict[str, bytes] = {}
    if not plots.can_plot():
        return out
    scores = ordered_scores(run)
    for name, entry in scores.items():
        out[f"histogram-{name}"] = plots.histogram(name, entry)
    if scores:
        out["roc"] = plots.roc_curves(scores)
    if run.shift_rates:
        out["shift-rates"] = plots.shift_curves(run.shift_rates)
    if run.windows:
        out["monitor"] = plots.monitor_pvalues(run.windows)
    if run.tuning is not None:
        out["tripwire-surface"] = plots.tripwire_surface(run.tuning.surface)
    if run.bench is not None:
        out.update(bench_images(run.bench))
    return out


def render_report(run: RunData) -> str:
    """The report page as a string (images base64-encoded inline)."""
    pictures = images(run)
    parts = [
        f"<h1>ragbound report</h1><p>Run folder <code>{escape(str(run.path))}</code>, "
        f"generated {escape(utc_now())}.</p>"
    ]
    if run.evaluation is not None:
        parts.append(_evaluation(run, pictures))
    if run.shift is not None:
        parts.append(_shift(run.shift))
    if run.shift_rates:
        parts.append(_shift_rates(run.shift_rates, pictures))
    if run.windows:
        parts.append(_monitor(run, pictures))
    if run.tuning is not None:
        parts.append(_tuning(run.tuning, pictures))
    if run.bench is not None:
        parts.append(bench_section(run.bench, pictures))
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta http-equiv='Content-Security-Policy' "
        "content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\">"
        f"<title>ragbound report</title><style>{STYLE}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>\n"
    )


def write_report(run: RunData, out: Path) -> Path:
    """Write the report atomically to ``out``."""
    write_text(out, render_report(run))
    return out


def ordered_scores(run: RunData) -> dict[str, dict[str, Any]]:
    """The run's per-query statistic values, the default statistic first, then the others
    alphabetically (as the evaluation table orders them)."""
    order = run.evaluation.ordered() if run.evaluation is not None else sorted(run.scores)
    order += sorted(set(run.scores) - set(order))
    return {name: run.scores[name] for name in order if name in run.scores}


def auroc_note(report: EvaluationReport) -> str:
    """One sentence on the two AUROCs of the section: the table's mean over draws and the ROC
    legend's on all queries pooled."""
    draws = "one draw" if report.runs == 1 else f"the mean of {report.runs} draws"
    return (
        f"The table's metrics (AUROC included) are {draws}; the ROC legend's "
        f"&ldquo;{escape(plots.POOLED_AUROC)}&rdquo; scores all {report.n_in_knowledge} "
        f"in- and {report.n_out_of_knowledge} out-of-knowledge queries at once, so the two "
        "AUROCs can differ a little."
    )


def _evaluation(run: RunData, pictures: dict[str, bytes]) -> str:
    report = run.evaluation
    assert report is not None
    rows = [
        [escape(report.label(name))]
        + [f"{getattr(report.statistics[name], key):.3f}" for _, key in METRICS]
        for name in report.ordered()
    ]
    figures = "".join(
        figure(
            pictures, f"histogram-{name}", f"{name}: in- vs out-of-knowledge, critical value dashed"
        )
        for name in ordered_scores(run)
    )
    roc = f"ROC curves per statistic; legend: {plots.POOLED_AUROC}"
    return (
        "<h2>Out-of-knowledge detection</h2>"
        + _inputs(run.inputs)
        + f"<p>{report.n_in_knowledge} in-knowledge and {report.n_out_of_knowledge} "
        f"out-of-knowledge test queries, {report.n_calibration} calibration queries, k = "
        f"{report.k}; {escape(report.draws())}; TPR, DER and FPR at "
        f"the critical value calibrated at alpha = {report.alpha}. Statistic values: higher = "
        "more out-of-knowledge.</p>"
        + table(["statistic", *(label for label, _ in METRICS)], rows, "evaluation")
        + f"<p id='auroc-note'>{auroc_note(report)}</p>"
        + (figure(pictures, "roc", roc) if "roc" in pictures else "")
        + figures
    )


INPUT_ROWS = (
    ("knowledge base", "knowledge_base"),
    ("corpus", "corpus"),
    ("calibration questions", "calibration"),
    ("in-knowledge questions", "in_knowledge"),
    ("out-of-knowledge questions", "out_of_knowledge"),
    ("embedder", "embedder"),
    ("evaluated at (UTC)", "evaluated_at"),
)


def _inputs(inputs: EvaluationInputs | None) -> str:
    """The evaluation's inputs as a two-column table, or a note that they were not recorded."""
    if inputs is None:
        return (
            "<p id='inputs'>Inputs not recorded (<code>ragbound evaluate --run</code> records "
            "them).</p>"
        )
    rows = []
    for label, key in INPUT_ROWS:
        value = getattr(inputs, key)
        text = ", ".join(value) if isinstance(value, list) else value
        rows.append([escape(label), f"<code>{escape(text or 'not known')}</code>"])
    return table(["input", "as recorded"], rows, "inputs")


def _shift(report: ShiftReport) -> str:
    critical = "" if report.critical_value is None else f"{report.critical_value:.4f}"
    verdict = "<span class='alarm'>shift</span>" if report.shifted else "no shift"
    row = [
        escape(report.test.upper()),
        f"{report.statistic:.4f}",
        critical,
        f"{report.p_value:.4g}",
        str(report.n_reference),
        str(report.n_test),
        verdict,
    ]
    header = ["test", "statistic", "critical value", "p-value", "reference", "batch", "decision"]
    return "<h2>Batch shift test</h2>" + table(header, [row], "shift")


def _shift_rates(experiment: dict[str, Any], pictures: dict[str, bytes]) -> str:
    columns = [
        (stat, name) for stat, sets in experiment.items() if isinstance(sets, dict) for name in sets
    ]
    header = ["IK ratio"] + [f"{stat}, {name}" for stat, name in columns]
    rows = []
    for i, ratio in enumerate(experiment["ratios"]):
        rows.append(
            [f"{ratio:.1f}"]
            + [f"{experiment[stat][name]['rows'][i]['shifted_rate']:.3f}" for stat, name in columns]
        )
    return (
        "<h2>Shifted rate (p &le; alpha) against the in-knowledge ratio</h2>"
        f"<p>{escape(str(experiment['trials']))} trials per ratio; batches of "
        f"{escape(str(experiment['size']))}; alpha = {escape(str(experiment['alpha']))}.</p>"
        + table(header, rows, "shift-rates")
        + figure(pictures, "shift-rates", "shifted rate per in-knowledge ratio")
    )


def _monitor(run: RunData, pictures: dict[str, bytes]) -> str:
    rows = [
        [
            str(w.window),
            escape(w.start),
            escape(w.end),
            str(w.n),
            f"{w.statistic:.3f}",
            f"{w.p_value:.4g}",
            f"{w.alpha:.3g}",
            "<span class='alarm'>alarm</span>" if w.alarm else "ok",
        ]
        for w in run.windows
    ]
    alarms = sum(w.alarm for w in run.windows)
    header = ["window", "start", "end", "n", "KS", "p-value", "tested at", "alarm"]
    return (
        f"<h2>Monitor</h2><p>{len(run.windows)} windows, {alarms} alarm(s). KS: the distance "
        "between the window's statistic values and the calibration's (0 to 1); tested at: the "
        "alpha this window was held to (it shrinks window by window when alpha is spent over "
        "the stream); an alarm when the p-value is at most that.</p>"
        + figure(pictures, "monitor", "monitor p-values over time, alarms in red")
        + table(header, rows, "monitor")
    )


def _tuning(result: TuningResult, pictures: dict[str, bytes]) -> str:
    scored = [(s, "") for s in result.top] + [(result.paper_default, " (paper default)")]
    rows = [
        [
            escape(score.rule.describe() + note),
            f"{score.accuracy:.3f}",
            f"{score.tpr:.3f}",
            f"{score.frr:.3f}",
            f"{score.f1:.3f}",
        ]
        for score, note in scored
    ]
    header = ["rule", "accuracy", "TPR", "safe forbidden", "F1"]
    surface = result.surface
    return (
        f"<h2>Tripwire rules</h2><p>Best by {escape(result.objective)} on {result.n_unsafe} unsafe "
        f"and {result.n_safe} safe queries. The surface shows the rule "
        f"&ldquo;proportion &ge; p or best rank &le; r&rdquo; at k = {surface.k}.</p>"
        + table(header, rows, "tripwire-tuning")
        + figure(pictures, "tripwire-surface", "tripwire rule trade-off surface")
    )
