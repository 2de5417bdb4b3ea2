"""Energy's temperature: the paper's tau = 1 against the embedder's training temperature.

On cosine similarities (|s| <= 1) Energy = -tau log sum exp(s_i / tau) at tau = 1 is close to
a mean of the top k, so it ranks queries like AvgKNN; at a contrastive embedder's training
temperature (0.05 for MiniLM, ``tau="auto"``) it is a soft maximum and ranks like MSS. This
part measures both on the PubMedQA set-up: detection quality near and far, and the Spearman
rank correlation of Energy's scores with AvgKNN's and MSS's on the same queries.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import spearmanr

from benchmarks.doc import markdown_table
from ragbound.detect import Guard
from ragbound.detect.evaluate import evaluate, statistic_scores
from ragbound.knowledge import KnowledgeBase

TEMPERATURES: tuple[float | str, ...] = (1.0, 0.1, "auto")
REFERENCES = ("mss", "avgknn")


def energy_tau_part(
    kb: KnowledgeBase,
    calibration: Sequence[str],
    ik_test: Sequence[str],
    ook: dict[str, list[str]],
) -> dict:
    """Per temperature: tau used, AUROC and TPR at 5% FPR per set, Spearman vs references."""
    rows = []
    outside = [q for queries in ook.values() for q in queries]
    for tau in TEMPERATURES:
        guard = Guard.calibrate(kb, calibration, k=32, tau=tau)
        quality = {
            name: evaluate(guard, ik_test, queries, samples=300, runs=10, seed=0)
            .statistics["energy"]
            .model_dump()
            for name, queries in ook.items()
        }
        scored = statistic_scores(guard, ik_test, outside, ("energy", *REFERENCES))
        values = {
            name: np.concatenate([sets.scores_in, sets.scores_out]) for name, sets in scored.items()
        }
        spearman = {
            name: float(spearmanr(values["energy"], values[name]).statistic) for name in REFERENCES
        }
        rows.append({"tau": tau, "tau_used": guard.config.tau, **quality, "spearman": spearman})
    return {"rows": rows, "n_scored": len(ik_test) + len(outside)}


def energy_tau_markdown(results: dict) -> list[str]:
    """The comparison as Markdown lines (empty when the part has not run)."""
    part = results.get("energy_tau")
    if not part:
        return []
    sets = [key for key in part["rows"][0] if key not in ("tau", "tau_used", "spearman")]
    header = ["energy at tau"]
    header += [f"{name} {metric}" for name in sets for metric in ("AUROC", "TPR@5%FPR")]
    header += [f"Spearman vs {name}" for name in REFERENCES]
    table = []
    for row in part["rows"]:
        label = f"{row['tau_used']:g}" + (" (auto)" if row["tau"] == "auto" else "")
        label += " (paper)" if row["tau"] == 1.0 else ""
        cells = [label]
        for name in sets:
            cells += [f"{row[name]['auroc']:.3f}", f"{row[name]['tpr_at_5_fpr']:.3f}"]
        cells += [f"{row['spearman'][name]:.4f}" for name in REFERENCES]
        table.append(cells)
    spread = np.ptp([row[sets[0]]["auroc"] for row in part["rows"]])
    return [
        "MiniLM, k = 32, the quality set-up above (500 calibration / 500 held-out PubMedQA "
        "questions, 10 draws of 300 per side); Spearman over the scores of all "
        f"{part['n_scored']:,} test queries. The paper's tau = 1 makes Energy an average of "
        "the top k; the training temperature makes it a soft maximum. "
        f"AUROC on {sets[0]} moves by {spread:.3f} across these temperatures.",
        "",
        *markdown_table(header, table),
    ]
