"""The exceedance test's beta-binomial tail: the old all-integer sum against the current one.

``exceedance_test`` (and ``shift_test``, and ``serve``'s flagged-rate check) take the p-value
of ``exceed`` of ``m`` test values reaching a critical value that ``q`` of ``n`` reference
values reach: ``beta_binomial_sf(exceed - 1, m, q + 1, n - q)``. The old code summed every
term of that tail in big integers (``_weight`` over exceed .. m, one division); the current
one picks integers or a 50-digit decimal walk from the largest term. Each shape is timed once
for each, in one process; the old sum only on the three smaller shapes (the largest took
192 s). Also the relative difference between the two, where both ran.

Run: ``python -m benchmarks.run beta-binomial``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from benchmarks.doc import markdown_table
from ragbound.stats.beta_binomial import _weight, beta_binomial_sf

TITLE = "Beta-binomial tail (the exceedance test's p-value): old integer sum against now"
# (m test values, n reference values, q at or above the critical value, exceed reaching it)
SHAPES = (
    (50_000, 500, 25, 2_600),
    (100_000, 2_000, 100, 150),
    (20_000, 20_000, 1_000, 1_000),
    (100_000, 100_000, 5_000, 5_000),
)
OLD_UP_TO = 3  # the old sum on the first three shapes only


def old_sf(k: int, m: int, a: int, b: int) -> float:
    """P(X > k) as the old code took it: every term of the tail in integers, one division."""
    return _weight(k + 1, m, m, a, b) / math.comb(m + a + b - 1, m)


def beta_binomial_part(shapes: tuple = SHAPES, old_up_to: int = OLD_UP_TO) -> dict:
    """Seconds of each implementation on each shape, the p-values and their difference."""
    rows = []
    for index, (m, n, q, exceed) in enumerate(shapes):
        shape = (exceed - 1, m, q + 1, n - q)
        row = {"m": m, "n": n, "q": q, "exceed": exceed}
        row["new_s"], row["p_value"] = _timed(beta_binomial_sf, shape)
        if index < old_up_to:
            row["old_s"], old = _timed(old_sf, shape)
            row["relative_difference"] = abs(row["p_value"] - old) / old if old else 0.0
        rows.append(row)
        print(row, flush=True)
    return {"rows": rows}


def _timed(tail: Callable[..., float], shape: tuple) -> tuple[float, float]:
    start = time.perf_counter()
    value = tail(*shape)
    return time.perf_counter() - start, value


def beta_binomial_markdown(results: dict) -> list[str]:
    part = results.get("beta_binomial")
    if not part or "rows" not in part:
        return []
    header = ["m", "n", "q", "exceed", "p-value", "old, s", "now, s", "old / now", "rel. diff"]
    table = []
    for row in part["rows"]:
        old = row.get("old_s")
        table.append(
            [
                f"{row['m']:,}",
                f"{row['n']:,}",
                f"{row['q']:,}",
                f"{row['exceed']:,}",
                f"{row['p_value']:.6g}",
                "not run" if old is None else f"{old:.3f}",
                f"{row['new_s']:.4f}",
                "" if old is None else f"{old / row['new_s']:,.0f}",
                "" if old is None else f"{row['relative_difference']:.1e}",
            ]
        )
    return [
        "`beta_binomial_sf(exceed - 1, m, q + 1, n - q)`, the exceedance test's p-value, once "
        "per shape in one process. Old: every term of the tail summed in big integers. Now: "
        "integers over the shorter side where they are cheap, else a 50-digit decimal walk "
        "outwards from the largest term. The old sum was not run on the largest shape.",
        "",
        *markdown_table(header, table),
    ]
