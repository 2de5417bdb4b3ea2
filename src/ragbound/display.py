"""Rich tables for terminal output (the JSON output never goes through here)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from ragbound.results import EvaluationReport, Verdict


def verdict_table(verdicts: Sequence[Verdict], expected: Sequence[str] | None = None) -> Table:
    """One row per verdict: query, statistic, p-value, decision and the nearest chunk.

    ``expected`` optionally labels each row with what the query really is (for demos).
    """
    first = verdicts[0]
    table = Table(
        title=f"{first.statistic}, alpha={first.alpha}, k={first.k}, "
        f"{first.n_calibration} calibration queries"
    )
    columns = ["query", "score", "p-value", "verdict", "nearest chunk"]
    if expected is not None:
        columns.insert(1, "really")
    for column in columns:
        table.add_column(column, overflow="fold")
    for i, v in enumerate(verdicts):
        near = v.neighbours[0] if v.neighbours else None
        evidence = f"{near.similarity:.3f} {near.source}" if near else ""
        label = "[red]out of knowledge[/]" if v.reject else "[green]in knowledge[/]"
        row = [v.query, f"{v.score:.4f}", f"{v.p_value:.4f}", label, evidence]
        if expected is not None:
            row.insert(1, expected[i])
        table.add_row(*row)
    return table


def evaluation_table(report: EvaluationReport) -> Table:
    """Metrics per statistic, as in the paper's tables."""
    table = Table(
        title=f"{report.runs} runs x {report.samples} per side, alpha={report.alpha}, "
        f"k={report.k}, {report.n_calibration} calibration queries"
    )
    for column in ("statistic", "AUROC", "AUPRC", "TPR@5%FPR", "DER", "real FPR", "oracle TPR"):
        table.add_column(column, justify="right")
    for name, m in report.statistics.items():
        table.add_row(
            name,
            f"{m.auroc:.4f}",
            f"{m.auprc:.4f}",
            f"{m.tpr_at_5_fpr:.4f}",
            f"{m.der:.4f}",
            f"{m.fpr:.4f}",
            f"{m.tpr_at_5_fpr_oracle:.4f}",
        )
    return table
