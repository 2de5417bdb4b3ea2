"""The guard on the user's own LangChain vector store: latency against the bare retriever.

``python -m benchmarks.run native-guard``: the bundled sample corpus (its docs, chunked and
embedded with MiniLM) in langchain-core's ``InMemoryVectorStore``; a ``Guard`` calibrated on
the corpus's in-knowledge questions through
:class:`~ragbound.adapters.langchain_store.VectorStoreKnowledge`. Each question is retrieved
by the bare ``store.as_retriever()`` and by
:class:`~ragbound.adapters.langchain_store.GatedVectorStoreRetriever`, interleaved so both
see the same load; both embed the query once and search the store once. The table gives each
one's p50 and p99 wall time (ms), the ratio of p50s (target <= 1.05) and the median of the
per-query difference (what the guard adds: the test and the decision, no second search).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np

from benchmarks.doc import markdown_table
from benchmarks.timing import interleaved_ms, p50_p99

K = 4
CONTEXT_K = 4
ALPHA = 0.1
REPEATS = 3
TARGET_RATIO = 1.05
TITLE = "Guarding the user's own LangChain vector store: one search per query"


def _questions(name: str) -> list[str]:
    from ragbound.demo import sample_corpus

    lines = (sample_corpus() / name).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip()]


def native_guard_part(repeats: int = REPEATS) -> dict:
    """p50 / p99 ms of the bare and the guarded retriever on the sample corpus's questions."""
    from langchain_core.vectorstores import InMemoryVectorStore

    from ragbound.adapters.langchain_store import (
        GatedVectorStoreRetriever,
        RagboundEmbeddings,
        VectorStoreKnowledge,
    )
    from ragbound.demo import sample_corpus
    from ragbound.detect import Guard
    from ragbound.knowledge import KnowledgeBase

    kb = KnowledgeBase.build([sample_corpus() / "docs"], embedder="minilm")
    store = InMemoryVectorStore(RagboundEmbeddings(kb.embedder))
    store.add_texts([chunk.text for chunk in kb.chunks], ids=[chunk.id for chunk in kb.chunks])
    knowledge = VectorStoreKnowledge(store, name="minilm", size=len(kb.chunks))
    guard = Guard.calibrate(knowledge, _questions("in_knowledge.txt"), k=K, alpha=ALPHA)
    bare = store.as_retriever(search_kwargs={"k": CONTEXT_K})
    guarded = GatedVectorStoreRetriever(guard=guard, k=CONTEXT_K)
    queries = _questions("in_knowledge.txt")[:40] + _questions("out_of_knowledge.txt")[:20]
    return {
        "n_chunks": len(kb.chunks),
        "n_calibration": guard.calibration.manifest.n_queries,
        "k": K,
        "context_k": CONTEXT_K,
        **paired_latency(bare.invoke, guarded.invoke, queries * repeats),
        "load_average": os.getloadavg()[0],  # other jobs on the machine move the p50s
    }


def paired_latency(
    bare: Callable[[str], object], guarded: Callable[[str], object], queries: Sequence[str]
) -> dict:
    """Per-query wall time (ms) of two callables, interleaved, after one warm-up each."""
    bare(queries[0])
    guarded(queries[0])
    bare_ms, guarded_ms = interleaved_ms([bare, guarded], queries)
    stats = p50_p99("bare", bare_ms) | p50_p99("guarded", guarded_ms)
    ratio = stats["guarded_p50_ms"] / stats["bare_p50_ms"]
    extra = float(np.median(np.subtract(guarded_ms, bare_ms)))
    return {"n": len(queries), **stats, "ratio_p50": ratio, "extra_p50_ms": extra}


def native_guard_markdown(results: dict) -> list[str]:
    """The section's Markdown lines from the saved results (none when not run)."""
    part = results.get("native_guard")
    if not part:
        return []
    rows = latency_rows(part, "bare `store.as_retriever()`", "`GatedVectorStoreRetriever`")
    extra = part.get("extra_p50_ms")
    intro = (
        f"The bundled sample corpus ({part['n_chunks']} chunks, MiniLM) in langchain-core's "
        f"InMemoryVectorStore; {part['n']} retrievals each (in- and out-of-knowledge "
        f"questions, interleaved), {part['context_k']} documents returned; the guard "
        f"(mss, k = {part['k']}, {part['n_calibration']} calibration questions) searches the "
        "store once per query and decides from those scores."
        + ("" if extra is None else f" Median per-query extra time of the guard: {extra:.2f} ms.")
        + load_note(part.get("load_average"))
    )
    header = ["retriever", "p50 ms", "p99 ms", "p50 ratio to bare"]
    return ["", intro, "", *markdown_table(header, rows), ""]


def latency_rows(part: dict, bare: str, guarded: str) -> list[list[str]]:
    """The bare and the guarded retriever's p50 / p99 rows, the guarded with the p50 ratio."""
    return [
        [bare, f"{part['bare_p50_ms']:.2f}", f"{part['bare_p99_ms']:.2f}", ""],
        [
            guarded,
            f"{part['guarded_p50_ms']:.2f}",
            f"{part['guarded_p99_ms']:.2f}",
            f"{part['ratio_p50']:.3f} (target <= {TARGET_RATIO})",
        ],
    ]


def load_note(load: float | None) -> str:
    if load is None:
        return ""
    return (
        f" The machine's 1-minute load average was {load:.1f} at the end of the run (other "
        "jobs share its cores, so the p50s and their ratio move by several percent between "
        "runs)."
    )
