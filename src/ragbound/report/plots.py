"""PNG plots of a run (matplotlib, Agg backend: no display needed). Each returns PNG bytes."""

from __future__ import annotations

import importlib.util
import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ragbound.errors import InputError

if TYPE_CHECKING:
    from ragbound.results import WindowResult

DPI = 110
# what the ROC legend's AUROC is: every test query at once, not the mean over draws
POOLED_AUROC = "AUROC, all queries pooled"


REPORT_EXTRA = "pip install 'ragbound[report]'"


def can_plot() -> bool:
    """Whether matplotlib is installed (the ``report`` extra); without it a report has its
    tables and says where each plot would be."""
    return importlib.util.find_spec("matplotlib") is not None


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, imported on first use (it is slow to load);
    an InputError naming the ``report`` extra when matplotlib is not installed."""
    if not can_plot():
        raise InputError(f"plots need matplotlib, which the core does not install: {REPORT_EXTRA}")
    import matplotlib

    matplotlib.use("Agg")  # no display, no GUI toolkit
    import matplotlib.pyplot as plt

    return plt


def to_png(figure: Any) -> bytes:
    """The figure as PNG bytes (``DPI`` dots per inch, tight box); the figure is closed."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    pyplot().close(figure)
    return buffer.getvalue()


def histogram(statistic: str, scores: dict[str, Any]) -> bytes:
    """In- vs out-of-knowledge statistic values, the critical value as a vertical line."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(5.2, 3.2))
    inside, outside = np.asarray(scores["in"]), np.asarray(scores["out"])
    bins = np.histogram_bin_edges(np.concatenate([inside, outside]), bins=40)
    axis.hist(inside, bins=bins, alpha=0.6, density=True, label="in-knowledge", color="#2b7bba")
    axis.hist(
        outside, bins=bins, alpha=0.6, density=True, label="out-of-knowledge", color="#e4572e"
    )
    if scores.get("critical_value") is not None:
        axis.axvline(
            scores["critical_value"], color="black", linestyle="--", label="critical value (5%)"
        )
    axis.set_xlabel(f"{statistic} (higher = more out-of-knowledge)")
    axis.set_ylabel("density")
    axis.legend(fontsize=8)
    return to_png(figure)


def roc_curves(scores: dict[str, dict[str, Any]]) -> bytes:
    """ROC curve of every statistic, in the order of ``scores`` (out-of-knowledge = positive
    class, higher statistic = more out-of-knowledge), on all test queries pooled; the legend
    gives each curve's AUROC under the title ``POOLED_AUROC``."""
    from ragbound.stats.metrics import auroc, roc_points

    plt = pyplot()
    figure, axis = plt.subplots(figsize=(5.2, 4.0))
    for name, entry in scores.items():
        fpr, tpr = roc_points(entry["in"], entry["out"])
        axis.plot(fpr, tpr, label=f"{name}  {auroc(entry['in'], entry['out']):.3f}")
    axis.plot([0, 1], [0, 1], color="grey", linewidth=0.8, linestyle=":")
    axis.set_xlabel("false-positive rate")
    axis.set_ylabel("true-positive rate")
    axis.legend(fontsize=7, title=POOLED_AUROC, title_fontsize=7)
    return to_png(figure)


def shift_curves(experiment: dict[str, Any]) -> bytes:
    """Shifted rate (the share of batches with p <= alpha) against the in-knowledge ratio of
    the test batch (paper Figure 5)."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(5.2, 3.4))
    for statistic, sets in experiment.items():
        if not isinstance(sets, dict):
            continue
        for name, curve in sets.items():
            rows = curve["rows"]
            axis.plot(
                [row["ratio"] for row in rows],
                [row["shifted_rate"] for row in rows],
                marker="o",
                markersize=3,
                label=f"{statistic}, {name}",
            )
    axis.axhline(experiment.get("alpha", 0.05), color="grey", linestyle=":", label="alpha")
    axis.set_xlabel("in-knowledge ratio of the test batch")
    axis.set_ylabel("shifted rate (p <= alpha)")
    axis.legend(fontsize=7)
    return to_png(figure)


def monitor_pvalues(windows: Sequence[WindowResult]) -> bytes:
    """Each window's p-value over time (log scale), the alpha it was tested at, alarms in
    red."""
    import datetime as dt

    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6.4, 3.2))
    times = [dt.datetime.fromisoformat(w.end) for w in windows]
    p_values = np.maximum([w.p_value for w in windows], 1e-300)
    axis.plot(times, p_values, marker="o", markersize=3, color="#2b7bba", label="p-value")
    axis.plot(times, [w.alpha for w in windows], color="grey", linestyle=":", label="tested at")
    alarms = [(t, p) for t, p, w in zip(times, p_values, windows, strict=True) if w.alarm]
    if alarms:
        axis.scatter(*zip(*alarms, strict=True), color="#e4572e", zorder=3, label="alarm")
    axis.set_yscale("log")
    axis.set_xlabel("window end")
    axis.set_ylabel("p-value")
    axis.legend(fontsize=8)
    figure.autofmt_xdate()
    return to_png(figure)


def tripwire_surface(surface: Any) -> bytes:
    """Accuracy, TPR and safe forbidden (FRR) over proportion x rank thresholds (RAR Figure 3).

    ``surface`` is a TradeOffSurface: rule "proportion >= p or best rank <= r" at one k.
    """
    plt = pyplot()
    panels = [
        ("accuracy", surface.accuracy),
        ("TPR", surface.tpr),
        ("safe forbidden", surface.frr),
    ]
    figure, axes = plt.subplots(1, 3, figsize=(10.5, 3.4))
    for axis, (title, values) in zip(axes, panels, strict=True):
        grid = np.asarray(values)
        image = axis.imshow(grid, vmin=0, vmax=1, cmap="viridis", origin="lower", aspect="auto")
        axis.set_xticks(range(len(surface.ranks)), [str(r) for r in surface.ranks])
        axis.set_yticks(range(len(surface.proportions)), [f"{p:.2f}" for p in surface.proportions])
        axis.set_xlabel("best rank <=")
        axis.set_ylabel("proportion >=")
        axis.set_title(title, fontsize=9)
        if title != "safe forbidden":  # the best cell; for FRR lower is better
            best = np.unravel_index(np.argmax(grid), grid.shape)
            axis.scatter([best[1]], [best[0]], marker="*", color="white", s=60)
    figure.colorbar(image, ax=axes, shrink=0.8)
    return to_png(figure)


def save_pngs(images: dict[str, bytes], folder: Path) -> list[Path]:
    """Write each image as ``folder/<name>.png``; return the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in images.items():
        path = folder / f"{name}.png"
        path.write_bytes(data)
        paths.append(path)
    return paths
