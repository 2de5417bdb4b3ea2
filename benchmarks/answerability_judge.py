"""The answerability test's LLM judge against relevance alone, on a subset of the
leave-one-out splits of :mod:`benchmarks.answerability` (the bundled local LLM; slow).

Per corpus (``BENCH_ANSWER_JUDGE_CORPORA``, default CLAP NQ and COVID-QA: the one with the
unanswerable questions and the one where the LLM-free statistics fail), the split of seed 0,
and seeded samples of ``BENCH_ANSWER_JUDGE_N`` questions (default 40) of its in-knowledge
test, left-out and (CLAP NQ) unanswerable sets; the judge calibrates on
``BENCH_ANSWER_JUDGE_CALIBRATION`` of its calibration questions (default 60). Rows:
relevance alone (``Guard.calibrate(kb, questions)``) and relevance + judge
(``answerability="judge", llm="local"``: the bundled Qwen2.5-Coder 1.5B, the 3 nearest chunks,
the probability of NO), both decided by ``Gate.decide_many``; the judge runs only on the
questions relevance lets through, as in the gate. Columns: the share flagged of each set
(left-out, unanswerable, held-out in-knowledge: the false "I don't know"), the level each
test runs at, and the judge's seconds per call (calibration calls / their number).

Replies are cached on disk (``~/.cache/ragbound/llm``), so a rerun costs what changed. Raw
numbers go to bench_out/answerability_judge.json, the tables to the ``answerability-judge``
section of docs/benchmarks.md (``answerability-judge render``: the section again).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import numpy as np

from benchmarks import answerability, near
from benchmarks.doc import markdown_table, measured_or_saved, write_section
from benchmarks.settings import int_value
from ragbound.artifacts import write_json
from ragbound.detect import Guard
from ragbound.embedders import load_dense_embedder
from ragbound.gate import Gate
from ragbound.stats import auroc

RAW = answerability.OUT / "answerability_judge.json"
TITLE = "Answerability: the LLM judge (bundled local model, a subset)"
DEFAULT_CORPORA = (answerability.CLAP, answerability.COVID)
RELEVANCE = "relevance alone (default, mss)"
WITH_JUDGE = "relevance + judge (local 1.5B)"
SEED = 0
SETS = ("inside", "left_out", "unanswerable")


def corpora() -> list[str]:
    raw = os.environ.get("BENCH_ANSWER_JUDGE_CORPORA", ",".join(DEFAULT_CORPORA))
    chosen = [c.strip() for c in raw.split(",") if c.strip()]
    if not chosen or any(c not in answerability.CORPORA for c in chosen):
        raise SystemExit(
            f"BENCH_ANSWER_JUDGE_CORPORA={raw!r}: choose among {', '.join(answerability.CORPORA)}"
        )
    return chosen


def sample(questions: Sequence[str], n: int, seed: int) -> list[str]:
    """A seeded sample of ``n`` questions (all of them when fewer), in their order."""
    order = np.random.default_rng(seed).permutation(len(questions))[:n]
    return [questions[i] for i in sorted(order)]


def flagged(gate: Gate, questions: Sequence[str]) -> tuple[float, list[float]]:
    """The share of ``questions`` the gate abstains on, and the answerability scores of
    those it ran that test on (the ones relevance let through)."""
    decisions = gate.decide_many(questions)
    abstained = float(np.mean([d.action == "abstain" for d in decisions]))
    return abstained, [d.answerability.score for d in decisions if d.answerability is not None]


def corpus_rows(corpus: str, embedder: near.CachedEmbedder, n: int, n_cal: int) -> dict:
    """Both rows on one corpus's subset, with the sizes and the judge's cost."""
    kb, _ = answerability.knowledge_base(corpus, embedder)
    split = answerability.SPLITS[corpus](kb, SEED)
    calibration = sample(split.calibration, n_cal, SEED)
    sets = {name: sample(qs, n, SEED + 1) for name, qs in split.sets().items()}
    alone = Gate(Guard.calibrate(split.kb, calibration))
    start = time.perf_counter()
    guard = Guard.calibrate(
        split.kb, calibration, answerability="judge", llm="local", progress=True
    )
    calibration_s = time.perf_counter() - start
    both = Gate(guard)
    rows: dict = {RELEVANCE: {"level": alone.guard.answerability_level()}, WITH_JUDGE: {}}
    rows[WITH_JUDGE]["level"] = guard.answerability_level()
    judged: dict[str, list[float]] = {}
    for name, questions in sets.items():
        rows[RELEVANCE][name], _ = flagged(alone, questions)
        rows[WITH_JUDGE][name], judged[name] = flagged(both, questions)
        print(f"{corpus} {name}: {rows[WITH_JUDGE][name]:.3f}", flush=True)
    for name in ("left_out", "unanswerable"):
        if judged.get(name) and judged["inside"]:
            rows[WITH_JUDGE][f"auroc_{name}"] = auroc(judged["inside"], judged[name])
    judge = guard.answers.judge
    assert judge is not None
    rows[WITH_JUDGE]["seconds_per_call"] = float(np.median(judge.call_seconds))
    sizes = {"calibration": len(calibration), **{k: len(v) for k, v in sets.items()}}
    sizes |= {f"judged {k}": len(v) for k, v in judged.items()}
    return {"rows": rows, "sizes": sizes, "calibration_s": calibration_s}


def judge_part() -> dict:
    n = int_value("BENCH_ANSWER_JUDGE_N", "40", 1, "40")
    n_cal = int_value("BENCH_ANSWER_JUDGE_CALIBRATION", "60", 20, "60")
    results: dict = {"n": n, "n_calibration": n_cal, "seed": SEED, "corpora": {}, "skipped": {}}
    embedder = near.CachedEmbedder(
        load_dense_embedder(answerability.SPEC), answerability.CACHE / "query-cache"
    )
    began = time.perf_counter()
    for corpus in corpora():
        reason = answerability.missing_reason(corpus)
        if reason:
            results["skipped"][corpus] = reason
            continue
        results["corpora"][corpus] = corpus_rows(corpus, embedder, n, n_cal)
        results["total_s"] = time.perf_counter() - began
        write_json(RAW, results)
    return results


COLUMNS = (
    ("left_out", "left-out flagged"),
    ("unanswerable", "CLAP NQ unanswerable flagged"),
    ("inside", "held-out FPR (false 'I don't know')"),
    ("level", "level each test runs at"),
    ("auroc_left_out", "judge AUROC in vs left out (judged)"),
    ("auroc_unanswerable", "judge AUROC in vs unanswerable (judged)"),
    ("seconds_per_call", "judge s / call (p50)"),
)


def _cell(value: float | None, digits: int = 3) -> str:
    return "" if value is None or np.isnan(value) else f"{value:.{digits}f}"


def judge_markdown(results: dict) -> list[str]:
    """The section's lines (empty when nothing ran)."""
    if not results.get("corpora"):
        return []
    header = ["corpus", "choice", *(label for _, label in COLUMNS)]
    rows = [
        [corpus, choice, *(_cell(found["rows"][choice].get(key)) for key, _ in COLUMNS)]
        for corpus, found in results["corpora"].items()
        for choice in (RELEVANCE, WITH_JUDGE)
    ]
    size_keys = ("calibration", *SETS, *(f"judged {k}" for k in SETS))
    sizes = [
        [corpus, *(str(found["sizes"].get(k, 0)) for k in size_keys)]
        for corpus, found in results["corpora"].items()
    ]
    skipped = [f"- {c}: skipped, {why}" for c, why in results.get("skipped", {}).items()]
    return [
        f"The split of seed {results['seed']} of `make bench-answerability`; seeded samples of "
        f"{results['n']} questions per set and {results['n_calibration']} calibration "
        "questions (the judge's null: p-values move in steps of 1/(n+1)); the bundled "
        "Qwen2.5-Coder 1.5B (Q4_K_M, llama.cpp, 2 threads) reads the question and the 3 "
        "nearest chunks, its score the probability of NO among YES and NO in the first "
        "token's distribution; both rows decided by `Gate.decide_many` at alpha = 0.05 "
        "(relevance + judge: both tests at their shared level); the judge's seconds are the "
        "model's time per call, a cached reply keeping its first call's. One seed: read the shares "
        f"with their sampling error (about ±{1.96 * np.sqrt(0.25 / results['n']):.2f} at "
        "0.5 for this n). The whole run took "
        f"{results.get('total_s', 0.0) / 60:.1f} min.",
        "",
        *markdown_table(header, rows),
        "",
        "Sizes; judged: the questions relevance let through, on which the judge ran (its AUROC "
        "reads those: how well it separates where it decides).",
        "",
        *markdown_table(["corpus", *size_keys], sizes),
        *(["", *skipped] if skipped else []),
    ]


def main(argv: Sequence[str] = ()) -> dict:
    """Run the judge's subset, save its raw numbers and write its section; ``render``: the
    section again from the saved raw numbers."""
    results = measured_or_saved(argv, RAW, judge_part, "answerability_judge")
    lines = judge_markdown(results)
    if lines:
        written = write_section("answerability-judge", TITLE, "\n".join(lines))
        print(f"raw numbers: {RAW}; tables written to {written}")
    print("\n".join(lines) if lines else "nothing ran")
    return results
