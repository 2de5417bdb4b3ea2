"""``ragbound report``: one self-contained HTML page of a run folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ragbound.cli import validate
from ragbound.cli.common import notice, write_plots
from ragbound.cli.options import PlotOpt


def report(
    run_dir: Annotated[Path, typer.Argument(help="Run folder (evaluate/shift --run).")],
    out: Annotated[
        Path,
        typer.Option("--out", help="HTML file to write.", callback=validate.output_file),
    ] = Path("report.html"),
    plot: PlotOpt = None,
) -> None:
    """Write one self-contained HTML report (images inline, no network) of a run folder.

    The page shows what the run folder holds: from evaluate --run, histograms of each
    statistic on in- and out-of-knowledge queries with the critical value marked, ROC
    curves and the metrics table; from shift --run, the batch test and the monitor's
    p-values per window with alarms marked; from tripwire tune --run, the trade-off surface;
    shift-rate curves (shift_rates.json, written by the benchmark); and for a benchmark
    run directory, the rates of bench results (recomputed when the logs are newer).

    PNG plots are inlined and a content-security policy forbids any network access, so the
    file can be opened anywhere. --plot also writes the plots as PNG files. A folder with
    none of these files is an error.
    """
    from ragbound.report import load_run, write_report

    data = load_run(run_dir)
    write_report(data, out)
    if plot:
        write_plots(data, plot)
    notice(f"wrote {out}")


def register(app: typer.Typer) -> None:
    """Add ``report`` to ``app``."""
    app.command("report")(report)
