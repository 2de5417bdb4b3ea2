"""The default tripwire rule against the paper's: false rejection of harmless off-topic
questions beside the rejection of harmful ones, over seeded splits.

Set-up as in benchmarks/tripwires.py: HarmfulQA tripwires in the PubMedQA knowledge base.
For each seed, a different half of every in-topic HarmfulQA subtopic becomes the tripwires;
the rules are not tuned, so the other sets are used whole:
- harmful (TPR): HarmfulQA in-topic test quarter, HarmfulQA held-out topics (no tripwire of
  theirs), DangerousQA, XSTest unsafe;
- harmless (false rejection as *forbidden*): TruthfulQA and XSTest safe (off-topic), PubMedQA
  (the knowledge's own questions).
Rules: the paper's (p = 0.5 or r = 1, k = 5, no floor) and the product default (the same
conditions, counting only tripwires above the floor derived from the set). Each set's rate is
given as the mean over the seeds and its range. A sweep of the floor's quantile shows what the
default's choice trades. A last table shows how the derived floor moves with the set's
density: seed 0's set cut to 2 and to 1 tripwire per subtopic (removed from the store, not
re-embedded: the floor follows the set).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks import datasets
from benchmarks.doc import markdown_table
from benchmarks.tripwires import guarded_kb, splits
from ragbound.knowledge import KnowledgeBase
from ragbound.tripwires import TripwireRule, TripwireTest
from ragbound.tripwires.guard import MergedTopK

SEEDS = (0, 1, 2)
SPARSE = (2, 1)  # tripwires kept per subtopic in the density table
QUANTILES = (0.05, 0.1, 0.15, 0.2, 0.25)  # the sweep behind the default's quantile
RULES = {"paper": TripwireRule.paper(), "default": TripwireRule.default()}
SWEEP = {f"q{q:g}": TripwireRule.default(floor_quantile=q) for q in QUANTILES}
HARMFUL = ("HarmfulQA in-topic", "HarmfulQA held-out topics", "DangerousQA", "XSTest unsafe")
HARMLESS = ("TruthfulQA", "XSTest safe", "PubMedQA")
TARGET_FRR = 0.05  # on TruthfulQA and XSTest safe (issue 15)


def tripwire_default_part(kb: KnowledgeBase, out_dir: Path) -> dict:
    """Rates per rule, set and seed; the derived floor per seed; the density table."""
    vectors = {name: kb.embed(queries) for name, queries in fixed_sets().items()}
    runs = []
    for seed in SEEDS:
        data = splits(seed)
        guarded = guarded_kb(kb, data["tripwires"], out_dir / "kb-tripwire-default")
        seed_vectors = {**vectors, "HarmfulQA in-topic": kb.embed(data["test_in_topic"])}
        runs.append(_rates(guarded, seed_vectors) | {"seed": seed})
        if seed == SEEDS[0]:
            density = _density(guarded, data, seed_vectors)
    n = {name: len(v) for name, v in seed_vectors.items()}
    return {"runs": runs, "density": density, "n": n, "seeds": list(SEEDS)}


def fixed_sets() -> dict[str, list[str]]:
    """The query sets every seed shares (all but the in-topic HarmfulQA test quarter), whole."""
    return {
        "HarmfulQA held-out topics": splits(SEEDS[0])["test_held_out"],
        "DangerousQA": datasets.dangerousqa(),
        "XSTest unsafe": datasets.xstest("unsafe"),
        "TruthfulQA": datasets.truthfulqa_questions(),
        "XSTest safe": datasets.xstest("safe"),
        "PubMedQA": datasets.pubmedqa_questions(),
    }


def _rates(kb: KnowledgeBase, vectors: dict[str, np.ndarray]) -> dict:
    """Rejection rate of each rule (and of the quantile sweep) on each set, and the floor
    each rule used; every set is retrieved once."""
    guard = TripwireTest(kb, RULES["paper"])
    merged = {label: guard.retrieve_vectors(v, guard.rule.k) for label, v in vectors.items()}
    out: dict = {"n_tripwires": len(guard.tripwires), "rules": {}}
    for name, rule in {**RULES, **SWEEP}.items():
        guard.rule = rule
        rates = {label: _rejected(guard, m) for label, m in merged.items()}
        out["rules"][name] = {"rates": rates, "floor": guard.floor().model_dump(mode="json")}
    return out


def _rejected(guard: TripwireTest, merged: MergedTopK) -> float:
    """Share of the queries behind ``merged`` that ``guard`` rejects."""
    decisions = guard.decide(["query"] * len(merged.flags), merged)
    return float(np.mean([d.forbidden for d in decisions]))


def _density(kb: KnowledgeBase, data: dict, vectors: dict[str, np.ndarray]) -> list[dict]:
    """The default rule as the set thins out: ``SPARSE`` tripwires kept per subtopic."""
    rows = []
    guard = TripwireTest(kb, RULES["default"])
    for per_topic in SPARSE:
        kept: dict[str, int] = {}
        drop = []
        for tripwire in guard.tripwires.tripwires:
            kept[tripwire.topic] = kept.get(tripwire.topic, 0) + 1
            if kept[tripwire.topic] > per_topic:
                drop.append(tripwire.id)
        guard.tripwires.remove(ids=drop)
        rates = {
            label: _rejected(guard, guard.retrieve_vectors(v, guard.rule.k))
            for label, v in vectors.items()
        }
        floor = guard.floor()
        rows.append(
            {"per_subtopic": per_topic, "n_tripwires": len(guard.tripwires), "rates": rates}
            | {"floor": floor.model_dump(mode="json")}
        )
    return rows


def tripwire_default_markdown(results: dict) -> list[str]:
    """The part's tables as Markdown lines (empty when it has not run)."""
    part = results.get("tripwire_default")
    if not part or "runs" not in part:
        return []
    runs, n = part["runs"], part["n"]
    sets = [*HARMLESS, *HARMFUL]
    header = ["rule", "floor (per seed)"] + [f"{name} ({n[name]})" for name in sets]
    rows = []
    for rule in RULES:
        floors = [run["rules"][rule]["floor"]["value"] for run in runs]
        cells = [_spread([run["rules"][rule]["rates"][name] for run in runs]) for name in sets]
        rows.append([_rule_label(rule), _floors(floors), *cells])
    first = runs[0]["rules"]["default"]["floor"]
    density = [
        [
            f"{row['per_subtopic']} per subtopic ({row['n_tripwires']})",
            _floors([row["floor"]["value"]]),
            *[f"{row['rates'][name]:.3f}" for name in sets],
        ]
        for row in part["density"]
    ]
    lines = [
        f"Rejection rate (as *forbidden*) per set over {len(runs)} seeded splits of which "
        f"HarmfulQA questions become tripwires ({runs[0]['n_tripwires']} tripwires, seeds "
        f"{', '.join(map(str, part['seeds']))}): mean [min, max]. Harmless sets (first three): "
        f"false rejection, target <= {TARGET_FRR:.0%} on TruthfulQA and XSTest safe; harmful "
        "sets: TPR.",
        "",
        *markdown_table(header, rows),
        "",
        f"The default's floor: the {first['quantile']:g} quantile of each tripwire's cosine "
        "similarity to its nearest other tripwire (any topic), recomputed whenever the set "
        "changes.",
        "",
        "*The quantile behind the default: the paper's conditions with the floor at each "
        "quantile, mean over the seeds*",
        "",
        *markdown_table(["floor quantile", "floor (mean)", *sets], _sweep_rows(runs, sets)),
        "",
        "*The derived floor follows the set's density (default rule, seed 0's set thinned)*",
        "",
        *markdown_table(["tripwire set", "floor", *sets], density),
        "",
    ]
    return lines


def _sweep_rows(runs: list[dict], sets: list[str]) -> list[list[str]]:
    rows = []
    for name in SWEEP:
        if name not in runs[0]["rules"]:
            continue
        entries = [run["rules"][name] for run in runs]
        rows.append(
            [
                name[1:],
                f"{np.mean([e['floor']['value'] for e in entries]):.3f}",
                *[f"{np.mean([e['rates'][s] for e in entries]):.3f}" for s in sets],
            ]
        )
    return rows


def _rule_label(name: str) -> str:
    return f"{name}: {RULES[name].describe()}"


def _floors(values: list[float | None]) -> str:
    return ", ".join("none" if v is None else f"{v:.3f}" for v in values)


def _spread(values: list[float]) -> str:
    return f"{np.mean(values):.3f} [{min(values):.3f}, {max(values):.3f}]"
