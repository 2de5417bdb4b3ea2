"""Rich tables for terminal output (the JSON output never goes through here)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

from ragbound.results import EvaluationReport, Verdict

if TYPE_CHECKING:  # the bench package is only needed by its own tables
    from ragbound.bench.results import EvaluatorResults


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


def tripwire_topics_table(topics: dict[str, int], set_hash: str) -> Table:
    """Tripwires per topic."""
    table = Table(title=f"{sum(topics.values())} tripwires, set {set_hash or '(empty)'}")
    table.add_column("topic")
    table.add_column("tripwires", justify="right")
    for topic, count in topics.items():
        table.add_row(topic, str(count))
    return table


def tripwire_history_table(history: Sequence) -> Table:
    """Every recorded add and remove."""
    table = Table(title="tripwire changes")
    for column in ("at", "action", "n", "topics", "source", "tripwires after", "set"):
        table.add_column(column, overflow="fold")
    for change in history:
        table.add_row(
            change.at,
            change.action,
            str(len(change.ids)),
            ", ".join(change.topics),
            change.source or "",
            str(change.n_after),
            change.set_hash,
        )
    return table


def tripwire_decisions_table(decisions: Sequence, rule: str, verdicts: dict | None = None) -> Table:
    """One row per query: decision, the rule that fired and the tripwires that tripped.

    ``verdicts`` maps a row number to the cascade LLM's verdict on a query the tripwires passed.
    """
    verdicts = verdicts or {}
    table = Table(title=f"tripwire rule: {rule}")
    for column in ("query", "decision", "rule", "triggers (rank, similarity, topic: text)"):
        table.add_column(column, overflow="fold")
    for i, d in enumerate(decisions):
        triggers = "\n".join(
            f"#{t.rank} {t.similarity:.3f} {t.topic}: {t.text[:80]}" for t in d.triggers
        )
        rule_text = d.rule or ""
        label = "[red]rejected[/]" if d.rejected else "[green]passed[/]"
        if i in verdicts:
            verdict = verdicts[i]
            label = {True: "[red]rejected (LLM)[/]", False: "[green]passed (LLM allows)[/]"}.get(
                verdict.rejected, "[yellow]passed (LLM error)[/]"
            )
            rule_text = "llm" if verdict.rejected else ""
        table.add_row(d.query, label, rule_text, triggers)
    return table


def tuning_table(result) -> Table:
    """The best rules by the objective, and the paper's default rule on the same queries."""
    table = Table(
        title=f"tripwire rules by {result.objective}"
        + (f" (false rejection <= {result.max_frr:g})" if result.max_frr is not None else "")
        + f": {result.n_unsafe} unsafe, {result.n_safe} safe queries"
    )
    for column in ("rule", "accuracy", "TPR", "false rejection", "precision", "F1"):
        table.add_column(column, justify="right" if column != "rule" else "left")
    rows = [(score, "") for score in result.top] + [(result.paper_default, " (paper default)")]
    for score, note in rows:
        table.add_row(
            score.rule.describe() + note,
            f"{score.accuracy:.3f}",
            f"{score.tpr:.3f}",
            f"{score.frr:.3f}",
            f"{score.precision:.3f}",
            f"{score.f1:.3f}",
        )
    return table


def bench_cells_table(results: EvaluatorResults, title: str, grouped: bool = False) -> Table:
    """Abstention and factuality rates with intervals, one row per cell of an evaluator.

    ``grouped`` shows the per-group breakdown instead.
    """
    table = Table(title=title)
    columns = ["model", "strategy", "prompt", "inputs", "answered", "evaluated"]
    columns += ["abstention", "factuality", "left out"]
    if grouped:
        columns.insert(0, "group")
    for column in columns:
        table.add_column(column, overflow="fold")
    for cell in results.by_group if grouped else results.cells:
        row = [cell.model, cell.strategy, cell.system_prompt]
        row += [str(cell.n_inputs), str(cell.n_answered), str(cell.n_evaluated)]
        row += [cell.abstention.text(), cell.factuality.text(), "\n".join(cell.problems())]
        if grouped:
            row.insert(0, cell.group or "")
        table.add_row(*row)
    return table


def bench_shares_table(results: EvaluatorResults, spec: str) -> Table:
    """Share of each outcome of a custom evaluation spec, one row per cell."""
    outcomes = results.outcomes(spec)
    table = Table(title=f"{spec}, judged by {results.evaluator}")
    for column in ("model", "strategy", "prompt", "judged", *outcomes):
        table.add_column(column, overflow="fold")
    for cell in results.cells:
        shares = cell.shares.get(spec, {})
        judged = cell.verdicts[spec].n_usable if spec in cell.verdicts else 0
        table.add_row(
            cell.model,
            cell.strategy,
            cell.system_prompt,
            str(judged),
            *(shares[o].text() if o in shares else "n/a" for o in outcomes),
        )
    return table
