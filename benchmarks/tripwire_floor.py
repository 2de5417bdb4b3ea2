"""Tripwires that do not fire on ordinary questions (issue 46, item 3): the floor calibrated
on the knowledge's own questions against the set-derived floor and the paper's rule, on the
corpus zoo, with the sample's ten tripwires and with every shared harmful set as tripwires.

Set-up (seed 0, MiniLM, knowledge bases as ``ragbound index`` makes them, cached with the
zoo's under bench_out/zoo/): PubMedQA, COVID-QA halves, BANKING77-OOS and CLAP NQ as the zoo
splits them (:mod:`benchmarks.zoo`), and doc2dial (:mod:`benchmarks.conversations`' split:
calibrated on the calibration dialogues' first questions, tested on every user turn of the
test dialogues, each turn alone: the vague short turns chats are full of). The calibration
questions are the floor's reference, as a :class:`~ragbound.gate.Gate` gives them.

Tripwire sets (each embedded once, held in memory beside each knowledge base): the bundled
sample's 10; HarmfulQA (the in-topic half of every subtopic, :func:`benchmarks.tripwires.
splits`, three topics left out); DangerousQA (200), CatQA-English (550), AdversarialQA (500),
XSTest unsafe (200), each whole.

Measured per corpus, set and rule: in-knowledge test questions called forbidden (the target:
at most 1% with the default on every corpus and set); XSTest's safe prompts forbidden; harmful
recall on HarmfulQA's left-out topics (no tripwire of theirs in the HarmfulQA set; another
set's tripwires meet them as a new set would) and, for the HarmfulQA set, on the in-topic
test quarter. Rules: ``paper`` (p >= 0.5 or rank 1 in the top 5, no floor), ``set floor``
(the default before: the floor derived from the set alone) and ``default`` (that floor raised
to the one calibrated on the calibration questions at 1%).

``python -m benchmarks.tripwire_floor`` (``render``: the section again from bench_out/
tripwire_floor.json); the tables go to the ``tripwire-floor`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks import conversations, datasets, near, tripwires, zoo
from benchmarks.doc import markdown_table, write_section
from ragbound.artifacts import write_json
from ragbound.demo import sample_corpus
from ragbound.embedders import load_dense_embedder
from ragbound.knowledge import KnowledgeBase
from ragbound.stores import Hits
from ragbound.stores.exact import ExactStore
from ragbound.tripwires import (
    Tripwire,
    TripwireManifest,
    TripwireRule,
    TripwireTest,
    read_tripwires,
    tripwire_id,
)
from ragbound.tripwires.floor import Reference
from ragbound.tripwires.models import set_hash

OUT = datasets.REPO / "bench_out"
RAW = OUT / "tripwire_floor.json"
TITLE = "Tripwire floor: ordinary questions called forbidden, on the corpus zoo"
SEED = 0
CORPORA = ("PubMedQA", "COVID-QA halves", "BANKING77-OOS", "CLAP NQ", "doc2dial")
RULES = {
    "paper": TripwireRule.paper(),
    "set floor": TripwireRule.default(calibrated=None),
    "default": TripwireRule.default(),
}
TARGET = 0.01  # in-knowledge questions forbidden, every corpus and set (issue 46)
IN_KNOWLEDGE, SAFE, HELD_OUT, IN_TOPIC = (
    "in-knowledge",
    "XSTest safe",
    "HarmfulQA left-out topics",
    "HarmfulQA in-topic",
)


class MemoryTripwires:
    """A tripwire set held in memory (vectors searched exactly): many sets beside one
    knowledge base without a folder each."""

    reads_search = False

    def __init__(self, kb: KnowledgeBase, found: list[Tripwire], vectors: np.ndarray):
        self.kb = kb
        self.tripwires = found
        self.vectors = np.asarray(vectors, np.float32)
        self.manifest = TripwireManifest(
            embedder_identity=kb.embedder_name, n_tripwires=len(found), set_hash=set_hash(found)
        )
        self._store = ExactStore(self.vectors)

    def __len__(self) -> int:
        return len(self.tripwires)

    def search(self, query_vectors: np.ndarray, k: int) -> Hits:
        return self._store.search(np.asarray(query_vectors, np.float32), min(k, len(self)))


# ------------------------------------------------------------------------------ data
def _flat(name: str) -> list[str]:
    """A harmful set's questions: a list, or topic -> subtopic -> questions, flattened."""
    data = json.loads((datasets.data_root() / "harmfulqa" / name).read_text(encoding="utf-8"))
    if isinstance(data, list):
        return [q for q in data if isinstance(q, str) and q.strip()]
    return [q for subtopics in data.values() for qs in subtopics.values() for q in qs]


def tripwire_sets() -> dict[str, list[Tripwire]]:
    """The sample's tripwires and every shared harmful set as tripwires."""

    def as_tripwires(questions: Sequence[str], topic: str) -> list[Tripwire]:
        unique = dict.fromkeys(q.strip() for q in questions if q.strip())
        return [
            Tripwire(id=tripwire_id(topic, q), text=q, topic=topic, source=topic) for q in unique
        ]

    return {
        "sample": read_tripwires(sample_corpus() / "tripwires.jsonl"),
        "HarmfulQA": tripwires.splits(SEED)["tripwires"],
        "DangerousQA": as_tripwires(datasets.dangerousqa(), "DangerousQA"),
        "CatQA": as_tripwires(_flat("catqa_english.json"), "CatQA"),
        "AdversarialQA": as_tripwires(_flat("adversarialqa.json"), "AdversarialQA"),
        "XSTest unsafe": as_tripwires(datasets.xstest("unsafe"), "XSTest unsafe"),
    }


def corpus_split(name: str, embedder: near.CachedEmbedder) -> tuple[KnowledgeBase, list, list]:
    """(knowledge base, calibration questions, in-knowledge test questions) of ``name``."""
    if name == "doc2dial":
        corpus = conversations.load_corpus()
        split = conversations.make_split(
            corpus, conversations.cached_kb(corpus, zoo.CACHE, embedder), SEED
        )
        turns = [t.last_user for d in split.test for t in d.turns()]
        return split.kb, split.first_questions(), turns
    kb, _ = zoo.knowledge_base(zoo.KB_OF[name], zoo.CACHE, OUT, embedder)
    split = zoo.SPLITS[name](kb, SEED)
    return split.kb, split.calibration, split.inside


# --------------------------------------------------------------------------- measure
def corpus_rows(
    kb: KnowledgeBase,
    calibration: list[str],
    queries: dict[str, list[str]],
    sets: dict[str, list[Tripwire]],
) -> dict:
    """Per tripwire set and rule: each query set's share forbidden, and the floor used."""
    vectors = {label: kb.embed(texts) for label, texts in queries.items()}
    reference = Reference(calibration, source="calibration")
    rows: dict = {}
    for name, found in sets.items():
        source = MemoryTripwires(kb, found, kb.embed([t.text for t in found]))
        guard = TripwireTest(kb, RULES["paper"], tripwires=source, reference=reference)
        merged = {label: guard.retrieve_vectors(v, guard.rule.k) for label, v in vectors.items()}
        rows[name] = {}
        for rule_name, rule in RULES.items():
            guard.rule = rule
            rates = {
                label: float(np.mean([d.forbidden for d in guard.decide([""] * len(m.flags), m)]))
                for label, m in merged.items()
                if label != IN_TOPIC or name == "HarmfulQA"
            }
            rows[name][rule_name] = {"rates": rates, "floor": guard.floor().model_dump(mode="json")}
    return rows


def floor_part() -> dict:
    """Every corpus (those whose data is here), every set, every rule."""
    embedder = near.CachedEmbedder(load_dense_embedder(zoo.SPEC), zoo.CACHE / "query-cache")
    sets = tripwire_sets()
    split = tripwires.splits(SEED)
    shared = {
        SAFE: datasets.xstest("safe"),
        HELD_OUT: split["test_held_out"],
        IN_TOPIC: split["test_in_topic"],
    }
    results: dict = {"seed": SEED, "rows": {}, "sizes": {}, "skipped": {}, "seconds": {}}
    results["n_tripwires"] = {name: len(found) for name, found in sets.items()}
    for name in CORPORA:
        reason = conversations.missing_reason() if name == "doc2dial" else zoo.missing_reason(name)
        if reason:
            results["skipped"][name] = reason
            continue
        start = time.perf_counter()
        kb, calibration, inside = corpus_split(name, embedder)
        queries = {IN_KNOWLEDGE: inside, **shared}
        results["rows"][name] = corpus_rows(kb, calibration, queries, sets)
        results["sizes"][name] = {"calibration": len(calibration), "in-knowledge": len(inside)}
        results["seconds"][name] = time.perf_counter() - start
        print(f"{name}: {results['seconds'][name]:.0f} s", flush=True)
        write_json(RAW, results)
    results["sizes"]["shared"] = {label: len(q) for label, q in shared.items()}
    return results


# -------------------------------------------------------------------------- markdown
def _worst(values: dict[str, float], high: bool = True) -> str:
    corpus = (max if high else min)(values, key=values.get)
    return f"{values[corpus]:.3f} ({corpus})"


def summary_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """Per set and rule: in-knowledge forbidden (mean, worst corpus), XSTest safe forbidden
    (mean, worst), harmful recall (mean, lowest)."""
    rows_of = results["rows"]
    header = [
        "tripwires",
        "rule",
        "in-knowledge forbidden: mean",
        "worst corpus",
        "XSTest safe forbidden: mean",
        "worst",
        "left-out topics caught: mean",
        "lowest",
        "in-topic caught: mean",
    ]
    rows = []
    for name, n in results["n_tripwires"].items():
        for rule in RULES:
            per = {c: rows_of[c][name][rule]["rates"] for c in rows_of}
            ik = {c: r[IN_KNOWLEDGE] for c, r in per.items()}
            safe = {c: r[SAFE] for c, r in per.items()}
            held = {c: r[HELD_OUT] for c, r in per.items()}
            topic = [r[IN_TOPIC] for r in per.values() if IN_TOPIC in r]
            rows.append(
                [
                    f"{name} ({n})",
                    rule,
                    f"{np.mean(list(ik.values())):.3f}",
                    _worst(ik),
                    f"{np.mean(list(safe.values())):.3f}",
                    _worst(safe),
                    f"{np.mean(list(held.values())):.3f}",
                    _worst(held, high=False),
                    f"{np.mean(topic):.3f}" if topic else "",
                ]
            )
    return header, rows


def corpus_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """The default per corpus and set: in-knowledge forbidden, the floor and its bound."""
    rows_of = results["rows"]
    header = ["corpus (calibration, test)", *results["n_tripwires"]]
    rows = []
    for corpus, by_set in rows_of.items():
        size = results["sizes"][corpus]
        cells = []
        for name in results["n_tripwires"]:
            entry = by_set[name]["default"]
            floor = entry["floor"]
            value = "none" if floor["value"] is None else f"{floor['value']:.3f}"
            cells.append(
                f"{entry['rates'][IN_KNOWLEDGE]:.3f} (floor {value} {floor['source']}, "
                f"bound {floor['bound']:.3f})"
            )
        rows.append([f"{corpus} ({size['calibration']}, {size['in-knowledge']})", *cells])
    return header, rows


def floor_markdown(results: dict) -> list[str]:
    if not results.get("rows"):
        return []
    shared = results["sizes"].get("shared", {})
    counts = ", ".join(f"{label} {n}" for label, n in shared.items())
    worst = max(
        by_set[name]["default"]["rates"][IN_KNOWLEDGE]
        for by_set in results["rows"].values()
        for name in by_set
    )
    met = "met" if worst <= TARGET else "NOT met"
    skipped = "".join(f" {c} skipped: {r}." for c, r in results["skipped"].items())
    return [
        f"Seed {results['seed']}; shared sets: {counts}. Share called *forbidden*, per rule: "
        "`paper` (no floor), `set floor` (the default before: the floor derived from the "
        "tripwire set alone), `default` (that floor raised, when needed, to the one "
        "calibrated on the calibration questions so that at most 1% of in-knowledge "
        f"questions are forbidden). Target: in-knowledge forbidden <= {TARGET:.0%} on every "
        f"corpus and set with the default: worst {worst:.3f}, {met}.{skipped}",
        "",
        *markdown_table(*summary_table(results)),
        "",
        "*The default per corpus: in-knowledge test questions forbidden, the floor in force "
        "(calibrated: the calibrated floor is the higher) and the bound it states*",
        "",
        *markdown_table(*corpus_table(results)),
        "",
    ]


def write(results: dict) -> Path | None:
    lines = floor_markdown(results)
    return write_section("tripwire-floor", TITLE, "\n".join(lines)) if lines else None


def main(argv: Sequence[str] = ()) -> dict:
    """Measure (or ``render`` the saved numbers) and write the section."""
    if list(argv) == ["render"]:
        results = json.loads(RAW.read_text())
    elif argv:
        raise SystemExit(f"benchmarks.tripwire_floor: unknown arguments {list(argv)}")
    else:
        results = floor_part()
        write_json(RAW, results)
    written = write(results)
    if written:
        print(f"raw numbers: {RAW}; tables written to {written}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
