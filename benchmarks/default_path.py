"""The default Python path against the embedding alone (issue 40, item 6).

``python -m benchmarks.run default-path``: the PubMedQA knowledge base (the PQA-L abstracts,
indexed as ``make bench`` indexes them, calibrated on its 500 calibration questions; cached
in bench_out/default-path/) opened twice with default settings, ``Gate.load(kb)``. One gate
runs as the library does now (ONNX Runtime's threads do not spin; a small search holds
OpenBLAS to one thread), the other as it did before (its session opened with spinning on;
every search left to OpenBLAS's full pool). On the same in- and out-of-knowledge questions
(PubMedQA test, TruthfulQA), p50 wall time of:

- the query's embedding alone (``encode_one``), on either session;
- ``Gate.decide(q)`` on either gate.

The settings take turns, ten queries at a time, and within a turn the two calls alternate
query by query (:func:`interleaved_blocks`): all see the same load, and a call follows the
threads its own setting left spinning, not the other's. Every
decision is compared with the one before: equal in full, in action and p-value, in its
neighbours' chunks, and the largest change of a neighbour's similarity.
Target: a default decision at most :data:`TARGET` x its embedding (p50). Raw numbers in
bench_out/default_path.json (``default-path render``: the section again from them).
BENCH_DEFAULT_PATH_N sets the number of queries (default 300).

``default-path first-decision`` (issue 46): the first decision of a process that opens a
gate with tripwires, ``Gate.load(kb)`` then ``decide(q)``, on the BANKING77-OOS knowledge
base calibrated on its 2,000 in-scope test questions with the bundled sample's ten tripwires:
*before*, the calibration folder as saved before the tripwire floor's reference vectors were
kept (the 2,000 questions embedded at load), *after*, the folder as saved now (the vectors
read). Each in a fresh process, the two taking turns (BENCH_FIRST_DECISION_RUNS each, default
3); both floors and first decisions compared. Beside them, in one process: the embedding of
the first 500, 1,000 and 2,000 of those questions (what the reference's cap, ``MAX_REFERENCE``,
costs where vectors are not kept), and the kept file's size. Raw numbers in
bench_out/default_path_first.json (``default-path first-decision render``).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from unittest import mock

import numpy as np

from benchmarks import datasets
from benchmarks.doc import machine_description, markdown_table, write_section
from benchmarks.settings import int_value
from ragbound import blas_threads
from ragbound.artifacts import write_json
from ragbound.demo import sample_corpus
from ragbound.detect import Guard
from ragbound.detect.calibration import Calibration
from ragbound.detect.evaluate import split_queries
from ragbound.embedders import load_dense_embedder, set_cpu_spinning
from ragbound.embedders.onnx import OnnxEmbedder
from ragbound.embedders.onnx_runner import OnnxRunner
from ragbound.errors import RagboundError
from ragbound.gate import Decision, Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.tripwires import LiveTripwires, read_tripwires
from ragbound.tripwires.floor import MAX_REFERENCE, calibrated_floor, reference_texts

OUT = datasets.REPO / "bench_out"
KB = OUT / "default-path" / "kb-pubmedqa"
RAW = OUT / "default_path.json"
TITLE = "The default Python path against the embedding alone"
TARGET = 1.15
WARM_UP = 10
BLOCK = 10  # queries a setting runs before the other's turn
CALLS = {
    "embed": "embedding of the query alone (`encode_one`)",
    "decide": "`Gate.decide(q)`",
    "embed_old": "embedding of the query alone, spinning on",
    "decide_old": "`Gate.decide(q)`, spinning on, BLAS pool free",
}


def calibrated_kb(folder: Path = KB) -> Path:
    """``folder``: the PubMedQA knowledge base calibrated on half its questions (seed 0),
    built and saved there when it does not load (minutes on 2 cores, once)."""
    try:
        Gate.load(folder)
        return folder
    except (RagboundError, OSError):
        pass
    corpus = datasets.write_pubmedqa_corpus(OUT / "pubmedqa_corpus.jsonl")
    calibration, _ = split_queries(datasets.pubmedqa_questions(), 0.5, seed=0)
    print(f"building the PubMedQA knowledge base in {folder} (minutes, once)...", flush=True)
    kb = KnowledgeBase.build([corpus], embedder="minilm", id_field=datasets.CORPUS_IDS)
    kb.save(folder, overwrite=True)
    Guard.calibrate(KnowledgeBase.load(folder), calibration).save()
    return folder


class PinnedSession(OnnxEmbedder):
    """An ONNX embedder whose session is the one it was given: it is not opened again when
    :func:`set_cpu_spinning` changes (the old behaviour runs beside the new one)."""

    def __init__(self, embedder: OnnxEmbedder):
        super().__init__(embedder.folder, embedder.layout, name=embedder.name)
        self._info = embedder.info
        self._runner = embedder.runner()

    def runner(self) -> OnnxRunner:
        assert self._runner is not None
        return self._runner


def old_gate(folder: Path) -> tuple[Callable[[str], object], Callable[[str], Decision]]:
    """The embedding and the decision as the library ran before: the session opened with
    spinning on, searches on the full BLAS pool."""
    set_cpu_spinning(True)
    try:
        embedder = load_dense_embedder("minilm", runtime="onnx")
        assert isinstance(embedder, OnnxEmbedder), type(embedder)
        pinned = PinnedSession(embedder)
    finally:
        set_cpu_spinning(False)
    assert pinned.runner().spinning
    # the knowledge base loads its embedder by name: this one is handed in
    with mock.patch("ragbound.knowledge.held.load_dense_embedder", lambda *_, **__: pinned):
        gate = Gate.load(folder)
        assert gate.guard.kb.embedder is pinned
    return pinned.encode_one, pool_free(gate.decide)


def pool_free(decide: Callable[[str], Decision]) -> Callable[[str], Decision]:
    """``decide`` with every search left to OpenBLAS's full pool (nothing held)."""

    def free(query: str) -> Decision:
        small = blas_threads.SMALL_PRODUCT
        blas_threads.SMALL_PRODUCT = 0  # every product counts as large
        try:
            return decide(query)
        finally:
            blas_threads.SMALL_PRODUCT = small

    return free


def compared(a: Decision, b: Decision) -> dict[str, bool | float]:
    """How two decisions of one query agree: equal in full, in action and p-value, in the
    neighbours' chunks and order, and the largest difference of a neighbour's similarity."""
    ours, theirs = a.model_dump(), b.model_dump()
    sims = [(x.similarity, y.similarity) for x, y in zip(a.neighbours, b.neighbours, strict=True)]
    return {
        "equal": ours == theirs,
        "action_p": (a.action, a.test.p_value) == (b.action, b.test.p_value),
        "chunks": [n.chunk_id for n in a.neighbours] == [n.chunk_id for n in b.neighbours],
        "similarity": max((abs(x - y) for x, y in sims), default=0.0),
    }


def agreement(rows: list[dict[str, bool | float]]) -> dict[str, float | int]:
    return {
        "equal": sum(bool(r["equal"]) for r in rows),
        "action_p": sum(bool(r["action_p"]) for r in rows),
        "chunks": sum(bool(r["chunks"]) for r in rows),
        "similarity": max(float(r["similarity"]) for r in rows),
    }


def interleaved_blocks(
    groups: Sequence[dict[str, Callable[[str], object]]], queries: Sequence[str]
) -> dict[str, list[float]]:
    """Wall time (ms) of every call on every query. The queries go in blocks of
    :data:`BLOCK`; each group of calls (one setting) runs the block in turn, the groups' order
    reversed every block; within a group each query runs its calls one after the other, their
    order reversed every query. So the settings see the same load, and a call follows the
    threads its own setting left, not the other's (but at a block's start)."""
    times: dict[str, list[float]] = {name: [] for group in groups for name in group}
    for b, first in enumerate(range(0, len(queries), BLOCK)):
        block = queries[first : first + BLOCK]
        for group in groups if b % 2 == 0 else list(reversed(groups)):
            names = list(group)
            for i, query in enumerate(block):
                for name in names if i % 2 == 0 else names[::-1]:
                    start = time.perf_counter()
                    group[name](query)
                    times[name].append((time.perf_counter() - start) * 1e3)
    return times


def default_path_part(n_queries: int) -> dict:
    folder = calibrated_kb()
    set_cpu_spinning(False)  # the library's default, whatever ran before in this process
    gate = Gate.load(folder)
    old_embed, old_decide = old_gate(folder)
    _, tests = split_queries(datasets.pubmedqa_questions(), 0.5, seed=0)
    far = datasets.truthfulqa_questions()
    queries = [q for pair in zip(tests, far, strict=False) for q in pair][:n_queries]
    embedder = gate.guard.kb.embedder
    spin_only = pool_free(gate.decide)
    groups: list[dict[str, Callable[[str], object]]] = [
        {"embed": embedder.encode_one, "decide": gate.decide},
        {"embed_spin_off": embedder.encode_one, "decide_spin_off": spin_only},
        {"embed_old": old_embed, "decide_old": old_decide},
    ]
    interleaved_blocks(groups, queries[:WARM_UP])  # sessions, caches, pools
    before = [old_decide(q) for q in queries]
    times = interleaved_blocks(groups, queries)
    p50 = {name: statistics.median(values) for name, values in times.items()}
    return {
        "n": len(queries),
        "n_chunks": len(gate.guard.kb),
        "p50_ms": p50,
        "agreement": {
            name: agreement([compared(call(q), b) for q, b in zip(queries, before, strict=True)])
            for name, call in (("decide", gate.decide), ("decide_spin_off", spin_only))
        },
        "small_product": blas_threads.SMALL_PRODUCT,
        "machine": machine_description(),
        "date": time.strftime("%Y-%m-%d"),
    }


SETTINGS = {  # row label -> (embed key, decide key)
    "now (default): no spinning, small searches on one BLAS thread": ("embed", "decide"),
    "no spinning, BLAS pool free": ("embed_spin_off", "decide_spin_off"),
    "before: spinning on, BLAS pool free": ("embed_old", "decide_old"),
}


def default_path_markdown(results: dict) -> list[str]:
    p50, n = results["p50_ms"], results["n"]
    rows = []
    for label, (embed, decide) in SETTINGS.items():
        same = results["agreement"].get(decide)
        rows.append(
            [
                label,
                f"{p50[embed]:.2f}",
                f"{p50[decide]:.2f}",
                f"**{p50[decide] / p50[embed]:.2f}**",
                f"{p50[decide] / p50['decide_old']:.2f}",
                "(the reference)"
                if same is None
                else f"{same['equal']} / {same['action_p']} / {same['chunks']} of {n}; "
                f"{same['similarity']:.1e}",
            ]
        )
    ratio = p50["decide"] / p50["embed"]
    verdict = "met" if ratio <= TARGET else "missed"
    header = [
        "settings",
        "embed p50, ms",
        "decide p50, ms",
        "decide / embed",
        "decide / before's",
        "decisions as before's: equal / action and p-value / chunks; largest similarity change",
    ]
    return [
        f"`Gate.load(kb).decide(q)` with default settings on the PubMedQA knowledge base "
        f"({results['n_chunks']:,} chunks, exact search), against the embedding of the query "
        f"alone (`encode_one`); {n} queries (PubMedQA test and TruthfulQA, alternating) in "
        f"one process, the settings taking turns every {BLOCK} queries, the two calls of a "
        "setting alternating query by query. *Now*: ONNX Runtime's intra-op threads do not "
        "spin after a run (`set_cpu_spinning(True)` turns them back on) and a search below "
        f"2^{results['small_product'].bit_length() - 1} multiply-adds holds OpenBLAS to one "
        "thread. *Before*: the session opened with spinning on, every search on OpenBLAS's "
        f"full pool. Target: now's decide / embed <= {TARGET} (p50): {verdict}.",
        "",
        *markdown_table(header, rows),
        "",
        "A one-query search is a matrix-vector product, which OpenBLAS splits by rows between "
        "its threads; a row at the end of a thread's share is summed by another kernel, so a "
        "few similarities differ in their last bit between one thread and the pool (as they "
        "already did between machines of other core counts, and between the library and "
        "`ragbound serve --threads 1`). Spinning alone changes no number.",
    ]


# ------------------------------------------------------------------ the first decision
FIRST = OUT / "default-path" / "first-decision"
FIRST_RAW = OUT / "default_path_first.json"
FIRST_TITLE = "The first decision of a gate with tripwires: the floor's reference kept"
FIRST_QUERY = "How do I activate my new card?"
CAPS = (500, 1000, 2000)


def first_decision_folders() -> dict[str, Path]:
    """The BANKING77-OOS knowledge base with the sample's tripwires, calibrated on its 2,000
    in-scope test questions: saved now (``after``) and as before (``before``: the same folder
    without the reference vectors), built once under bench_out/default-path/first-decision."""
    folders = {"before": FIRST / "before", "after": FIRST / "after"}
    try:
        if all(Gate.load(f).tripwires is not None for f in folders.values()):
            return folders
    except (RagboundError, OSError):
        pass
    from benchmarks import near, zoo  # the zoo's cached knowledge base, built when absent

    shutil.rmtree(FIRST, ignore_errors=True)
    cached = near.CachedEmbedder(load_dense_embedder(zoo.SPEC), zoo.CACHE / "query-cache")
    kb, _ = zoo.knowledge_base("BANKING77-OOS", zoo.CACHE, OUT, cached)
    assert kb.path is not None
    shutil.copytree(kb.path, folders["after"])
    after = KnowledgeBase.load(folders["after"])
    LiveTripwires.open(after).add(read_tripwires(sample_corpus() / "tripwires.jsonl"))
    questions = [q for q, _ in datasets.banking77oos("test")]
    Guard.calibrate(after, questions).save()  # the reference vectors embedded and kept
    shutil.copytree(folders["after"], folders["before"])
    older = Calibration.load(folders["before"])
    older.reference = None  # as saved before they were kept
    older.manifest = older.manifest.model_copy(update={"reference": None})
    older.save(folders["before"])
    (folders["before"] / "calibration" / f"{older.manifest.id}.reference.npy").unlink()
    return folders


def first_decision_child(folder: str) -> None:
    """In a fresh process: ``Gate.load`` and the first ``decide``, timed, as JSON on stdout."""
    start = time.perf_counter()
    gate = Gate.load(folder)
    loaded = time.perf_counter()
    decision = gate.decide(FIRST_QUERY)
    done = time.perf_counter()
    assert gate.tripwires is not None
    row = {
        "load_s": loaded - start,
        "decide_ms": (done - loaded) * 1e3,
        "total_s": done - start,
        "floor": gate.tripwires.floor().model_dump(mode="json"),
        "decision": decision.model_dump(mode="json"),
        "kept": gate.guard.calibration.reference is not None,
    }
    print(json.dumps(row))


def first_decision_run(folder: Path) -> dict:
    code = f"from benchmarks.default_path import first_decision_child as c; c({str(folder)!r})"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=datasets.REPO,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def cap_costs(folder: Path) -> dict:
    """Seconds to embed the first 500, 1,000, 2,000 reference questions (one process, warm)."""
    kb = Gate.load(folder).guard.kb
    texts = reference_texts(Calibration.load(folder).queries)
    kb.prepare(texts[:64])  # the session and its threads
    seconds = {}
    for cap in CAPS:
        start = time.perf_counter()
        kb.prepare(texts[:cap])
        seconds[str(cap)] = time.perf_counter() - start
    return seconds


def first_decision_part(runs: int) -> dict:
    folders = first_decision_folders()
    rows: dict[str, list[dict]] = {"before": [], "after": []}
    for turn in range(runs):  # the two take turns: the same load for both
        for name in ("before", "after") if turn % 2 == 0 else ("after", "before"):
            rows[name].append(first_decision_run(folders[name]))
    calibration = Calibration.load(folders["after"])
    assert calibration.manifest.reference is not None
    kept = folders["after"] / "calibration" / f"{calibration.manifest.id}.reference.npy"
    return {
        "runs": runs,
        "n_questions": calibration.manifest.n_queries,
        "n_reference": calibration.manifest.reference.n,
        "dimension": calibration.manifest.reference.dimension,
        "n_chunks": len(KnowledgeBase.load(folders["after"])),
        "max_reference": MAX_REFERENCE,
        "rows": rows,
        "same_floor": all(r["floor"] == rows["before"][0]["floor"] for r in rows["after"]),
        "same_decision": all(r["decision"] == rows["before"][0]["decision"] for r in rows["after"]),
        "kept_bytes": kept.stat().st_size,
        "embed_s": cap_costs(folders["after"]),
        "load_average": os.getloadavg()[0],  # other work on the machine, after the runs
        "machine": machine_description(),
        "date": time.strftime("%Y-%m-%d"),
    }


def first_decision_markdown(results: dict) -> list[str]:
    rows, median = results["rows"], statistics.median
    p50 = {
        name: {key: median(r[key] for r in found) for key in ("load_s", "decide_ms", "total_s")}
        for name, found in rows.items()
    }
    labels = {
        "before": "before: the reference questions embedded at load",
        "after": "after: their vectors kept with the calibration, read at load",
    }
    table = [
        [
            labels[name],
            f"{p50[name]['load_s']:.2f}",
            f"{p50[name]['decide_ms']:.1f}",
            f"{p50[name]['total_s']:.2f}",
            f"**{p50[name]['total_s'] / p50['before']['total_s']:.2f}**",
        ]
        for name in ("before", "after")
    ]
    embed = results["embed_s"]
    floor = rows["after"][0]["floor"]
    return [
        f"A fresh process opens a gate with tripwires and decides one query: "
        f"`Gate.load(kb)` then `decide(q)`, on the BANKING77-OOS knowledge base "
        f"({results['n_chunks']:,} chunks) calibrated on {results['n_questions']:,} in-scope "
        "questions, with the bundled sample's ten tripwires. The tripwires' calibrated floor "
        f"reads {results['n_reference']:,} of those questions (`MAX_REFERENCE` = "
        f"{results['max_reference']:,}). Median of {results['runs']} processes each, the two "
        "taking turns"
        + (
            f" (the machine's load average {results['load_average']:.1f} after the runs)."
            if "load_average" in results
            else "."
        ),
        "",
        *markdown_table(
            ["calibration folder", "load, s", "first decide, ms", "load + decide, s", "/ before"],
            table,
        ),
        "",
        f"Same floor in every process: {'yes' if results['same_floor'] else 'NO'} "
        f"({floor['value']:.4f}, in-knowledge forbidden <= {floor['bound']:.2%}); same first "
        f"decision: {'yes' if results['same_decision'] else 'NO'}. The kept vectors: "
        f"{results['kept_bytes'] / 1e6:.1f} MB (float32, {results['n_reference']:,} x "
        f"{results['dimension']}), written once when the calibration is saved.",
        "",
        "What the cap buys and costs. Embedding the reference questions (one process, warm) is "
        "paid once at save, and at load only where no vectors are kept (a folder saved "
        "before, or knowledge searched by text). The bound is 1% at any n >= 99; a larger n "
        "makes the floor steadier: the share of new in-knowledge questions a calibrated floor "
        "lets through is Beta(n + 1 - r, r) over calibration sets (r the conformal rank), "
        "its 95th percentile below.",
        "",
        *markdown_table(
            ["reference questions", "embedding, s", "bound", "share let through, 95th pct"],
            [
                [f"{int(cap):,}", f"{embed[cap]:.2f}", *steadiness(int(cap), 0.01)]
                for cap in sorted(embed, key=int)
            ],
        ),
    ]


def steadiness(n: int, share: float) -> list[str]:
    """The calibrated floor's bound on ``n`` reference questions and the 95th percentile of
    the share of in-knowledge questions it lets through (Beta(n + 1 - r, r))."""
    from scipy.stats import beta

    floor = calibrated_floor(np.arange(n, dtype=float), share)  # the rank alone matters
    rank = round((1 - floor.bound) * (n + 1))
    return [f"{floor.bound:.2%}", f"{beta.ppf(0.95, n + 1 - rank, rank):.2%}"]


def section(
    argv: Sequence[str],
    raw: Path,
    measure: Callable[[], dict],
    markdown: Callable[[dict], list[str]],
    name: str,
    title: str,
) -> dict:
    """Measure (or ``render``: from ``raw``), save to ``raw``, write section ``name``."""
    if list(argv) == ["render"]:
        results = json.loads(raw.read_text())
    elif argv:
        raise SystemExit(f"benchmarks.default_path {name}: unknown arguments {list(argv)}")
    else:
        results = measure()
        write_json(raw, results)
    lines = markdown(results)
    print("\n".join(lines))
    written = write_section(name, title, "\n".join(lines), machine=results.get("machine"))
    print(f"written to {written}")
    return results


def main(argv: Sequence[str] = ()) -> dict:
    """Measure (or ``render``: from bench_out/default_path.json), save, write the section;
    ``first-decision [render]``: the first decision's section."""
    if list(argv[:1]) == ["first-decision"]:
        return section(
            argv[1:],
            FIRST_RAW,
            lambda: first_decision_part(int_value("BENCH_FIRST_DECISION_RUNS", "3", 1, "3")),
            first_decision_markdown,
            "default-path-first-decision",
            FIRST_TITLE,
        )
    return section(
        argv,
        RAW,
        lambda: default_path_part(int_value("BENCH_DEFAULT_PATH_N", "300", 1, "300")),
        default_path_markdown,
        "default-path",
        TITLE,
    )
