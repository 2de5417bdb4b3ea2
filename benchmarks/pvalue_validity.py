"""How far Fisher's and Simes's p-values can exceed alpha under the null (a simulation).

The univariate statistics' conformal p-values are exactly valid. Fisher and Simes combine
per-neighbour p-values computed against the calibration itself (leave-one-out for the
calibration rows), so theirs are only approximately valid. This part draws exchangeable
calibration and test rows (``sets`` calibration sets of ``n`` rows, 40 test rows each) and
reports, per statistic, row kind and n, the largest excess P(p <= alpha) - alpha over
alpha in {0.01, 0.05, 0.1, 0.2} and k in {2, 4, 8, 32}. ``tests/stats/test_stats_null.py``
asserts bounds just above these figures.

    python -m benchmarks.run pvalue-validity      # about 3 minutes on one core
"""

from __future__ import annotations

import numpy as np

from benchmarks.doc import markdown_table, write_section
from ragbound.stats import EmpiricalNull, meta_null_scores, meta_scores

ALPHAS = np.array([0.01, 0.05, 0.1, 0.2])
KS = (2, 4, 8, 32)
NS = (20, 50, 100, 200, 500)
KINDS = ("iid", "level")
TEST_ROWS = 40
TITLE = "Validity of the Fisher and Simes p-values (simulation)"


def null_rows(rng: np.random.Generator, n: int, k: int, kind: str) -> np.ndarray:
    """``n`` exchangeable rows of top-k similarities, sorted descending.

    ``iid``: independent uniform neighbours; ``level``: a level per row shared by its
    neighbours, as real retrievals have.
    """
    if kind == "iid":
        sims = rng.uniform(0.0, 1.0, size=(n, k))
    else:
        sims = rng.normal(0.5, 0.05, size=(n, k)) + rng.normal(0.0, 0.05, size=(n, 1))
    return -np.sort(-sims, axis=1)


def excess(statistic: str, kind: str, n: int, k: int, sets: int) -> float:
    """Largest P(p <= alpha) - alpha over ALPHAS, from ``sets`` calibration sets."""
    rng = np.random.default_rng(n * 1000 + k)
    rejected = np.zeros(ALPHAS.size)
    for _ in range(sets):
        rows = null_rows(rng, n + TEST_ROWS, k, kind)
        calibration, queries = rows[:n], rows[n:]
        null = EmpiricalNull(meta_null_scores(statistic, calibration))
        p_values = null.p_values(meta_scores(statistic, calibration, queries))
        rejected += (p_values[:, None] <= ALPHAS).sum(axis=0)
    return float((rejected / (sets * TEST_ROWS) - ALPHAS).max())


def simulate(sets: int = 4000) -> dict:
    """Largest excess over k, per statistic, row kind and n."""
    return {
        f"{statistic} {kind}": {n: max(excess(statistic, kind, n, k, sets) for k in KS) for n in NS}
        for statistic in ("fisher", "simes")
        for kind in KINDS
    }


def markdown(results: dict, sets: int) -> str:
    header = ["statistic, neighbours", *(f"n = {n}" for n in NS)]
    rows = [[name, *(f"{value:+.4f}" for value in by_n.values())] for name, by_n in results.items()]
    return "\n".join(
        [
            f"Largest P(p <= alpha) - alpha over alpha in {{0.01, 0.05, 0.1, 0.2}} and k in "
            f"{{2, 4, 8, 32}}; {sets:,} calibration sets of n rows per cell, {TEST_ROWS} test "
            "rows each. *iid*: independent uniform neighbours; *level*: a level per row shared "
            "by its neighbours. Negative = conservative. One standard error is about "
            "sqrt(alpha (1 - alpha) / (n sets)).",
            "",
            *markdown_table(header, rows),
        ]
    )


def main(sets: int = 4000) -> None:
    """Run the simulation and write its section of docs/benchmarks.md."""
    text = markdown(simulate(sets), sets)
    print(text)
    print(f"written to {write_section('pvalue-validity', TITLE, text)}")
