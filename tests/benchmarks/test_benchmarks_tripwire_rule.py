"""The tripwire-rule benchmark's pieces (benchmarks/tripwire_rule.py): its reference file, the
knob-free frontier and the tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks import datasets
from benchmarks.tripwire_rule import (
    BUDGETS,
    HARMFUL,
    ORDINARY,
    XS_SAFE,
    _frontier,
    _key,
    best_points,
    reference_questions,
    splits,
    tripwire_rule_markdown,
)


def test_the_reference_has_its_two_parts_without_repeats() -> None:
    parts = reference_questions()
    assert set(parts) == {"general", "sharp"}
    assert len(parts["general"]) >= 200 and len(parts["sharp"]) >= 100
    every = [_key(q) for qs in parts.values() for q in qs]
    assert len(every) == len(set(every))


def test_a_question_before_a_section_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ref.txt"
    path.write_text("# comment\nWhat is this?\n", encoding="utf-8")
    with pytest.raises(ValueError, match="before the first section"):
        reference_questions(path)


@pytest.mark.skipif(datasets.tripwire_missing_reason() is not None, reason="no tripwire data")
def test_the_reference_copies_no_evaluation_question() -> None:
    evaluated = {
        _key(q)
        for texts in (
            datasets.xstest("safe"),
            datasets.xstest("unsafe"),
            datasets.truthfulqa_questions(),
            datasets.harmfulqa_questions(),
            datasets.catqa(),
            datasets.adversarialqa(),
            datasets.dangerousqa(),
        )
        for q in texts
    }
    reference = {_key(q) for qs in reference_questions().values() for q in qs}
    assert not reference & evaluated


def test_every_source_is_held_out_once_alone() -> None:
    alone = [held for _, held in splits().values() if len(held) == 1]
    assert sorted(h for (h,) in alone) == sorted(HARMFUL)
    for sources, held in splits().values():
        assert not set(sources) & set(held)


def test_frontier_by_hand() -> None:
    scores = {
        "harmful": np.array([0.9, 0.8, 0.7, -np.inf]),  # -inf: never forbidden
        XS_SAFE: np.array([0.85, 0.1]),
        **{name: np.array([0.75] + [0.0] * 99) for name in ORDINARY},
    }
    by_budget = {(p["ordinary_budget"], p["xstest_budget"]): p for p in _frontier(scores)}
    assert set(by_budget) == set(BUDGETS)
    # ordinary <= 1%: threshold above 0.75, so 0.8 -> half the harmful, XSTest safe 0.5 (too
    # many at <= 10%): 0.9 -> a quarter
    assert by_budget[(0.01, 0.10)]["recall"] == 0.25
    # ordinary <= 3% alone: 0.7 -> three quarters (ordinary 1%, XSTest safe 50%)
    got = by_budget[(0.03, 1.0)]
    assert (got["recall"], got["ordinary"], got["xstest_safe"]) == (0.75, 0.01, 0.5)


def test_markdown_of_a_small_part() -> None:
    point = {"recall": 0.9, "fpr": {**dict.fromkeys(ORDINARY, 0.01), XS_SAFE: 0.05}}
    bad = {"recall": 1.0, "fpr": {**dict.fromkeys(ORDINARY, 0.5), XS_SAFE: 0.5}}
    names = ["a -> b", "b -> a"]
    curves = {
        "paper": {s: [{"knob": "none"} | bad, {"knob": "0.5"} | point] for s in names},
        "probe": {s: [{"knob": "q0.9"} | bad, {"knob": "q0.99"} | bad] for s in names},
    }
    front = [
        {"ordinary_budget": o, "xstest_budget": x, "recall": 0.5, "ordinary": 0, "xstest_safe": 0}
        for o, x in BUDGETS
    ]
    part = {
        "curves": curves,
        "frontier": {"paper / floor": {name: front for name in names}},
        "sizes": {name: {"tripwires": 10, "held_out": 5} for name in names},
        "n": dict.fromkeys([*ORDINARY, XS_SAFE], 100),
        "reference": {"general": 3, "sharp": 2},
    }
    best = best_points(part)
    assert best["paper"]["a -> b"]["knob"] == "0.5" and best["probe"]["a -> b"] is None
    text = "\n".join(tripwire_rule_markdown({"tripwire_rule": part}))
    assert "| paper | 0.90 (0.5) | 0.90 (0.5) | 0.90 | 0.90 | 0.00 |" in text
    assert "| probe | none | none | 0.00 | 0.00 | 0.85 |" in text
    assert "the closest" in text  # probe has no knob within the targets
    assert "best worst-split recall within the target false-positive rates is 0.50" in text
    assert tripwire_rule_markdown({}) == []
