"""``ragbound report``: one self-contained HTML page of a run folder."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ragbound.cli import validate
from ragbound.cli.common import PlotOpt, write_plots


def report(
    run_dir: Annotated[Path, typer.Argument(help="Run folder (evaluate/shift --run).")],
    out: Annotated[
        Path,
        typer.Option("--out", help="HTML file to write.", callback=validate.output_file),
    ] = Path("report.html"),
    plot: PlotOpt = None,
) -> None:
    """Write one self-contained HTML report (images inline, no network) of a run folder."""
    from ragbound.report import load_run, write_report

    data = load_run(run_dir)
    write_report(data, out)
    if plot:
        write_plots(data, plot)
    sys.stderr.write(f"wrote {out}\n")


def register(app: typer.Typer) -> None:
    """Add ``report`` to ``app``."""
    app.command("report")(report)
