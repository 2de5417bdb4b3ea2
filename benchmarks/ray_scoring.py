"""Scoring a query log on Ray: throughput of 1 and 2 actors against this process, same results.

The knowledge base is the PubMedQA corpus (MiniLM), calibrated on half its questions; the log
is every real question of the data folder (PubMedQA, MMLU-Med, TruthfulQA), repeated with a
number to reach ``BENCH_RAY_QUERIES`` (default 8,192). Each engine scores the whole log once
through ``ragbound.detect.logscore.score_file``; a Ray run's time includes starting its actors
(each loads the model), not starting Ray itself. Torch runs one thread per actor, and the local
row is run with one thread too so that the rows compare workers, not thread settings.

``python -m benchmarks.run ray`` runs only this part (needs ``ragbound[ray]``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from benchmarks import datasets
from benchmarks.doc import markdown_table
from ragbound.detect import Guard
from ragbound.detect.evaluate import split_queries
from ragbound.detect.logscore import ScoreTable, score_file
from ragbound.embedders import set_cpu_threads
from ragbound.engines import make_search
from ragbound.knowledge import KnowledgeBase

TARGET_SPEEDUP = 1.6


def write_log(path: Path, n: int) -> Path:
    pool = (
        datasets.pubmedqa_questions()
        + datasets.mmlu_med_questions()
        + datasets.truthfulqa_questions()
    )
    lines = [
        json.dumps({"time": i, "query": f"{pool[i % len(pool)]} ({i // len(pool)})"})
        for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def timed_score(guard: Guard, log: Path, engine: str, workers: int) -> tuple[ScoreTable, float]:
    search = make_search(guard, engine, workers=workers)  # type: ignore[arg-type]
    start = time.perf_counter()
    table = score_file(guard, log, search)
    return table, time.perf_counter() - start


def ray_part(out: Path) -> dict:
    import ray

    n = int(os.environ.get("BENCH_RAY_QUERIES", "8192"))
    kb_dir = out / "kb-minilm"
    if not (kb_dir / "manifest.json").exists():
        corpus = datasets.write_pubmedqa_corpus(out / "pubmedqa_corpus.jsonl")
        KnowledgeBase.build([corpus], embedder="minilm", id_field=datasets.CORPUS_IDS).save(
            kb_dir, overwrite=True
        )
    calibration, _ = split_queries(datasets.pubmedqa_questions(), 0.5, seed=0)
    guard = Guard.calibrate(KnowledgeBase.load(kb_dir), calibration, k=32)
    log = write_log(out / "ray-log.jsonl", n)
    set_cpu_threads(1)
    rows = []
    local, local_s = timed_score(guard, log, "local", 1)
    rows.append(_row("local (this process)", 1, local_s, n, local, local))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for workers in (1, 2):
            table, seconds = timed_score(guard, log, "ray", workers)
            rows.append(_row("ray", workers, seconds, n, table, local))
    finally:
        ray.shutdown()
    speedup = rows[2]["queries_per_s"] / rows[1]["queries_per_s"]
    return {
        "n_queries": n,
        "n_chunks": len(guard.kb),
        "rows": rows,
        "speedup_2_vs_1": speedup,
        "load_average": os.getloadavg()[1],  # other work on the machine caps the speed-up
    }


def _row(engine: str, workers: int, seconds: float, n: int, table, reference) -> dict:
    return {
        "engine": engine,
        "workers": workers,
        "seconds": seconds,
        "queries_per_s": n / seconds,
        "max_abs_score_diff": float(np.abs(table.score - reference.score).max()),
        "p_values_equal": bool(np.array_equal(table.p_value, reference.p_value)),
    }


def ray_markdown(results: dict) -> list[str]:
    """The table as Markdown lines (empty when the part has not run)."""
    part = results.get("ray")
    if not part:
        return []
    header = ["engine", "workers", "time (s)", "queries/s", "max abs score diff vs local", "same p"]
    rows = [
        [
            row["engine"],
            str(row["workers"]),
            f"{row['seconds']:.1f}",
            f"{row['queries_per_s']:.1f}",
            f"{row['max_abs_score_diff']:.1e}",
            "yes" if row["p_values_equal"] else "NO",
        ]
        for row in part["rows"]
    ]
    verdict = "met" if part["speedup_2_vs_1"] >= TARGET_SPEEDUP else "NOT met"
    lines = [
        f"`ragbound test-log` on a log of {part['n_queries']:,} real questions against the "
        f"PubMedQA knowledge base ({part['n_chunks']:,} MiniLM chunks), one torch thread per "
        "worker. "
        "A Ray row's time includes starting its actors (each loads the model).",
        "",
        *markdown_table(header, rows),
        "",
        f"Two Ray workers against one: **{part['speedup_2_vs_1']:.2f}x** "
        f"(target >= {TARGET_SPEEDUP}x: {verdict}). Load average (5 min) at the end of the "
        f"run: {part.get('load_average', float('nan')):.1f} on {os.cpu_count()} cores; two "
        "workers can only be faster than one when a second core is free.",
    ]
    return lines
