"""Run folders, PNG plots and one self-contained HTML report (images inline, no network).

Layering: ``report`` sits above the feature packages and below the CLI. It reads result
models and plain JSON, and the benchmark run directory through its own reader
(``ragbound.bench.rundir``, ``ragbound.bench.results.current_results``); it calls no
detector, store or model, and no package but the CLI imports it
(``tests/report/test_report_layering.py`` checks both directions).

Names load from their submodule on first use: importing the package runs none of its
submodules, so one that looks a sibling up in it (``from ragbound.report import plots`` in
``report.html``) is no import cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragbound._lazy import lazy_attributes

_SOURCES: dict[str, str] = {
    "images": "ragbound.report.html",
    "render_report": "ragbound.report.html",
    "write_report": "ragbound.report.html",
    "save_pngs": "ragbound.report.plots",
    "RunData": "ragbound.report.run",
    "ScoredValues": "ragbound.report.run",
    "load_run": "ragbound.report.run",
    "record_evaluation": "ragbound.report.run",
    "record_shift": "ragbound.report.run",
    "record_tuning": "ragbound.report.run",
    "record_windows": "ragbound.report.run",
    "score_lists": "ragbound.report.run",
}

__all__ = [
    "RunData",
    "ScoredValues",
    "images",
    "load_run",
    "record_evaluation",
    "record_shift",
    "record_tuning",
    "record_windows",
    "render_report",
    "save_pngs",
    "score_lists",
    "write_report",
]

if TYPE_CHECKING:
    from ragbound.report.html import images, render_report, write_report
    from ragbound.report.plots import save_pngs
    from ragbound.report.run import (
        RunData,
        ScoredValues,
        load_run,
        record_evaluation,
        record_shift,
        record_tuning,
        record_windows,
        score_lists,
    )

__getattr__, __dir__ = lazy_attributes(__name__, _SOURCES, globals())
