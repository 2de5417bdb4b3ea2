"""Offline shift test on real data (paper 1, Figure 5) and the monitor's speed targets.

Rejection-rate experiment: a reference of 50 in-knowledge (PubMedQA) queries and a test batch
of 50 whose in-knowledge ratio runs from 0 to 1 (the rest from MMLU-Med or TruthfulQA), 500
trials per ratio; the KS test of the statistic rejects at alpha = 5%. At ratio 1 there is no
shift, so the rejection rate is the false-alarm rate and must stay <= alpha + 0.02.

Speed: the KS test on 10,000 vs 10,000 statistic values, and the monitor's statistics step
(windowing + one KS test per window) on a 1,000,000-line stream of scored queries.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from ragbound.artifacts import write_json
from ragbound.detect import Guard
from ragbound.detect.monitor import MonitorState, ShiftMonitor, WindowResult, WindowSpec
from ragbound.detect.retrieval import search_in_batches
from ragbound.progress import progress_bar
from ragbound.report.run import SHIFT_RATES
from ragbound.stats import ks_two_sample

RATIOS = tuple(round(0.1 * i, 1) for i in range(11))
SIZE = 50
TRIALS = 500
ALPHA = 0.05
STATISTICS = ("mss", "energy")  # ours by default, and the paper's Figure 5 statistic


def shift_rates(
    guard: Guard,
    in_knowledge: list[str],
    ook: dict[str, list[str]],
    trials: int = TRIALS,
    seed: int = 0,
) -> dict:
    """Shifted rate (the share of trials with p <= alpha) and p-value quartiles per statistic,
    OoK set and IK ratio."""
    k = guard.k
    sims_ik = search_in_batches(guard.kb, in_knowledge, k, progress=True).similarities
    sims_ook = {
        name: search_in_batches(guard.kb, q, k, progress=True).similarities
        for name, q in ook.items()
    }
    out: dict = {"trials": trials, "size": SIZE, "alpha": ALPHA, "ratios": list(RATIOS)}
    for statistic in STATISTICS:
        detector = guard.detector(statistic)
        ik = detector.score(sims_ik)
        out[statistic] = {
            name: _curve(ik, detector.score(sims), trials, seed, f"{statistic}, {name}")
            for name, sims in sims_ook.items()
        }
    return out


def write_shift_rates(run_dir: Path, experiment: dict) -> Path:
    """Save a shift-rate experiment in a run folder, where ``ragbound report`` plots it."""
    path = run_dir / SHIFT_RATES
    write_json(path, json.loads(json.dumps(experiment)))  # plain JSON types only
    return path


def _curve(ik: np.ndarray, ook: np.ndarray, trials: int, seed: int, label: str) -> dict:
    rng = np.random.default_rng(seed)
    rows = []
    with progress_bar(len(RATIOS) * trials, f"shift rates ({label})", True) as advance:
        for ratio in RATIOS:
            n_ik = round(SIZE * ratio)
            p_values = np.empty(trials)
            for trial in range(trials):
                picked = rng.choice(ik.size, size=SIZE + n_ik, replace=False)
                reference, test_ik = ik[picked[:SIZE]], ik[picked[SIZE:]]
                test_ook = ook[rng.choice(ook.size, size=SIZE - n_ik, replace=False)]
                test = np.concatenate([test_ik, test_ook])
                p_values[trial] = ks_two_sample(reference, test, alpha=ALPHA).p_value
            advance(trials)
            rows.append(
                {
                    "ratio": ratio,
                    "shifted_rate": float(np.mean(p_values <= ALPHA)),
                    "p_quartiles": [float(q) for q in np.quantile(p_values, [0.25, 0.5, 0.75])],
                }
            )
    return {"rows": rows}


def monitor_log(
    guard: Guard, in_knowledge: list[str], shifted: list[str], folder: Path, window: int = 50
) -> list[WindowResult]:
    """Monitor a log of 300 in-knowledge queries followed by 200 shifted ones (one a minute)."""
    folder.mkdir(parents=True, exist_ok=True)
    log, state = folder / "queries.jsonl", folder / "state.json"
    queries = in_knowledge[:300] + shifted[:200]
    with log.open("w", encoding="utf-8") as out:
        for i, query in enumerate(queries):
            out.write(json.dumps({"time": 1_780_000_000 + 60 * i, "query": query}) + "\n")
    state.unlink(missing_ok=True)
    monitor = ShiftMonitor(guard, WindowSpec(size=window))
    return list(monitor.follow(log, state, progress=True))


def ks_speed(n: int = 10_000, repeats: int = 20) -> dict:
    """Median ms of one KS test on n vs n values."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=n), rng.normal(0.05, 1.0, n)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        ks_two_sample(a, b)
        times.append((time.perf_counter() - start) * 1e3)
    return {"n": n, "median_ms": float(np.median(times))}


def monitor_speed(guard: Guard, n: int = 1_000_000, window: int = 50) -> dict:
    """Queries/s of the monitor's statistics step on ``n`` pre-scored queries."""
    monitor = ShiftMonitor(guard, WindowSpec(size=window), correction="none")
    rng = np.random.default_rng(0)
    scores = rng.choice(monitor.reference, size=n) + rng.normal(0.0, 0.01, n)
    lines = np.arange(1, n + 1)
    times = 1_700_000_000.0 + lines.astype(np.float64)
    state = MonitorState(log="bench", kb_fingerprint=guard.kb.fingerprint, settings={})
    start = time.perf_counter()
    windows = 0
    for begin in range(0, n, 10_000):  # the log reader hands over batches
        end = begin + 10_000
        windows += len(
            monitor.feed_scores(state, lines[begin:end], times[begin:end], scores[begin:end])
        )
    seconds = time.perf_counter() - start
    return {
        "n": n,
        "window": window,
        "windows": windows,
        "seconds": seconds,
        "queries_per_s": n / seconds,
    }
