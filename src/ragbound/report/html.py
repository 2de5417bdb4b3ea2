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
    """Every plot the run supports, by file stem."""
    out: dict[str, bytes] = {}
    for name, entry in run.scores.items():
        out[f"histogram-{name}"] = plots.histogram(name, entry)
    if run.scores:
        out["roc"] = plots.roc_curves(run.scores)
    if run.rejection:
        out["rejection-rates"] = plots.rejection_curves(run.rejection)
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
        parts.append(_shift(run))
    if run.rejection:
        parts.append(_rejection(run.rejection, pictures))
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


def _evaluation(run: RunData, pictures: dict[str, bytes]) -> str:
    report = run.evaluation
    assert report is not None
    rows = [
        [escape(name)] + [f"{getattr(metrics, key):.3f}" for _, key in METRICS]
        for name, metrics in report.statistics.items()
    ]
    figures = "".join(
        figure(
            pictures, f"histogram-{name}", f"{name}: in- vs out-of-knowledge, critical value dashed"
        )
        for name in run.scores
    )
    return (
        "<h2>Out-of-knowledge detection</h2>"
        f"<p>{report.n_in_knowledge} in-knowledge and {report.n_out_of_knowledge} "
        f"out-of-knowledge test queries, {report.n_calibration} calibration queries, k = "
        f"{report.k}; {escape(report.draws())}; TPR, DER and FPR at "
        f"the critical value calibrated at alpha = {report.alpha}.</p>"
        + table(["statistic", *(label for label, _ in METRICS)], rows, "evaluation")
        + (figure(pictures, "roc", "ROC curves per statistic") if "roc" in pictures else "")
        + figures
    )


def _shift(run: RunData) -> str:
    report = run.shift
    assert report is not None
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


def _rejection(experiment: dict[str, Any], pictures: dict[str, bytes]) -> str:
    columns = [
        (stat, name) for stat, sets in experiment.items() if isinstance(sets, dict) for name in sets
    ]
    header = ["IK ratio"] + [f"{stat}, {name}" for stat, name in columns]
    rows = []
    for i, ratio in enumerate(experiment["ratios"]):
        rows.append(
            [f"{ratio:.1f}"]
            + [
                f"{experiment[stat][name]['rows'][i]['rejection_rate']:.3f}"
                for stat, name in columns
            ]
        )
    return (
        "<h2>Rejection rate against the in-knowledge ratio</h2>"
        f"<p>{escape(str(experiment['trials']))} trials per ratio; batches of "
        f"{escape(str(experiment['size']))}; alpha = {escape(str(experiment['alpha']))}.</p>"
        + table(header, rows, "rejection")
        + figure(pictures, "rejection-rates", "rejection rate per in-knowledge ratio")
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
    header = ["window", "start", "end", "n", "KS", "p-value", "level", "alarm"]
    return (
        f"<h2>Monitor</h2><p>{len(run.windows)} windows, {alarms} alarm(s).</p>"
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
    header = ["rule", "accuracy", "TPR", "false rejection", "F1"]
    surface = result.surface
    return (
        f"<h2>Tripwire rules</h2><p>Best by {escape(result.objective)} on {result.n_unsafe} unsafe "
        f"and {result.n_safe} safe queries. The surface shows the rule "
        f"&ldquo;proportion &ge; p or best rank &le; r&rdquo; at k = {surface.k}.</p>"
        + table(header, rows, "tripwire-tuning")
        + figure(pictures, "tripwire-surface", "tripwire rule trade-off surface")
    )
