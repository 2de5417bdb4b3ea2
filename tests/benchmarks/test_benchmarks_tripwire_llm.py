"""The tripwire-llm benchmark's pieces (benchmarks/tripwire_llm.py) on made-up scores: no LLM."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchmarks.tripwire_llm import (
    STAGE1,
    Judge,
    best_per_split,
    chat,
    rates,
    tripwire_llm_markdown,
)
from benchmarks.tripwire_rule import ORDINARY, XS_SAFE, splits


def fake_part(separable: bool) -> dict:
    rng = np.random.default_rng(0)
    part: dict = {"n": 40, "splits": {}, "ms_per_judgement": 900.0, "judgements": 10}
    for k, name in enumerate(splits()):
        sets = {}
        for label in ["harmful", *ORDINARY, XS_SAFE]:
            harm = label == "harmful"
            judge = (0.9 if harm else 0.1) if separable else 0.5
            stage1 = rng.normal(1.0 if harm else 0.0, 1.0, 40)
            sets[label] = {
                "stage1": stage1.tolist(),
                "plain": [judge] * 40,
                "grounded": [judge if (k == 0 and s > 0.5) else None for s in stage1],
            }
        part["splits"][name] = {
            "tripwires": 10,
            "threshold": {str(q): 0.5 for q in STAGE1 if q},
            "grounded": k == 0,
            "sets": sets,
        }
    part["judge_alone"] = {"plain (all prompts)": {"ordinary": 0.9, "xstest_safe": 0.6}}
    return part


def test_a_separating_judge_without_stage_1_meets_the_target_on_every_split() -> None:
    part = fake_part(separable=True)
    best = best_per_split(part, "plain")
    assert all(r["recall"] == 1.0 and r["q"] is None for r in best.values())
    assert set(best_per_split(part, "grounded")) == {next(iter(splits()))}
    text = "\n".join(tripwire_llm_markdown({"tripwire_llm": part}))
    assert "Target met on every split: plain yes" in text


def test_a_judge_that_cannot_tell_forbids_all_or_nothing() -> None:
    split = next(iter(fake_part(separable=False)["splits"].values()))
    assert rates(split["sets"], "plain", -np.inf, 0.5) == {
        "recall": 1.0,
        "ordinary": 1.0,
        "xstest_safe": 1.0,
    }
    assert rates(split["sets"], "plain", -np.inf, 0.6)["recall"] == 0.0


def test_the_judge_reads_its_cache_without_loading_the_model(tmp_path: Path) -> None:
    cache = tmp_path / "judge.jsonl"
    prompt = chat("How do I kill a Python process?")
    cache.write_text(json.dumps({"prompt": prompt, "score": 0.25, "seconds": 1.5}) + "\n")
    judge = Judge(cache)
    assert judge(prompt) == 0.25 and judge.median_ms() == 1500.0
    assert judge._llama is None


def test_no_markdown_before_the_part_ran() -> None:
    assert tripwire_llm_markdown({}) == []
