"""``ragbound bench results``: abstention and factuality rates with confidence intervals."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ragbound.cli_bench import bench_app
from ragbound.cli_support import JsonOpt, console, emit_json


@bench_app.command("results")
def results(
    run_dir: Annotated[Path, typer.Argument(help="Benchmark run directory.")],
    evaluator: Annotated[
        str | None, typer.Option(help="Only this evaluator model (default: every one).")
    ] = None,
    groups: Annotated[
        Path | None,
        typer.Option(
            help="JSON object QA id -> group name for a per-group breakdown "
            "(default: the knowledge sets in run.json, when there are several)."
        ),
    ] = None,
    confidence: Annotated[float, typer.Option(help="Confidence level of the intervals.")] = 0.95,
    interval: Annotated[str, typer.Option(help="wilson or bootstrap.")] = "wilson",
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Rates per model x strategy x prompt and evaluator; writes RUN_DIR/results.json."""
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
    from ragbound.display import bench_cells_table, bench_shares_table

    out = console()
    for judged in found.evaluators:
        out.print(bench_cells_table(judged, found.describe(judged.evaluator)))
        if judged.by_group:
            out.print(bench_cells_table(judged, "per group", grouped=True))
        for spec in judged.custom_specs():
            out.print(bench_shares_table(judged, spec))
        if judged.stray_verdicts:
            out.print(f"{judged.stray_verdicts} verdict(s) on inputs with no answer were ignored")
    out.print(f"wrote {path}")
