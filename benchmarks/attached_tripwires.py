"""Tripwires kept in an attached Chroma collection against ragbound's own tripwire files.

Issue 28's third target for an attached store: the tripwires in the collection reject the
same queries as ragbound's own tripwire store. Part of ``python -m benchmarks.run attached``
(the collection of benchmarks/attached_collection.py: the PubMedQA chunks embedded by
``openai:minilm`` through infinity-emb in a ``chroma run`` server); ``python -m benchmarks.run
attached-tripwires`` runs it alone (it fills the collection again, without the quality and
latency tables).

The tripwire set of benchmarks/tripwires.py (seed 0: half of every in-topic HarmfulQA
subtopic) is added twice: into the attached collection (``LiveTripwires.open(kb).add``:
flagged records holding the endpoint's vectors) and as files into a copy of ragbound's own
exact knowledge base with the local MiniLM (``benchmarks.tripwires.guarded_kb``). A
``TripwireTest`` on each (the attached knowledge base loaded again, so its set is read back
from the collection with the stored vectors), each embedding the queries with its own
embedder, decides the query sets of benchmarks/tripwire_default.py (whole, and seed 0's
in-topic HarmfulQA test quarter) under the default rule and the paper's. Per set and rule:
each side's forbidden rate and how many queries' verdicts differ (target: none, or each one
explained: the differing queries are kept with both merged top-k). Rule-free agreement per
set: queries whose merged top-k tripwire/knowledge pattern differs, and the largest difference
between the two sides' merged similarities. Also: the time to add the set to the collection,
and within it the time to embed the texts through the endpoint, measured apart just before.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from benchmarks import datasets
from benchmarks.attached_collection import COLLECTION, attached_collection, local_kb
from benchmarks.doc import markdown_table
from benchmarks.timing import timed
from benchmarks.tripwire_default import RULES, fixed_sets
from benchmarks.tripwires import SEED, guarded_kb, splits
from ragbound.knowledge import KnowledgeBase
from ragbound.tripwires import LiveTripwires, TripwireTest
from ragbound.tripwires.guard import MergedTopK

TITLE = "Tripwires in an attached Chroma collection against ragbound's own"
MISSED = 1e-4  # a knowledge similarity this much lower on Chroma's side: a chunk missed
SIDES = ("own", "chroma")  # ragbound's folder knowledge base (files), the attached collection


def tripwire_part(local: KnowledgeBase, kb: KnowledgeBase, server, collection: str) -> dict:
    """Verdicts of the tripwires in ``kb``'s Chroma collection against those of the same set
    as files in a copy of ``local``; ``{"skipped": reason}`` without HarmfulQA or XSTest."""
    reason = datasets.tripwire_missing_reason()
    if reason:
        return {"skipped": reason}
    data = splits(SEED)
    tripwires = data["tripwires"]
    sets = {"HarmfulQA in-topic": data["test_in_topic"], **fixed_sets()}
    texts = [t.text for t in tripwires]
    _, embed_s = timed(lambda: kb.embed(texts))
    store = LiveTripwires.open(kb)
    _, add_s = timed(lambda: store.add(tripwires, source="HarmfulQA (benchmark split)"))
    attached = KnowledgeBase.load(kb.path)  # the set read back from the collection
    part: dict = {
        "seed": SEED,
        "n_tripwires": len(tripwires),
        "n_topics": len({t.topic for t in tripwires}),
        "collection_add_s": add_s,
        "endpoint_embed_s": embed_s,
        "collection_records": server.client().get_collection(collection).count(),
        "knowledge_chunks": {"own": len(local), "chroma": len(attached)},
        "read_back": len(LiveTripwires.open(attached)),
        "n": {name: len(queries) for name, queries in sets.items()},
    }
    with tempfile.TemporaryDirectory() as name:
        own = guarded_kb(local, tripwires, Path(name) / "kb")
        guards = {"own": TripwireTest(own), "chroma": TripwireTest(attached)}
        k = {rule.k for rule in RULES.values()}.pop()
        merged = {
            side: {name: guard.retrieve(queries, k) for name, queries in sets.items()}
            for side, guard in guards.items()
        }
        part["agreement"] = {
            name: _agreement(merged["own"][name], merged["chroma"][name]) for name in sets
        }
        part["rules"] = {
            rule_name: _compare(guards, rule, sets, merged) for rule_name, rule in RULES.items()
        }
    return part


def standalone_part(corpus: Path) -> dict:
    """``attached-tripwires``: the collection (benchmarks/attached_collection.py) set up again
    (local knowledge base, servers, endpoint embedding) and only this part run on it."""
    local, _ = local_kb(corpus)
    with attached_collection(local) as (server, _, kb, filled):
        return tripwire_part(local, kb, server, COLLECTION) | {"fill": filled}


def _agreement(own: MergedTopK, chroma: MergedTopK) -> dict:
    """Rule-free: queries whose merged top-k flags differ; the largest difference between the
    two sides' merged similarities, and apart for the tripwire and the knowledge entries (each
    side's i-th best of a kind against the other's); queries whose knowledge entries are less
    similar on Chroma's side (by more than ``MISSED``: its approximate search missed a chunk)."""
    gaps: dict[bool, list[np.ndarray]] = {True: [], False: []}
    for row in range(len(own.flags)):
        for kind in gaps:
            a = own.similarities[row][own.flags[row] == kind]
            b = chroma.similarities[row][chroma.flags[row] == kind]
            n = min(len(a), len(b))
            gaps[kind].append(a[:n] - b[:n])
    return {
        "pattern_differs": int(np.sum(np.any(own.flags != chroma.flags, axis=1))),
        "max_abs_similarity_diff": float(np.max(np.abs(own.similarities - chroma.similarities))),
        "tripwire_max_abs_diff": _max_abs(gaps[True]),
        "knowledge_max_abs_diff": _max_abs(gaps[False]),
        "knowledge_lower_on_chroma": sum(bool(np.any(g > MISSED)) for g in gaps[False]),
    }


def _max_abs(gaps: list[np.ndarray]) -> float:
    return max((float(np.max(np.abs(g))) for g in gaps if len(g)), default=0.0)


def _compare(guards: dict, rule, sets: dict[str, list[str]], merged: dict) -> dict:
    """Forbidden rates of both sides per set under ``rule``, and the differing verdicts."""
    verdicts = {}
    for side, guard in guards.items():
        guard.rule = rule
        verdicts[side] = {name: guard.decide(sets[name], merged[side][name]) for name in sets}
    floors = {side: guard.floor().value for side, guard in guards.items()}
    rates, differing = {}, []
    for name in sets:
        own, chroma = verdicts["own"][name], verdicts["chroma"][name]
        rates[name] = {
            side: float(np.mean([v.forbidden for v in verdicts[side][name]])) for side in SIDES
        }
        for i, (a, b) in enumerate(zip(own, chroma, strict=True)):
            if a.forbidden != b.forbidden:
                differing.append(
                    {"set": name, "query": a.query}
                    | {
                        side: _detail(merged[side][name], i, v)
                        for side, v in zip(SIDES, (a, b), strict=True)
                    }
                )
        rates[name]["differ"] = sum(d["set"] == name for d in differing)
    return {"rule": rule.describe(), "floors": floors, "rates": rates, "differing": differing}


def _detail(merged: MergedTopK, i: int, verdict) -> dict:
    return {
        "forbidden": verdict.forbidden,
        "proportion": verdict.proportion,
        "best_rank": verdict.best_rank,
        "similarities": [float(s) for s in merged.similarities[i]],
        "tripwire_flags": [bool(f) for f in merged.flags[i]],
    }


def attached_tripwires_markdown(results: dict) -> list[str]:
    """The section's Markdown lines from the saved results (none when not run)."""
    part = results.get("attached_tripwires")
    if not part or "rules" not in part:
        return []
    total = sum(
        rates["differ"] for rule in part["rules"].values() for rates in rule["rates"].values()
    )
    met = "met" if total == 0 else f"NOT met: {total} differ (listed below)"
    chunks = part["knowledge_chunks"]
    intro = (
        f"The tripwire set of the tripwire parts ({part['n_tripwires']} HarmfulQA questions, "
        f"half of each of {part['n_topics']} in-topic subtopics, seed {part['seed']}) added with "
        "`LiveTripwires.open(kb).add` both into the collection (flagged records, vectors by "
        f"`openai:minilm` through infinity-emb; {_collection(part)}) and as files "
        "into ragbound's own exact knowledge base (local MiniLM). Adding them to the collection "
        f"took {part['collection_add_s']:.1f} s, of which embedding the texts through the "
        f"endpoint takes about {part['endpoint_embed_s']:.1f} s (measured apart, just before). "
        f"The collection then held {part['collection_records']} records; the attached "
        f"knowledge counts {chunks['chroma']} chunks (its own: {chunks['own']}) and "
        f"{part['read_back']} tripwires were read back. A `TripwireTest` on each, each "
        "embedding the queries with its own embedder; forbidden rate per query set (whole "
        "sets, the in-topic HarmfulQA test quarter of the split) and the number of queries whose "
        f"verdict differs. Target: no verdict differs: **{met}**. Then, rule-free, where the two "
        "merged top-k differ: the tripwires are searched exactly on both sides (read back with "
        "their stored vectors), the knowledge through Chroma's HNSW search on one, so a "
        "knowledge entry less similar on Chroma's side (by more than "
        f"{MISSED:g}) is a chunk its approximate search missed."
    )
    lines = ["", intro, "", *markdown_table(*tripwire_table(part)), ""]
    floors = "; ".join(
        f"{name}: own {_floor(rule['floors']['own'])}, Chroma {_floor(rule['floors']['chroma'])}"
        for name, rule in part["rules"].items()
    )
    lines += [f"Floors used ({floors}).", ""]
    for name, rule in part["rules"].items():
        for d in rule["differing"]:
            lines.append(
                f"- {name}, {d['set']}: {d['query']!r}: own {_verdict(d['own'])}, "
                f"Chroma {_verdict(d['chroma'])}"
            )
    return lines


def tripwire_table(part: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows: per set, each rule's rates on both sides and the differing count,
    then the rule-free agreement."""
    header = ["query set (n)"]
    for name in part["rules"]:
        header += [f"{name}: own", f"{name}: Chroma", f"{name}: differ"]
    header += [
        "top-k pattern differs",
        "max abs sim diff",
        "max abs diff: tripwires",
        "max abs diff: knowledge",
        "knowledge less similar on Chroma",
    ]
    rows = []
    for name, n in part["n"].items():
        row = [f"{name} ({n})"]
        for rule in part["rules"].values():
            rates = rule["rates"][name]
            row += [f"{rates['own']:.3f}", f"{rates['chroma']:.3f}", str(rates["differ"])]
        agreement = part["agreement"][name]
        row += [str(agreement["pattern_differs"]), f"{agreement['max_abs_similarity_diff']:.1e}"]
        row += [
            f"{agreement['tripwire_max_abs_diff']:.1e}",
            f"{agreement['knowledge_max_abs_diff']:.1e}",
            str(agreement["knowledge_lower_on_chroma"]),
        ]
        rows.append(row)
    return header, rows


def _collection(part: dict) -> str:
    if "fill" not in part:  # run with the section above, on its collection
        return "the attached Chroma collection of the section above"
    return (
        "a collection set up again as in the section above by `python -m benchmarks.run "
        f"attached-tripwires`, {part['fill']['endpoint_chunks_per_s']:.1f} chunks/s through "
        "the endpoint"
    )


def _floor(value: float | None) -> str:
    return "none" if value is None else f"{value:.6f}"


def _verdict(detail: dict) -> str:
    sims = ", ".join(
        f"{'T' if flag else 'K'} {s:.6f}"
        for s, flag in zip(detail["similarities"], detail["tripwire_flags"], strict=True)
    )
    word = "forbidden" if detail["forbidden"] else "allowed"
    return f"{word} (top-k {sims})"
