"""``ragbound bench results``: abstention and factuality rates with confidence intervals."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ragbound.cli import validate
from ragbound.cli.common import console, emit_json
from ragbound.cli.options import JsonOpt, SeedOpt

if TYPE_CHECKING:
    from rich.table import Table

    from ragbound.bench.results import EvaluatorResults


def results(
    run_dir: Annotated[Path, typer.Argument(help="Benchmark run directory.")],
    evaluator: Annotated[
        str | None, typer.Option(help="Only this evaluator model (default: every one).")
    ] = None,
    groups: Annotated[
        Path | None,
        typer.Option(
            help="JSON object QA id -> group name for a per-group breakdown "
            "(default: the knowledge sets in run.json, when there are several).",
            callback=validate.existing_file,
        ),
    ] = None,
    confidence: Annotated[
        float,
        typer.Option(help="Confidence level of the intervals.", callback=validate.probability),
    ] = 0.95,
    interval: Annotated[
        str,
        typer.Option(help="wilson or bootstrap.", callback=validate.choice("wilson", "bootstrap")),
    ] = "wilson",
    seed: SeedOpt = 0,
    json_out: JsonOpt = False,
) -> None:
    """Rates per model x strategy x prompt and evaluator; writes RUN_DIR/results.json.

    Abstention rate: outputs judged abstentions / outputs with an abstention verdict.
    Factuality rate: tier_1 and tier_2 answers / non-abstentions with a factuality verdict.
    Each comes with a --confidence interval (Wilson, or a seeded percentile bootstrap).
    With several knowledge sets (or --groups) the rates are also broken down per group;
    custom specs are reported as the share of each outcome. Failed calls, pending outputs,
    evaluator errors and missing verdicts are counted per cell, never dropped silently.

    `ragbound report RUN_DIR` shows results.json. --json prints it: run_dir, confidence,
    interval, seed, n_inputs, n_outputs and evaluators (the cells with their rates).
    """
    from ragbound.bench.results import bench_results, load_groups, manifest_groups, write_results

    found = bench_results(
        run_dir,
        evaluator,
        groups=load_groups(groups) if groups is not None else manifest_groups(run_dir),
        confidence=confidence,
        interval=interval,
        seed=seed,
    )
    path = write_results(run_dir, found)
    if json_out:
        emit_json(found)
        return
    out = console()
    for judged in found.evaluators:
        out.print(cells_table(judged, found.describe(judged.evaluator)))
        if judged.by_group:
            out.print(cells_table(judged, "per group", grouped=True))
        for spec in judged.custom_specs():
            out.print(shares_table(judged, spec))
        if judged.stray_verdicts:
            out.print(f"{judged.stray_verdicts} verdict(s) on inputs with no answer were ignored")
    out.print(f"wrote {path}")


def cells_table(results: EvaluatorResults, title: str, grouped: bool = False) -> Table:
    """Abstention and factuality rates with intervals, one row per cell of an evaluator.

    ``grouped`` shows the per-group breakdown instead.
    """
    from rich.table import Table

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


def shares_table(results: EvaluatorResults, spec: str) -> Table:
    """Share of each outcome of a custom evaluation spec, one row per cell."""
    from rich.table import Table

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


def register(group: typer.Typer) -> None:
    """Add results to the bench group."""
    group.command("results")(results)
