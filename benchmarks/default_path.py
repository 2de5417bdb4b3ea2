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
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from unittest import mock

from benchmarks import datasets
from benchmarks.doc import machine_description, markdown_table, write_section
from benchmarks.settings import int_value
from ragbound import blas_threads
from ragbound.artifacts import write_json
from ragbound.detect import Guard
from ragbound.detect.evaluate import split_queries
from ragbound.embedders import load_dense_embedder, set_cpu_spinning
from ragbound.embedders.onnx import OnnxEmbedder
from ragbound.embedders.onnx_runner import OnnxRunner
from ragbound.errors import RagboundError
from ragbound.gate import Decision, Gate
from ragbound.knowledge import KnowledgeBase

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
    with mock.patch("ragbound.knowledge.base.load_dense_embedder", lambda *_, **__: pinned):
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


def main(argv: Sequence[str] = ()) -> dict:
    """Measure (or ``render``: from bench_out/default_path.json), save, write the section."""
    if list(argv) == ["render"]:
        results = json.loads(RAW.read_text())
    elif argv:
        raise SystemExit(f"benchmarks.default_path: unknown arguments {list(argv)}")
    else:
        results = default_path_part(int_value("BENCH_DEFAULT_PATH_N", "300", 1, "300"))
        write_json(RAW, results)
    lines = default_path_markdown(results)
    print("\n".join(lines))
    section = write_section("default-path", TITLE, "\n".join(lines), machine=results.get("machine"))
    print(f"written to {section}")
    return results
