"""The benchmark section of the HTML report: rate tables with intervals and a bar chart."""

from __future__ import annotations

import numpy as np

from ragbound.bench.results import BenchResults, CellResult, EvaluatorResults, Rate
from ragbound.bench.rundir import slug
from ragbound.report.markup import escape, figure, table
from ragbound.report.plots import pyplot, to_png

CELL_HEADER = ["model", "strategy", "prompt", "inputs", "answered", "evaluated"]
RATE_HEADER = ["abstention", "factuality", "left out"]
BAR_COLOURS = {"abstention": "#2b7bba", "factuality": "#e4572e"}


def bench_images(results: BenchResults) -> dict[str, bytes]:
    """One bar chart per evaluator that judged at least one cell, by file stem."""
    return {
        f"bench-{slug(judged.evaluator)}": rates_chart(judged)
        for judged in results.evaluators
        if judged.cells
    }


def rates_chart(results: EvaluatorResults) -> bytes:
    """Abstention and factuality rate per cell, error bars = the confidence interval."""
    plt = pyplot()
    cells = results.cells
    chart, axis = plt.subplots(figsize=(max(5.2, 1.1 * len(cells) + 1.5), 3.6))
    positions = np.arange(len(cells))
    width = 0.38
    for offset, name in ((-width / 2, "abstention"), (width / 2, "factuality")):
        rates = [getattr(cell, name) for cell in cells]
        axis.bar(
            positions + offset,
            [rate.rate if rate.rate is not None else float("nan") for rate in rates],
            width,
            yerr=np.array([_error(rate) for rate in rates]).T,
            capsize=3,
            color=BAR_COLOURS[name],
            label=f"{name} rate",
        )
    labels = [f"{cell.model}\n{cell.strategy}\n{cell.system_prompt}" for cell in cells]
    axis.set_xticks(positions, labels, fontsize=7)
    axis.set_ylim(0, 1.05)
    axis.set_ylabel("rate")
    axis.legend(fontsize=8)
    return to_png(chart)


def bench_section(results: BenchResults, pictures: dict[str, bytes]) -> str:
    """Per evaluator: the cells table, the per-group table, custom specs, the chart."""
    parts = [
        "<h2>Abstention benchmark</h2>"
        f"<p>{results.n_inputs} inputs, {results.n_outputs} with an output. Abstention rate = "
        "outputs judged to abstain / outputs with an abstention verdict. Factuality rate = "
        "(tier 1 + tier 2) / non-abstentions with a factuality verdict. Brackets: "
        f"{results.interval_text()}.</p>"
    ]
    for judged in results.evaluators:
        stem = f"bench-{slug(judged.evaluator)}"
        parts.append(f"<h3>Judged by <code>{escape(judged.evaluator)}</code></h3>")
        parts.append(table(CELL_HEADER + RATE_HEADER, _rows(judged.cells), stem))
        if judged.by_group:
            rows = [
                [escape(cell.group or ""), *row]
                for cell, row in zip(judged.by_group, _rows(judged.by_group), strict=True)
            ]
            parts.append(table(["group", *CELL_HEADER, *RATE_HEADER], rows, f"{stem}-groups"))
        parts += [_shares(judged, spec, f"{stem}-{slug(spec)}") for spec in judged.custom_specs()]
        if judged.stray_verdicts:
            parts.append(f"<p>{judged.stray_verdicts} verdict(s) on unanswered inputs ignored.</p>")
        if stem in pictures:
            parts.append(
                figure(pictures, stem, f"rates judged by {judged.evaluator}, with intervals")
            )
    return "\n".join(parts)


def _rows(cells: list[CellResult]) -> list[list[str]]:
    return [
        [
            *(escape(name) for name in (cell.model, cell.strategy, cell.system_prompt)),
            *(str(count) for count in (cell.n_inputs, cell.n_answered, cell.n_evaluated)),
            cell.abstention.text(),
            cell.factuality.text(),
            escape("; ".join(cell.problems())),
        ]
        for cell in cells
    ]


def _shares(results: EvaluatorResults, spec: str, table_id: str) -> str:
    outcomes = results.outcomes(spec)
    rows = [
        [escape(cell.model), escape(cell.strategy), escape(cell.system_prompt)]
        + [cell.shares[spec][o].text() if spec in cell.shares else "n/a" for o in outcomes]
        for cell in results.cells
    ]
    header = ["model", "strategy", "prompt", *outcomes]
    return f"<h4>{escape(spec)}: share of each outcome</h4>" + table(header, rows, table_id)


def _error(rate: Rate) -> tuple[float, float]:
    """Distances from the rate down to the low and up to the high end of its interval."""
    if rate.rate is None or rate.low is None or rate.high is None:
        return (0.0, 0.0)
    return (rate.rate - rate.low, rate.high - rate.rate)
