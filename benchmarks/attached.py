"""Another application's Chroma collection, embedded by an OpenAI-compatible endpoint.

``python -m benchmarks.run attached`` (issue 28's three targets for an attached store):

1. The PubMedQA corpus's chunks (the same chunks as ragbound's own knowledge base of the
   quality part) go into a Chroma collection on a real ``chroma run`` server on loopback,
   with vectors computed by ``--embedder openai:minilm`` against infinity-emb serving the
   bundled MiniLM on loopback, added the way an application adds them
   (``collection.add(ids, embeddings, documents, metadatas)``, cosine space). ragbound
   attaches the collection (``KnowledgeBase.attach``) and calibrates the default statistic
   (mss, k = 32) on the quality part's 500 calibration questions; the row beside it is
   ragbound's own exact knowledge base with the local MiniLM on the same chunks, calibrated
   on the same questions. Each row gives the false-positive rate at alpha = 0.05 on the 500
   held-out PubMedQA questions (and its mean over random halves, as the approx part does),
   AUROC against MMLU-Med and TruthfulQA (paper protocol: 10 runs x 300 per side, seed 0),
   and the ``check`` p50 next to embedding the query alone. Target: AUROC and FPR within
   0.005 of the exact knowledge base.
2. The same collection through langchain-chroma's ``Chroma`` vector store (the embedder
   wrapped as LangChain ``Embeddings`` by ``RagboundEmbeddings``): the bare
   ``store.as_retriever()`` against ``GatedVectorStoreRetriever`` over
   ``VectorStoreKnowledge(store, closeness="relevance")`` (langchain-chroma has no search by
   vector with scores, so the store embeds the query itself in both), interleaved
   (``timing.paired_latency``). Target: guarded p50 at most 1.05 x the bare one's. Skipped,
   with the reason, without langchain-chroma.

3. Tripwires in the collection reject the same queries as ragbound's own tripwire files:
   benchmarks/attached_tripwires.py, on the same collection (``attached-tripwires`` runs it
   alone, on a collection set up again); its own docs section. The collection's set-up, which
   both use, is benchmarks/attached_collection.py.

Needs chromadb (``ragbound[chroma]``, its ``chroma`` executable beside this Python) and
infinity-emb (``make infinity``, or ``$RAGBOUND_INFINITY`` naming its ``infinity_emb``);
without either the part is skipped with the reason. Run with OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np

from benchmarks.attached_collection import (
    COLLECTION,
    SPEC,
    attached_collection,
    local_kb,
)
from benchmarks.attached_tripwires import tripwire_part
from benchmarks.doc import markdown_table
from benchmarks.timing import latency, paired_latency, timed
from ragbound.detect import Guard
from ragbound.detect.evaluate import ScoredSets, evaluate
from ragbound.knowledge import KnowledgeBase

TITLE = "An attached Chroma collection embedded by an endpoint (infinity-emb)"
K = 32
ALPHA = 0.05
STATISTIC = "mss"
TARGET = 0.005
SPLITS = 20  # random halves of the in-knowledge questions for the mean FPR
# the LangChain retriever: the guard's k, documents returned, passes over the questions, and
# the target for its p50 against the bare retriever's
LANGCHAIN_K = 4
CONTEXT_K = 4
REPEATS = 3
TARGET_RATIO = 1.05
LATENCY_IK, LATENCY_OOK = 80, 40  # questions per LangChain latency pass (x REPEATS)


def attached_part(
    corpus: Path, calibration: list[str], ik_test: list[str], ook: dict[str, list[str]]
) -> dict:
    """Both rows of the quality table; with langchain-chroma, the retriever latency; and the
    tripwires in the collection against ragbound's own (``part["tripwires"]``)."""
    local, build_s = local_kb(corpus)
    part: dict = {
        "n_chunks": len(local.chunks),
        "k": K,
        "alpha": ALPHA,
        "statistic": STATISTIC,
        "ook": list(ook),
        "n_calibration": len(calibration),
        "n_ik_test": len(ik_test),
        "omp_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "local_build_s": build_s,
    }
    exact = quality_row("ragbound exact, local minilm", local, calibration, ik_test, ook)
    with attached_collection(local) as (server, embedder, kb, filled):
        part.update(filled)
        part["search"] = kb.describe().model_dump()
        label = "Chroma collection, attached (endpoint vectors)"
        part["rows"] = [exact, quality_row(label, kb, calibration, ik_test, ook)]
        if importlib.util.find_spec("langchain_chroma") is None:
            part["langchain"] = {"skipped": "langchain-chroma is not installed"}
        else:
            queries = ik_test[:LATENCY_IK] + ook["MMLU-Med"][:LATENCY_OOK]
            part["langchain"] = langchain_latency(server, embedder, calibration, queries)
        part["tripwires"] = tripwire_part(local, kb, server, COLLECTION)
    part["differences"] = differences(part)
    return part


def quality_row(
    label: str,
    kb: KnowledgeBase,
    calibration: list[str],
    ik_test: list[str],
    ook: dict[str, list[str]],
) -> dict:
    """Calibrate on ``calibration`` (k = K, the default statistic) and measure: FPR at ALPHA
    on ``ik_test`` and over random halves, AUROC per OoK set, check p50 vs embedding alone.
    Each query set is searched once."""
    guard, calibrate_s = timed(lambda: Guard.calibrate(kb, calibration, k=K))
    found = {name: guard.search_rows(texts) for name, texts in {"ik": ik_test, **ook}.items()}
    detector = guard.detector(STATISTIC, ALPHA)
    _, p_in = detector.score_p_value(found["ik"])
    row = {
        "search": label,
        "embedder": kb.manifest.embedder_spec,
        "calibrate_s": calibrate_s,
        "fpr": float(np.mean(np.asarray(p_in) <= ALPHA)),
    }
    pool = np.concatenate([guard.search_rows(calibration), found["ik"]])
    row["fpr_splits"] = split_fpr(guard, STATISTIC, pool, pool)
    scores_in = detector.score(found["ik"])
    for name, texts in ook.items():
        scored = ScoredSets(scores_in, detector.score(found[name]), detector.critical_value_)
        report = evaluate(guard, ik_test, texts, statistics=[STATISTIC], scored={STATISTIC: scored})
        row[f"auroc_{name}"] = report.statistics[STATISTIC].auroc
    lat = latency(guard, ik_test[:50] + ook["TruthfulQA"][:50])
    row["check_p50_ms"], row["embed_p50_ms"] = lat["check_p50_ms"], lat["embed_p50_ms"]
    return row


def split_fpr(guard: Guard, statistic: str, null_pool: np.ndarray, test_pool: np.ndarray) -> float:
    """Mean FPR at alpha over ``SPLITS`` random halves of the in-knowledge questions: the
    calibration half as ``null_pool`` searched, the other half as ``test_pool`` (one split
    alone varies by about 1.4 points at alpha 0.05 with 500 + 500 questions)."""
    from ragbound.detect.boundary import BoundaryDetector

    config = guard.config.updated(statistic=statistic, alpha=ALPHA)
    rng = np.random.default_rng(0)
    rates = []
    for _ in range(SPLITS):
        order = rng.permutation(len(null_pool))
        calibration, test = order[: len(order) // 2], order[len(order) // 2 :]
        detector = BoundaryDetector.from_config(config).fit(null_pool[calibration])
        _, p_values = detector.score_p_value(test_pool[test])
        rates.append(float(np.mean(np.asarray(p_values) <= ALPHA)))
    return float(np.mean(rates))


def differences(part: dict) -> dict:
    """Attached minus exact, per measure, and whether each is within TARGET."""
    exact, attached = part["rows"]
    keys = ["fpr", "fpr_splits", *(f"auroc_{name}" for name in part["ook"])]
    diffs = {key: attached[key] - exact[key] for key in keys}
    judged = ["fpr", *(f"auroc_{name}" for name in part["ook"])]
    return {**diffs, "target_met": all(abs(diffs[key]) <= TARGET for key in judged)}


def langchain_latency(server, embedder, calibration: list[str], queries: list[str]) -> dict:
    """p50 / p99 of the bare and the guarded LangChain retriever over the collection."""
    from langchain_chroma import Chroma

    from ragbound.adapters.langchain_store import (
        GatedVectorStoreRetriever,
        RagboundEmbeddings,
        VectorStoreKnowledge,
    )

    client = server.client()
    store = Chroma(
        collection_name=COLLECTION,
        embedding_function=RagboundEmbeddings(embedder),
        client=client,
        create_collection_if_not_exists=False,
    )
    size = client.get_collection(COLLECTION).count()
    knowledge = VectorStoreKnowledge(store, name=SPEC, closeness="relevance", size=size)
    guard = Guard.calibrate(knowledge, calibration, k=LANGCHAIN_K, alpha=ALPHA)
    bare = store.as_retriever(search_kwargs={"k": CONTEXT_K})
    guarded = GatedVectorStoreRetriever(guard=guard, k=CONTEXT_K)
    return {
        "n_calibration": guard.calibration.manifest.n_queries,
        "k": LANGCHAIN_K,
        "context_k": CONTEXT_K,
        **paired_latency(bare.invoke, guarded.invoke, queries * REPEATS),
        "load_average": os.getloadavg()[0],
    }


LATENCY_HEADER = ["retriever", "p50 ms", "p99 ms", "p50 ratio to bare"]
QUALITY_HEADER = [
    "search",
    "embedder",
    "FPR at alpha 0.05 (held-out)",
    "FPR, random halves",
    "AUROC MMLU-Med",
    "AUROC TruthfulQA",
    "check p50 ms (embed alone)",
]


def attached_markdown(results: dict) -> list[str]:
    """The section's Markdown lines from the saved results (none when not run)."""
    part = results.get("attached")
    if not part or "rows" not in part:
        return []
    header, rows = quality_table(part)
    diffs = part["differences"]
    met = "met" if diffs["target_met"] else "NOT met"
    intro = (
        f"The PubMedQA corpus ({part['n_chunks']} chunks, those of the quality part) in a "
        "Chroma collection on a `chroma run` server on loopback (cosine space, Chroma's HNSW "
        f"search), its vectors computed by `--embedder {SPEC}` against infinity-emb serving "
        f"the bundled MiniLM on loopback ({part['endpoint_chunks_per_s']:.1f} chunks/s over HTTP, "
        f"{part['endpoint_embed_s']:.0f} s; the lowest cosine between a chunk's endpoint "
        f"vector and its local one: {part['endpoint_vs_local_min_cosine']:.6f}), added with "
        "`collection.add(ids, embeddings, documents, metadatas)` and attached with "
        "`KnowledgeBase.attach`. Against ragbound's own exact knowledge base with the local "
        f"MiniLM on the same chunks. Both calibrated on the same {part['n_calibration']} "
        f"PubMedQA questions ({part['statistic']}, k = {part['k']}); FPR at alpha = "
        f"{part['alpha']} on the {part['n_ik_test']} held-out PubMedQA questions, and its "
        f"mean over {SPLITS_NOTE}; AUROC 10 runs x 300 per side; check p50 on 100 queries next "
        f"to embedding the query alone, interleaved; OMP_NUM_THREADS={part['omp_threads']}. "
        f"Target: AUROC and held-out FPR within {TARGET} of the exact knowledge base: "
        f"**{met}**."
    )
    lines = ["", intro, "", *markdown_table(header, rows), ""]
    return lines + _langchain_lines(part.get("langchain") or {})


def quality_table(part: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows: exact, attached, and their differences."""
    rows = [_quality_cells(row, part["ook"]) for row in part["rows"]]
    diffs = part["differences"]
    rows.append(
        [
            "attached - exact",
            "",
            f"{diffs['fpr']:+.4f}",
            f"{diffs['fpr_splits']:+.4f}",
            *(f"{diffs[f'auroc_{name}']:+.4f}" for name in part["ook"]),
            "",
        ]
    )
    return QUALITY_HEADER, rows


def langchain_table(part: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the LangChain latency table (no rows when it was skipped)."""
    lc = part.get("langchain") or {}
    if "ratio_p50" not in lc:
        return LATENCY_HEADER, []
    bare, guarded = "bare `Chroma.as_retriever()`", "`GatedVectorStoreRetriever`"
    return LATENCY_HEADER, [
        [bare, f"{lc['bare_p50_ms']:.2f}", f"{lc['bare_p99_ms']:.2f}", ""],
        [
            guarded,
            f"{lc['guarded_p50_ms']:.2f}",
            f"{lc['guarded_p99_ms']:.2f}",
            f"{lc['ratio_p50']:.3f} (target <= {TARGET_RATIO})",
        ],
    ]


SPLITS_NOTE = (
    "20 random halves of all PubMedQA questions (calibrated and tested on the same search)"
)


def _quality_cells(row: dict, ook: list[str]) -> list[str]:
    return [
        row["search"],
        f"`{row['embedder']}`",
        f"{row['fpr']:.4f}",
        f"{row['fpr_splits']:.4f}",
        *(f"{row[f'auroc_{name}']:.4f}" for name in ook),
        f"{row['check_p50_ms']:.1f} ({row['embed_p50_ms']:.1f})",
    ]


def _langchain_lines(lc: dict) -> list[str]:
    if "skipped" in lc:
        return [f"Gated LangChain retriever over the collection: skipped ({lc['skipped']}).", ""]
    if not lc:
        return []
    met = "met" if lc["ratio_p50"] <= TARGET_RATIO else "NOT met"
    intro = (
        "**Gated LangChain retriever over the same collection**: langchain-chroma's `Chroma` "
        f"vector store (embeddings: `RagboundEmbeddings` over `{SPEC}`), {lc['n']} retrievals "
        "each (held-out PubMedQA and MMLU-Med questions, interleaved), "
        f"{lc['context_k']} documents returned. The guard (mss, k = {lc['k']}, "
        f"{lc['n_calibration']} calibration questions) reads the store's relevance scores "
        '(`closeness="relevance"`: langchain-chroma has no search by vector with scores, so the '
        "store embeds the query, once, in both), one search per query. Median per-query extra "
        f"time of the guard: {lc['extra_p50_ms']:.2f} ms. Target: p50 ratio at most "
        f"{TARGET_RATIO}: **{met}**." + _load_note(lc.get("load_average"))
    )
    header, rows = langchain_table({"langchain": lc})
    return [intro, "", *markdown_table(header, rows), ""]


def _load_note(load: float | None) -> str:
    if load is None:
        return ""
    return (
        f" The machine's 1-minute load average was {load:.1f} at the end of the run (other "
        "jobs share its cores, so the p50s and their ratio move by several percent between "
        "runs)."
    )
