"""benchmarks/beta_binomial.py: small shapes timed for real both ways, and its table."""

from __future__ import annotations

from benchmarks import beta_binomial
from benchmarks.run import PARTS, SECTIONS
from ragbound.stats.beta_binomial import beta_binomial_sf


def test_small_shapes_are_timed_both_ways_and_tabled() -> None:
    shapes = ((500, 50, 2, 30), (1_000, 1_000, 50, 50), (2_000, 2_000, 100, 100))
    part = beta_binomial.beta_binomial_part(shapes, old_up_to=2)
    rows = part["rows"]
    assert [(r["m"], r["exceed"]) for r in rows] == [(500, 30), (1_000, 50), (2_000, 100)]
    for row, (m, n, q, exceed) in zip(rows, shapes, strict=True):
        assert row["p_value"] == beta_binomial_sf(exceed - 1, m, q + 1, n - q)
        assert row["new_s"] > 0
    assert all(r["old_s"] > 0 and r["relative_difference"] <= 1e-15 for r in rows[:2])
    assert "old_s" not in rows[2]  # past old_up_to only the current code runs
    lines = beta_binomial.beta_binomial_markdown({"beta_binomial": part})
    assert any(line.startswith("| 500 | 50 | 2 | 30 |") for line in lines)
    assert any(line.startswith("| 2,000 |") and "not run" in line for line in lines)
    assert beta_binomial.beta_binomial_markdown({}) == []


def test_the_old_sum_is_the_exact_tail() -> None:
    # the old code's value: the same p-value as now, to a float's rounding
    old = beta_binomial.old_sf(29, 500, 3, 48)
    assert abs(old - beta_binomial_sf(29, 500, 3, 48)) <= 1e-16 * old


def test_the_part_and_its_section_are_registered() -> None:
    assert PARTS["beta-binomial"].needs == "nothing"
    title, render = SECTIONS["beta-binomial"]
    assert title == beta_binomial.TITLE and render is beta_binomial.beta_binomial_markdown
