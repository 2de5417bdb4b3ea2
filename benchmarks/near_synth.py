"""Near out-of-knowledge with synthetic calibration (issue 16): does combined's gain hold?

On each COVID-QA halves split of :mod:`benchmarks.near` (``BENCH_NEAR_SYNTH_SEEDS``, default
"0", comma-separated), the local LLM writes ``BENCH_NEAR_SYNTH_N`` (default 100) in-knowledge
questions from the indexed half's articles (``ragbound synth``'s defaults: the sampled chunk
with its neighbours from the same article). Two statistics are calibrated on three question
sets each:

- MSS at chunk granularity (the default statistic, ``Guard.calibrate``);
- combined (``Guard.calibrate(..., statistic="combined")``, as ``ragbound calibrate
  --statistic combined`` does: half of the questions learn, the other half make the null);

on the real calibration half, on as many real questions as there are synthetic ones (a seeded
sample of that half: the cost of fewer questions apart from their being synthetic), and on the
synthetic questions. Each is checked as ``ragbound check`` does (``check_many``) on the held-out
real in-knowledge questions (false-positive rate at alpha = 0.05) and on the other half's
questions (near out-of-knowledge: share flagged at alpha = 0.05, AUROC).

The LLM runs once per split; its replies are cached (``~/.cache/ragbound/llm``), so a rerun or a
larger N reuses what was generated. It uses ``OMP_NUM_THREADS`` threads when set (the
machine is shared). ``python -m benchmarks.near_synth`` or ``python -m benchmarks.run
near-synth``; results go, after each split, to bench_out/near_synth.json (the questions to
bench_out/near_synth/) and the ``near-synth`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks import datasets
from benchmarks.doc import markdown_table, write_section
from benchmarks.near import (
    ALPHA,
    NEAR_SETS,
    CachedEmbedder,
    Split,
    cached_kb,
    covid_documents,
    covid_split,
    quality,
)
from ragbound.artifacts import write_json
from ragbound.detect import Guard
from ragbound.detect.config import AUTO, COMBINED
from ragbound.detect.shift import reference_scores
from ragbound.embedders import load_dense_embedder
from ragbound.errors import InputError
from ragbound.llm import LLM
from ragbound.stats import auroc, bonferroni_alpha, calibration_mismatch
from ragbound.synth.check import CHECK_LEVEL, compare_with_real
from ragbound.synth.queries import USERS_PROMPT, generate_queries, save_queries

OUT = datasets.REPO / "bench_out"
STATISTICS = ("mss", COMBINED)
REAL = "real calibration half"
REAL_SAMPLE = "real, as many as synthetic"
SYNTHETIC = "synthetic (local LLM)"
# the few-shot condition: the first of the calibration half's questions, as a user who has a
# few real questions passes them (``ragbound synth --examples``); 0 leaves it out
N_EXAMPLES = int(os.environ.get("BENCH_NEAR_SYNTH_EXAMPLES", "20"))
FEW_SHOT = f"synthetic, few-shot from {N_EXAMPLES} real questions"
# the real-question check's warning rate: draws of this many real questions the calibration
# did not see (``calibrate --real-queries``)
CHECK_SIZES = (20, 50)
CHECK_DRAWS = 200
# the null-queries condition (``calibrate --null-queries``): every question of a source
# learns, and real questions alone make the null
NULL_STATISTICS = (COMBINED, AUTO)


def calibrate(kb, queries: Sequence[str], statistic: str) -> Guard:
    """MSS at chunk granularity (``ragbound calibrate``'s default) or the combined score
    (which searches every indexed unit)."""
    granularity = None if statistic == COMBINED else "chunk"
    return Guard.calibrate(kb, queries, statistic=statistic, granularity=granularity)


def measure(
    kb,
    queries: Sequence[str],
    statistic: str,
    inside: Sequence[str],
    outside: Sequence[str],
    real: Sequence[str] = (),
) -> dict:
    """Calibrate on ``queries``; FPR on ``inside``, share of ``outside`` flagged, AUROC
    (verdicts as ``ragbound check`` gives them); with ``real`` (real questions the calibration
    did not see), the real-question check. A calibration refused (too few questions) gives the
    row its reason instead."""
    row: dict = {"statistic": statistic, "n": len(queries)}
    try:
        guard = calibrate(kb, queries, statistic)
    except InputError as exc:
        return row | {"error": str(exc)}
    checked_in = guard.check_many(inside, evidence=0)
    checked_out = guard.check_many(outside, evidence=0)
    if real:
        row |= {"check": real_check(guard, real)}
    return row | {
        "n_null": checked_in[0].n_calibration,  # combined: the conformal half only
        "critical_value": checked_in[0].critical_value,
        "fpr": float(np.mean([v.out_of_knowledge for v in checked_in])),
        "flagged": float(np.mean([v.out_of_knowledge for v in checked_out])),
        "auroc": auroc([v.score for v in checked_in], [v.score for v in checked_out]),
    }


def real_check(guard: Guard, real: Sequence[str], seed: int = 0) -> dict:
    """``calibrate --real-queries`` against the first ``N_EXAMPLES`` of ``real`` (the few-shot
    examples, as a user would pass them), and how often it warns over ``CHECK_DRAWS`` seeded
    draws of ``CHECK_SIZES`` of them (KS or the exceedance test, each at half the level)."""
    first = compare_with_real(guard, list(real[: max(N_EXAMPLES, 20)]))
    scores = guard.score(list(real)).scores
    reference = reference_scores(guard)
    rng = np.random.default_rng(seed)
    rates = {}
    for size in (size for size in CHECK_SIZES if size <= len(scores)):
        draws = [rng.choice(scores, size, replace=False) for _ in range(CHECK_DRAWS)]
        verdicts = [
            calibration_mismatch(reference, d, first.critical_value, CHECK_LEVEL) for d in draws
        ]
        rates[str(size)] = float(np.mean([v.differ for v in verdicts]))
    return {
        "n_first": first.n_real,
        "warns": first.differ,
        "ks_p": first.p_value,
        "exceedance_p": first.exceedance_p_value,
        "real_fpr": first.real_fpr,
        "pool_fpr": float(np.mean(scores >= first.critical_value)),
        "warn_rates": rates,
    }


def synthetic_questions(
    kb, llm: LLM, n: int, seed: int, folder: Path, examples: Sequence[str] = ()
) -> tuple[list[str], dict]:
    """``n`` questions from the split's knowledge base, saved under ``folder`` (few-shot from
    ``examples`` when given, as ``synth --examples``); and how long the generation took
    (cached replies read as ~0 s) with its report."""
    start = time.perf_counter()
    options: dict = {}
    if examples:
        options = {"examples": [{"question": q} for q in examples], "prompt_id": USERS_PROMPT}
    queries, report = generate_queries(kb, llm, n=n, seed=seed, progress=True, **options)
    seconds = time.perf_counter() - start
    suffix = f"-fewshot{len(examples)}" if examples else ""
    save_queries(folder / f"synthetic-seed{seed}-n{n}{suffix}.jsonl", queries)
    texts = [q.query for q in queries]
    return texts, {"seconds": seconds, "report": report.model_dump(), "examples": texts[:5]}


def split_part(
    split: Split, synthetic: list[str], seed: int, few_shot: list[str] | None = None
) -> list[dict]:
    """Every (calibration source x statistic) row of one split; the synthetic sources are
    and the sample of real ones are also checked against real questions they did not see
    (``calibrate --real-queries``)."""
    outside = split.outside[NEAR_SETS[0]]
    rng = np.random.default_rng(seed)
    n = min(len(synthetic), len(split.calibration))
    sample = [split.calibration[i] for i in sorted(rng.permutation(len(split.calibration))[:n])]
    sources = {REAL: split.calibration, REAL_SAMPLE: sample, SYNTHETIC: synthetic}
    if few_shot is not None:
        sources[FEW_SHOT] = few_shot
    unused = {  # real questions each calibration did not see, for the real-question check
        REAL_SAMPLE: [q for q in split.calibration if q not in set(sample)],
        SYNTHETIC: split.calibration,
        FEW_SHOT: split.calibration,
    }
    rows = []
    for source, queries in sources.items():
        for statistic in STATISTICS:
            real = unused.get(source, ())
            row = measure(split.kb, queries, statistic, split.inside, outside, real)
            rows.append({"source": source, **row})
    return rows


def null_rows(
    split: Split, synthetic: list[str], seed: int, few_shot: list[str] | None = None
) -> list[dict]:
    """combined and auto learned on every question of a source, the null made of real
    questions (``calibrate --null-queries``): of the first N_EXAMPLES of the real calibration
    half (the examples a user has), and of CHECK_DRAWS seeded draws of each CHECK_SIZES from
    the rest (none of which the learning saw). The learned score does not depend on the null,
    so it is scored once and each draw only changes the null. Sources: the synthetic sets,
    and a seeded sample of real questions as large (learning; its null draws leave it out)."""
    outside = split.outside[NEAR_SETS[0]]
    examples, rest = split.calibration[:N_EXAMPLES], split.calibration[N_EXAMPLES:]
    rng = np.random.default_rng(seed)
    sample = [rest[i] for i in sorted(rng.permutation(len(rest))[: len(synthetic)])]
    sources = {REAL_SAMPLE: (sample, [q for q in rest if q not in set(sample)])}
    sources[SYNTHETIC] = (synthetic, rest)
    if few_shot is not None:
        sources[FEW_SHOT] = (few_shot, rest)
    rows = []
    for source, (learning, pool) in sources.items():
        for statistic in NULL_STATISTICS:
            guard = Guard.calibrate(split.kb, learning, statistic=statistic, null_queries=examples)
            scores = {
                name: np.asarray(guard.score(list(queries)).scores)
                for name, queries in (("in", split.inside), ("out", outside), ("pool", pool))
            }
            rows.append(
                {
                    "source": source,
                    "statistic": statistic,
                    "n_learning": len(learning),
                    "picked": _picked(guard, statistic),
                    "auroc": auroc(scores["in"], scores["out"]),
                    "examples": quality(guard.score(examples).scores, scores["in"], scores["out"]),
                    "draws": _null_draws(scores, seed),
                }
            )
    return rows


def _picked(guard: Guard, statistic: str) -> str:
    selection = guard.calibration.manifest.selection
    return statistic if selection is None else selection.picked.label


def _null_draws(scores: dict[str, np.ndarray], seed: int) -> dict:
    """Per size, the mean and sd of FPR and flagged over CHECK_DRAWS nulls drawn from the pool."""
    rng = np.random.default_rng(seed)
    out = {}
    for size in (size for size in CHECK_SIZES if size <= len(scores["pool"])):
        found = [
            quality(rng.choice(scores["pool"], size, replace=False), scores["in"], scores["out"])
            for _ in range(CHECK_DRAWS)
        ]
        out[str(size)] = {
            f"{metric}_{stat.__name__}": float(stat([f[metric] for f in found]))
            for metric in ("fpr", "flagged")
            for stat in (np.mean, np.std)
        }
    return out


# ----------------------------------------------------------------------------- markdown
def _spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}"


def summary_table(splits: Sequence[dict]) -> tuple[list[str], list[list[str]]]:
    """One row per calibration source x statistic, over the splits (mean ± sd when several):
    n questions (in the null), held-out FPR, near OoK flagged and AUROC, and flagged / AUROC
    minus the same statistic's on the real calibration half of the same split."""
    header = [
        "calibration",
        "statistic",
        "n (null)",
        "held-out FPR",
        "near OoK flagged",
        "AUROC",
        "flagged vs real half",
        "AUROC vs real half",
        "real-question check: first 20 (warns?); warning rate over draws of "
        + " / ".join(str(size) for size in CHECK_SIZES),
    ]
    grouped: dict[tuple[str, str], list[tuple[dict, dict | None]]] = {}
    for split in splits:
        reference = {r["statistic"]: r for r in split["rows"] if r["source"] == REAL}
        for row in split["rows"]:
            key = (row["source"], row["statistic"])
            grouped.setdefault(key, []).append((row, reference.get(row["statistic"])))
    table = []
    for (source, statistic), pairs in grouped.items():
        rows = [row for row, _ in pairs]
        ns = sorted({f"{r['n']} ({r.get('n_null', '-')})" for r in rows})
        errors = [r["error"] for r in rows if "error" in r]
        if errors:
            table.append(
                [source, statistic, ", ".join(ns), f"refused: {errors[0]}", "", "", "", "", ""]
            )
            continue
        deltas = {
            metric: [r[metric] - ref[metric] for r, ref in pairs if ref and "error" not in ref]
            for metric in ("flagged", "auroc")
        }
        table.append(
            [
                source,
                statistic,
                ", ".join(ns),
                _spread([r["fpr"] for r in rows]),
                _spread([r["flagged"] for r in rows]),
                _spread([r["auroc"] for r in rows]),
                "" if source == REAL else _signed(deltas["flagged"]),
                "" if source == REAL else _signed(deltas["auroc"]),
                _check(rows),
            ]
        )
    return header, table


def _generated(generation: dict) -> str:
    report = generation["report"]
    return f"{report['kept']} kept of {report['requested']} calls in {generation['seconds']:.0f} s"


def _check(rows: list[dict]) -> str:
    """The real-question check over the splits: how many warned against the first 20 real
    questions, and the mean warning rate over draws of each size."""
    checked = [r["check"] for r in rows if "check" in r]
    if not checked:
        return ""
    warned = sum(bool(c["warns"]) for c in checked)
    rates = " / ".join(
        f"{np.mean([c['warn_rates'][str(size)] for c in checked]):.2f}"
        for size in CHECK_SIZES
        if all(str(size) in c["warn_rates"] for c in checked)
    )
    return f"{warned}/{len(checked)} warn; {rates}"


def _signed(values: list[float]) -> str:
    if not values:
        return ""
    mean = f"{np.mean(values):+.3f}"
    return mean if len(values) == 1 else f"{mean} ± {np.std(values):.3f}"


def markdown(results: dict) -> str:
    splits = results["splits"]
    header, rows = summary_table(splits)
    seeds = ("seeds " if len(splits) > 1 else "seed ") + ", ".join(str(s["seed"]) for s in splits)
    generation = ", ".join(
        f"seed {s['seed']}: {_generated(s['generation'])}"
        + (
            f"; few-shot {_generated(s['generation']['few_shot'])}"
            if "few_shot" in s["generation"]
            else ""
        )
        for s in splits
    )
    return "\n".join(
        [
            f"COVID-QA halves (the splits of the near benchmark, {seeds}), MiniLM, "
            f"alpha = {results['alpha']}. "
            f"Synthetic: {results['n']} questions per split written by the local LLM "
            f"(`ragbound synth` defaults) from the indexed half's articles. Each statistic "
            "calibrated on the real calibration half, on a seeded sample of it as large as the "
            "synthetic set, and on the synthetic questions; checked as `ragbound check` does on "
            "the held-out real in-knowledge questions (FPR) and the other half's questions "
            "(near out-of-knowledge: flagged at alpha, AUROC). mss: chunk granularity, the "
            "default; combined: `calibrate --statistic combined` (half of the questions learn, "
            "the other half, n in brackets, makes the null). Differences are against the same "
            "statistic calibrated on the real half of the same split. Few-shot: the same, "
            f"with the first {N_EXAMPLES} questions of the real calibration half as examples "
            "(`ragbound synth --examples`, the users prompt). The check column is "
            f"`calibrate --real-queries` (level {CHECK_LEVEL}: KS or the exceedance test, each "
            f"at {bonferroni_alpha(CHECK_LEVEL, 2):g}) against the first 20 real "
            "calibration-half questions (the "
            "few-shot examples), then its warning rate over "
            f"{CHECK_DRAWS} seeded draws of real questions the calibration did not see; on the "
            "sample of real questions it is the false-warning rate. Generation "
            f"(cached replies read as ~0 s): {generation}.",
            "",
            *markdown_table(header, rows),
            *_null_lines(splits),
        ]
    )


def _null_lines(splits: Sequence[dict]) -> list[str]:
    header, rows = null_table(splits)
    if not rows:
        return []
    return [
        "",
        "**Synthetic questions learn, real questions make the null** (`calibrate --statistic "
        "combined | auto --null-queries REAL`): every question of the source teaches the "
        "score (auto: ranks the candidates), and only real questions make the null, so the "
        "p-value is conformal on them. Null: the first "
        f"{N_EXAMPLES} real calibration-half questions (the few-shot examples, as a user has "
        f"them), or {CHECK_DRAWS} seeded draws of the other real calibration-half questions "
        "(mean and sd of FPR and flagged over the draws). The real sample learns from as many "
        "real questions as there are synthetic ones, and its draws leave those out. Values "
        "per split, in seed order (separated by ;).",
        "",
        *markdown_table(header, rows),
    ]


DRAWN = "{fpr_mean:.3f} ({fpr_std:.3f}) / {flagged_mean:.3f} ({flagged_std:.3f})"


def null_table(splits: Sequence[dict]) -> tuple[list[str], list[list[str]]]:
    """One row per learning source x statistic; each cell lists the splits' values."""
    header = [
        "learns from",
        "statistic (auto: picked)",
        "AUROC",
        f"null: the {N_EXAMPLES} examples, FPR / flagged",
        *(f"null: {size} drawn, FPR (sd) / flagged (sd)" for size in CHECK_SIZES),
    ]
    grouped: dict[tuple[str, str], list[dict]] = {}
    for split in splits:
        for row in split.get("null_rows", ()):
            grouped.setdefault((row["source"], row["statistic"]), []).append(row)
    table = []
    for (source, statistic), rows in grouped.items():
        picks = ", ".join(dict.fromkeys(r["picked"] for r in rows))
        cells = [
            " / ".join(f"{r['auroc']:.3f}" for r in rows),
            "; ".join("{fpr:.3f} / {flagged:.3f}".format(**r["examples"]) for r in rows),
        ]
        for size in CHECK_SIZES:
            cells.append(
                "; ".join(
                    DRAWN.format(**r["draws"][str(size)]) for r in rows if str(size) in r["draws"]
                )
            )
        label = statistic if statistic != AUTO else f"auto: {picks}"
        table.append([source, label, *cells])
    return header, table


# --------------------------------------------------------------------------------- main
def _seeds() -> list[int]:
    return [int(s) for s in os.environ.get("BENCH_NEAR_SYNTH_SEEDS", "0").split(",") if s.strip()]


def make_local_llm() -> LLM:
    """The bundled local model, its replies cached; OMP_NUM_THREADS threads when set."""
    from ragbound.llm import CachedLLM, ResponseCache, make_llm

    threads = int(os.environ.get("OMP_NUM_THREADS") or 0) or None
    return CachedLLM(make_llm("local", n_threads=threads), ResponseCache())


def main() -> dict:
    reason = datasets.missing_reason() or datasets.covidqa_missing_reason()
    if reason:
        print(f"skipping: {reason}")
        return {}
    n = int(os.environ.get("BENCH_NEAR_SYNTH_N", "100"))
    folder = OUT / "near_synth"
    # its own knowledge base and query cache: the near benchmark may run at the same time
    embedder = CachedEmbedder(load_dense_embedder("minilm"), folder / "query-cache")
    covid, _ = cached_kb(folder / "kb-covidqa", covid_documents, embedder, "minilm")
    llm = make_local_llm()
    splits, results = [], {}
    for seed in _seeds():
        split = covid_split(covid, seed)
        synthetic, generation = synthetic_questions(split.kb, llm, n, seed, folder)
        few_shot = None
        if N_EXAMPLES:
            examples = split.calibration[:N_EXAMPLES]
            few_shot, shot = synthetic_questions(split.kb, llm, n, seed, folder, examples)
            generation["few_shot"] = shot
        rows = split_part(split, synthetic, seed, few_shot)
        nulls = null_rows(split, synthetic, seed, few_shot)
        splits.append({"seed": seed, "generation": generation, "rows": rows, "null_rows": nulls})
        results = save({"alpha": ALPHA, "n": n, "splits": splits})  # after each split
    return results


def save(results: dict) -> dict:
    """The results so far to bench_out/near_synth.json and docs/benchmarks.md, and stdout."""
    write_json(OUT / "near_synth.json", results)
    text = markdown(results)
    write_section("near-synth", "Near out-of-knowledge with synthetic calibration", text)
    print(text, flush=True)
    return results


if __name__ == "__main__":
    main()
