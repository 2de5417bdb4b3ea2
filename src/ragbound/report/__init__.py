"""Run folders, PNG plots and one self-contained HTML report (images inline, no network)."""

from ragbound.report.html import render_report, write_report
from ragbound.report.run import RunData, load_run, record_evaluation, record_shift, record_windows

__all__ = [
    "RunData",
    "load_run",
    "record_evaluation",
    "record_shift",
    "record_windows",
    "render_report",
    "write_report",
]
