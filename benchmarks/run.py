"""``make bench``: the paper's online test on real data, plus speed and memory targets.

Prints, for minilm and bm25 on the PubMedQA corpus: the 7 statistics x {MMLU-Med (near),
TruthfulQA (far)} table of AUROC, AUPRC, TPR@5%FPR and DER (10 runs x 300 per side);
index build throughput against raw ``encode`` on the same chunks; ``check`` latency p50/p99
against embedding the query alone, measured interleaved in one run; and peak memory while
indexing many chunks (in a child process). Results also go to bench_out/results.json.

With the local LLM installed (``ragbound[local]``), also: synthetic vs real calibration step
by step (paper Table 4), the outlier-detector and LLM-judge baselines (Tables 2-3) and the
local generation speed (see benchmarks/synthetic.py, baselines.py, llm_speed.py).

``python -m benchmarks.run PART [ARGS]`` runs one part (``PARTS`` below) and merges it into the
saved results; ``python -m benchmarks.run --list`` lists the parts, each with what it needs
first: nothing, the shared data folder, or the PubMedQA set-up (corpus, question halves, far
sets); without it the part is skipped with the reason. ``serve`` is ``make bench-serve``,
``zoo`` ``make bench-zoo``, ``conversations`` ``make bench-conversations``, ``answerability``
``make bench-answerability`` (``answerability-judge`` its LLM judge's subset), ``install``
``make bench-install``, ``default-path`` ``make bench-default-path``; those take their own
arguments
(``render``: the section again from their raw file in bench_out/).
Environment: RAGBOUND_DATA (data folder), BENCH_MEMORY_CHUNKS (default 100000; 0 skips),
BENCH_MILLION_CHUNKS (default 1000000; 0 keeps only the float16 quality table),
BENCH_SYNTH (default 1; 0 skips the LLM parts), BENCH_SYNTH_STEPS (default all: "1,2,3,4,5");
BENCH_SERVE_REQUESTS, BENCH_SERVE_PER_LEVEL (serve); BENCH_ZOO_SEEDS, BENCH_ZOO_CORPORA,
BENCH_ZOO_SYNTH, BENCH_ZOO_SYNTH_N (zoo); BENCH_CONV_SEEDS, BENCH_CONV_REWRITE_N,
BENCH_CONV_LATENCY_N (conversations); BENCH_ANSWER_SEEDS, BENCH_ANSWER_CORPORA,
BENCH_ANSWER_LATENCY_N (answerability); BENCH_ANSWER_JUDGE_N, BENCH_ANSWER_JUDGE_CALIBRATION,
BENCH_ANSWER_JUDGE_CORPORA (answerability-judge: the bundled LLM, slow); BENCH_CASCADE_N (the
tripwires' LLM cascade subset, default 30 per side); BENCH_NEAR_SEEDS (near, 5);
BENCH_LEXICAL_CHUNKS (lexical-scale, default "100000,1000000").
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.table import Table

from benchmarks import (
    attached,
    attached_collection,
    attached_tripwires,
    baselines,
    beta_binomial,
    datasets,
    lexical_scale,
    llm_speed,
    million,
    monitor_schemes,
    near,
    pvalue_validity,
    ray_scoring,
    shift,
    synthetic,
    tripwires,
)
from benchmarks.doc import machine_description, markdown_table, write_section
from benchmarks.energy_tau import energy_tau_markdown, energy_tau_part
from benchmarks.timing import latency, timed
from benchmarks.tripwire_default import tripwire_default_markdown, tripwire_default_part
from ragbound.detect import Guard
from ragbound.detect.evaluate import evaluate, split_queries, statistic_scores
from ragbound.knowledge import KnowledgeBase

OUT = datasets.REPO / "bench_out"
console = Console(width=200)  # wide tables stay readable when piped to a file


@dataclass(frozen=True)
class PubMedQA:
    """What most parts start from: the PubMedQA corpus file, its questions in halves
    (calibration, held-out in knowledge, seed 0) and the far out-of-knowledge sets."""

    corpus: Path
    calibration: list[str]
    ik_test: list[str]
    ook: dict[str, list[str]]


@functools.cache
def pubmedqa() -> PubMedQA:
    """The set-up, prepared once (the corpus written to bench_out/pubmedqa_corpus.jsonl)."""
    corpus = datasets.write_pubmedqa_corpus(OUT / "pubmedqa_corpus.jsonl")
    calibration, ik_test = split_queries(datasets.pubmedqa_questions(), 0.5, seed=0)
    ook = {"MMLU-Med": datasets.mmlu_med_questions(), "TruthfulQA": datasets.truthfulqa_questions()}
    return PubMedQA(corpus, calibration, ik_test, ook)


def minilm_kb(keep: bool = False) -> KnowledgeBase:
    """The PubMedQA corpus indexed with minilm (``keep``: saved as bench_out/kb-minilm)."""
    kb = KnowledgeBase.build([pubmedqa().corpus], embedder="minilm", id_field=datasets.CORPUS_IDS)
    if keep:
        kb.save(OUT / "kb-minilm", overwrite=True)
    return kb


@dataclass(frozen=True)
class Part:
    """One ``python -m benchmarks.run NAME [ARGS]``: its line in ``--list``, ``run(args)``, and
    what it needs first (``data``: the shared data folder; ``pubmedqa``: that and the PubMedQA
    set-up), skipped with the reason without it; ``args``: it takes arguments of its own."""

    about: str
    run: Callable[[list[str]], None]
    needs: Literal["nothing", "data", "pubmedqa"] = "pubmedqa"
    args: bool = False


def stored(key: str, compute: Callable[[], object], *sections: str) -> Callable[[list[str]], None]:
    """A part's run: ``compute()`` into the saved results at ``key``, then the docs sections
    ``sections`` written from them (by default the one named ``key``, "-" for "_")."""

    def run(_: list[str]) -> None:
        results = saved_results()
        results[key] = compute()
        save(results, sections or [key.replace("_", "-")])

    return run


def main_of(module: str, *fixed: str) -> Callable[[list[str]], None]:
    """A part's run: ``benchmarks.MODULE.main``, imported only then, given ``fixed`` arguments
    when there are some, else the part's own (none: called without)."""

    def run(args: list[str]) -> None:
        entry = importlib.import_module(f"benchmarks.{module}").main
        given = list(fixed) or args
        if given:
            entry(given)
        else:
            entry()

    return run


def _attached(_: list[str]) -> None:
    data = pubmedqa()
    results = saved_results()
    attached_parts(results, data.corpus, data.calibration, data.ik_test, data.ook)
    save(results, ["attached", "attached-tripwires"])


def _into_synthetic(key: str, compute: Callable[[KnowledgeBase], object], section: str):
    """A part's run that sets ``results["synthetic"][key]`` on the saved minilm KB."""

    def run(_: list[str]) -> None:
        results = saved_results()
        kb = minilm_kb(keep=True)
        results.setdefault("synthetic", {})[key] = compute(kb)
        save(results, [section])

    return run


def _synthetic() -> dict:
    data = pubmedqa()
    return synthetic_part(minilm_kb(keep=True), data.calibration, data.ik_test, data.ook)


def _shift() -> dict:
    data = pubmedqa()
    return shift_part(Guard.calibrate(minilm_kb(), data.calibration, k=32), data.ook, data.ik_test)


def _energy_tau() -> dict:
    data = pubmedqa()
    return energy_tau_part(minilm_kb(), data.calibration, data.ik_test, data.ook)


def _with_pubmedqa(part: Callable[..., dict], *first: object) -> Callable[[], dict]:
    """``part(*first, corpus, calibration, ik_test, ook)``."""

    def compute() -> dict:
        data = pubmedqa()
        return part(*first, data.corpus, data.calibration, data.ik_test, data.ook)

    return compute


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["--list"], ["--help"], ["-h"]):
        print(parts_listing())
        return
    _, part, rest = resolve(args)
    if part.needs != "nothing":
        reason = datasets.missing_reason()
        if reason:
            console.print(f"[yellow]skipping the benchmark: {reason}[/]")
            return
    if part.needs == "pubmedqa":
        pubmedqa()  # prepared first, as every such part starts from it
    part.run(rest)


def resolve(args: Sequence[str]) -> tuple[str, Part, list[str]]:
    """The part ``args`` name (none: the default) and its arguments; SystemExit for an unknown
    part, or arguments given to a part that takes none."""
    name, rest = (args[0], list(args[1:])) if args else (DEFAULT, [])
    part = PARTS.get(name)
    if part is None:
        raise SystemExit(f"no part {name!r}; the parts:\n{parts_listing()}")
    if rest and not part.args:
        raise SystemExit(f"the {name} part takes no arguments (given: {' '.join(rest)})")
    return name, part, rest


def parts_listing() -> str:
    """``python -m benchmarks.run [PART [ARGS]]`` and the table of parts, one a line."""
    lines = ["usage: python -m benchmarks.run [PART [ARGS]] | --list", ""]
    width = max(map(len, PARTS))
    for name, part in PARTS.items():
        lines.append(f"{name:<{width}}  [{part.needs}] {part.about}")
    return "\n".join(lines)


def full_run() -> None:
    """``make bench``: every part below but the ones run on their own."""
    data = pubmedqa()
    corpus, calibration, ik_test, ook = data.corpus, data.calibration, data.ik_test, data.ook
    results: dict = {"machine": machine_description(), "date": time.strftime("%Y-%m-%d")}
    for embedder in ("minilm", "bm25"):
        kb, build_s = timed(
            lambda e=embedder: KnowledgeBase.build(
                [corpus], embedder=e, id_field=datasets.CORPUS_IDS
            )
        )
        kb.save(OUT / f"kb-{embedder}", overwrite=True)
        guard = Guard.calibrate(kb, calibration, k=32)
        entry = {"n_chunks": len(kb), "build_s": build_s, "chunks_per_s": len(kb) / build_s}
        entry["quality"] = {
            name: evaluate(guard, ik_test, queries, samples=300, runs=10, seed=0).model_dump()
            for name, queries in ook.items()
        }
        if embedder == "minilm":
            entry["raw_encode_chunks_per_s"] = raw_encode_rate(kb)
            entry["latency"] = latency(guard, ik_test[:100] + ook["TruthfulQA"][:100])
        results[embedder] = entry
        print_quality(embedder, entry["quality"])
        if embedder == "minilm":
            results["shift"] = shift_part(guard, ook, ik_test)
            results["energy_tau"] = energy_tau_part(kb, calibration, ik_test, ook)
        if embedder == "minilm":
            results["tripwires"] = tripwire_part(kb)
            results["tripwire_default"] = tripwire_default_part(kb, OUT)
        if embedder == "minilm" and os.environ.get("BENCH_SYNTH", "1") != "0":
            results["synthetic"] = synthetic_part(kb, calibration, ik_test, ook)
    if importlib.util.find_spec("ray") is not None:
        results["ray"] = ray_scoring.ray_part(OUT)
    results["near"] = near_part()
    attached_parts(results, corpus, calibration, ik_test, ook)
    save(results, SECTIONS)  # before the long memory run, so its failure loses nothing
    monitor_schemes.main()
    pvalue_validity.main()
    memory_chunks = int(os.environ.get("BENCH_MEMORY_CHUNKS", "100000"))
    if memory_chunks:
        results["memory"] = peak_memory(memory_chunks)
        save(results, ["speed"])
    results["million"] = million.million_part(OUT, corpus, calibration, ik_test, ook)
    save(results, ["million"])
    results["lexical-scale"] = lexical_scale.lexical_part()
    save(results, ["lexical-scale"])
    print_speed(results)
    console.print(f"results saved to {OUT / 'results.json'}")


def attached_part(
    corpus, calibration: list[str], ik_test: list[str], ook: dict[str, list[str]]
) -> dict:
    """benchmarks/attached.py, its tables printed; ``{"skipped": reason}`` without chromadb
    or infinity-emb."""
    reason = attached_collection.missing_reason()
    if reason:
        console.print(f"[yellow]skipping the attached Chroma part: {reason}[/]")
        return {"skipped": reason}
    part = attached.attached_part(corpus, calibration, ik_test, ook)
    header, rows = attached.quality_table(part)
    console.print(
        _rich_table("attached Chroma collection vs the exact knowledge base", header, rows)
    )
    header, rows = attached.langchain_table(part)
    if rows:
        console.print(_rich_table("guarded LangChain retriever over Chroma", header, rows))
    return part


def attached_parts(
    results: dict, corpus, calibration: list[str], ik_test: list[str], ook: dict[str, list[str]]
) -> None:
    """``results["attached"]`` and ``results["attached_tripwires"]`` (one set-up for both)."""
    part = attached_part(corpus, calibration, ik_test, ook)
    results["attached"] = part
    results["attached_tripwires"] = part.pop("tripwires", None) or {"skipped": part.get("skipped")}
    _print_attached_tripwires(results["attached_tripwires"])


def attached_tripwire_part(corpus) -> dict:
    """benchmarks/attached_tripwires.py alone, its table printed."""
    reason = attached_collection.missing_reason()
    if reason:
        console.print(f"[yellow]skipping the attached tripwire part: {reason}[/]")
        return {"skipped": reason}
    part = attached_tripwires.standalone_part(corpus)
    _print_attached_tripwires(part)
    return part


def _print_attached_tripwires(part: dict) -> None:
    if "rules" not in part:
        console.print(f"[yellow]attached tripwires: skipped ({part.get('skipped')})[/]")
        return
    header, rows = attached_tripwires.tripwire_table(part)
    console.print(_rich_table("tripwires in the Chroma collection vs as files", header, rows))


def shift_part(guard: Guard, ook: dict[str, list[str]], ik_test: list[str]) -> dict:
    """Paper Figure 5 (shifted rate per IK ratio), the KS / monitor speed targets, and a
    run folder (bench_out/run) that `ragbound report` turns into a page."""
    from ragbound.report import record_evaluation, record_windows

    part = shift.shift_rates(guard, datasets.pubmedqa_questions(), ook)
    run_dir = OUT / "run"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    shift.write_shift_rates(run_dir, part)
    scored = statistic_scores(guard, ik_test, ook["MMLU-Med"])
    report = evaluate(guard, ik_test, ook["MMLU-Med"], samples=300, runs=10, scored=scored)
    record_evaluation(run_dir, report, scored)
    record_windows(run_dir, shift.monitor_log(guard, ik_test, ook["MMLU-Med"], OUT / "log"))
    part["ks_speed"] = shift.ks_speed()
    part["monitor_speed"] = shift.monitor_speed(guard)
    header, rows = shift_rows(part)
    console.print(_rich_table("offline shift test: KS shifted rate per IK ratio", header, rows))
    return part


def shift_rows(part: dict) -> tuple[list[str], list[list[str]]]:
    """One row per IK ratio; a column per statistic x OoK set."""
    columns = [(stat, name) for stat in shift.STATISTICS for name in part[stat]]
    header = ["IK ratio"] + [f"{stat} {name}" for stat, name in columns]
    rows = []
    for i, ratio in enumerate(part["ratios"]):
        row = [f"{ratio:.1f}"]
        row += [f"{part[stat][name]['rows'][i]['shifted_rate']:.3f}" for stat, name in columns]
        rows.append(row)
    return header, rows


def shift_markdown(results: dict) -> list[str]:
    part = results.get("shift")
    if not part:
        return []
    header, rows = shift_rows(part)
    ks, mon = part["ks_speed"], part["monitor_speed"]
    return [
        f"KS shifted rate (share of trials with p <= alpha) at alpha = 5%, reference "
        f"{part['size']} PubMedQA questions, test batch of {part['size']} with the given "
        f"in-knowledge ratio, {part['trials']} trials per ratio. Ratio 1.0 is no shift: its "
        "rate is the false-alarm rate (target <= 0.07).",
        "",
        *markdown_table(header, rows),
        "",
        "| shift measure | measured | target |",
        "|---|---|---|",
        f"| KS test, {ks['n']:,} vs {ks['n']:,} values, median ms | {ks['median_ms']:.1f} | < 50 |",
        f"| monitor statistics step, {mon['n']:,} queries in windows of {mon['window']}, "
        f"queries/s | {mon['queries_per_s']:,.0f} | >= 20,000 |",
    ]


def synthetic_part(
    kb: KnowledgeBase, calibration: list[str], ik_test: list[str], ook: dict[str, list[str]]
) -> dict:
    """Table 4 step by step, the baselines and the local LLM speed (needs ragbound[local])."""
    from ragbound.llm import CachedLLM, LLMUnavailableError, ResponseCache, make_llm

    try:
        llm = CachedLLM(make_llm("local"), ResponseCache())
    except LLMUnavailableError as exc:
        console.print(f"[yellow]skipping synthetic calibration and baselines: {exc}[/]")
        return {"skipped": str(exc)}
    wanted = os.environ.get("BENCH_SYNTH_STEPS", "1,2,3,4,5").split(",")
    steps = [step for step in synthetic.STEPS if step.label.split(".")[0] in wanted]
    sets = synthetic.synthetic_sets(kb, llm, steps)
    calibrations = {f"real in-knowledge queries ({len(calibration)})": calibration}
    calibrations |= {label: entry["queries"] for label, entry in sets.items()}
    part: dict = {
        "sets": {
            label: {k: v for k, v in e.items() if k != "queries"} for label, e in sets.items()
        },
        "table": synthetic.calibration_table(kb, calibrations, ik_test, ook),
    }
    print_synthetic(part)
    default = synthetic.STEPS[-1].label
    if default in sets:
        guard = Guard.calibrate(kb, sets[default]["queries"], k=32)
        part["baselines"] = baselines.outlier_baselines(
            kb, sets[default]["queries"], ik_test, ook, guard
        )
        subset = baselines.judge_subset(ik_test, ook)
        part["judge"] = baselines.llm_judge(kb, llm, guard, subset)
        print_baselines(part)
    part["speed"] = llm_speed.generation_speed(kb)
    part["warm_synth_s"] = llm_speed.warm_synth_seconds(kb.path or OUT / "kb-minilm")
    console.print(part["speed"], f"warm synth of 300: {part['warm_synth_s']:.2f} s")
    return part


def near_part() -> dict:
    """Near out-of-knowledge: COVID-QA halves, PubMedQA half, far sets (benchmarks/near.py)."""
    part = near.near_part(OUT)
    if "skipped" in part:
        console.print(f"[yellow]skipping the near out-of-knowledge benchmark: {part['skipped']}[/]")
        return part
    header, rows = near.quality_table(part)
    title = f"near out-of-knowledge, {near.SPEC} (mean ± sd over seeds)"
    console.print(_rich_table(title, header, rows))
    header, rows = near.cost_table(part)
    console.print(_rich_table("what each granularity costs", header, rows))
    return part


def tripwire_part(kb: KnowledgeBase) -> dict:
    """RAR benchmark: HarmfulQA tripwires, safe sets, cascade, latency and scale."""
    reason = datasets.tripwire_missing_reason()
    if reason:
        console.print(f"[yellow]skipping the tripwire benchmark: {reason}[/]")
        return {"skipped": reason}
    part = tripwires.run(kb, OUT)
    for title, header, rows in tripwire_tables(part):
        console.print(_rich_table(title, header, rows))
    return part


def tripwire_tables(part: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of the tripwire quality, cascade and speed tables."""
    quality = part["quality"]
    sets = list(quality["n"])
    header = ["rule", "accuracy"] + [f"{name} ({quality['n'][name]})" for name in sets]
    rows = [
        [label + f": {row['rule']}", f"{row['accuracy']:.3f}"]
        + [f"{row[name]:.3f}" for name in sets]
        for label, row in quality["rows"].items()
    ]
    tables = [
        (
            f"rejection rate per set, {quality['n_tripwires']} HarmfulQA tripwires "
            "(harmful sets: TPR; safe sets: false rejection)",
            header,
            rows,
        )
    ]
    cascade = part.get("cascade") or {}
    if "rows" in cascade:
        tables.append(
            (
                f"cascade on {cascade['per_side']} HarmfulQA in-topic + {cascade['per_side']} "
                f"XSTest safe (rule {cascade.get('rule', 'default')}; LLM {cascade['model']}, "
                f"{cascade['llm_s_per_query']:.1f} s/query, {cascade['llm_errors']} unparsed)",
                ["layer", "accuracy", "TPR", "false rejection"],
                [
                    [name, f"{r['accuracy']:.3f}", f"{r['tpr']:.3f}", f"{r['frr']:.3f}"]
                    for name, r in cascade["rows"].items()
                ],
            )
        )
    lat, sc = part["latency"], part["scale"]
    tables.append(
        (
            "tripwire speed",
            ["measure", "ours", "baseline (same run)", "ratio", "target"],
            [
                [
                    f"check latency p50, ms (baseline: plain retrieval, k={lat['k']})",
                    f"{lat['check_p50_ms']:.2f}",
                    f"{lat['plain_p50_ms']:.2f}",
                    f"{lat['check_p50_ms'] / lat['plain_p50_ms']:.3f}",
                    "<= 1.10",
                ],
                *_paired_latency_rows(lat),
                [
                    f"add {sc['tripwires']:,} tripwires to a {sc['chunks']:,}-chunk KB, s",
                    f"{sc['add_s']:.2f}",
                    "",
                    "",
                    "< 5",
                ],
                [
                    f"remove {sc['tripwires']:,} tripwires, s "
                    f"(knowledge files untouched: {sc['knowledge_files_untouched']})",
                    f"{sc['remove_s']:.2f}",
                    "",
                    "",
                    "< 5",
                ],
            ],
        )
    )
    return tables


def tripwire_markdown(results: dict) -> list[str]:
    part = results.get("tripwires")
    if not part or "quality" not in part:
        return []
    lines = ["HarmfulQA tripwires in the PubMedQA knowledge base.", ""]
    for title, header, rows in tripwire_tables(part):
        lines += [f"*{title}*", "", *markdown_table(header, rows), ""]
    return lines


def saved_results() -> dict:
    """bench_out/results.json of an earlier run (empty when none): partial reruns add to it."""
    path = OUT / "results.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def save(results: dict, parts: Iterable[str] = ()) -> None:
    """Write bench_out/results.json, and the tables of ``parts`` into docs/benchmarks.md."""
    OUT.mkdir(exist_ok=True)
    (OUT / "results.json").write_text(json.dumps(results, indent=2))
    for name in parts:
        title, render = SECTIONS[name]
        lines = render(results)
        if lines:
            write_section(name, title, "\n".join(lines))


def raw_encode_rate(kb: KnowledgeBase) -> float:
    """Chunks/s of the bare model.encode on the same chunk texts (the throughput ceiling)."""
    texts = [chunk.text for chunk in kb.chunks]
    _, seconds = timed(lambda: kb.embedder.encode(texts, batch_size=64))
    return len(texts) / seconds


def peak_memory(n_chunks: int) -> dict:
    """Index ``n_chunks`` one-sentence chunks in a child process and read its peak RSS."""
    console.print(f"indexing {n_chunks} chunks for the memory benchmark (takes minutes)...")
    cmd = [sys.executable, "-m", "benchmarks.memory", str(n_chunks), str(OUT / "memory")]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"memory benchmark failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def quality_table(
    quality: dict, metrics: Sequence[str], digits: int
) -> tuple[list[str], list[list[str]]]:
    """One row per statistic, a column per OoK set x metric (AUROC, AUPRC, TPR at 5% FPR and
    DER, headed ``metrics``), the values to ``digits`` decimals."""
    header = ["statistic"] + [f"{d} {m}" for d in quality for m in metrics]
    rows = []
    for name in next(iter(quality.values()))["statistics"]:
        row = [name]
        for report in quality.values():
            m = report["statistics"][name]
            row += [f"{m[key]:.{digits}f}" for key in ("auroc", "auprc", "tpr_at_5_fpr", "der")]
        rows.append(row)
    return header, rows


def print_quality(embedder: str, quality: dict) -> None:
    title = f"{embedder}: PubMedQA corpus, 500 calibration / 500 test IK queries"
    header, rows = quality_table(quality, ("AUROC", "AUPRC", "TPR@5%", "DER"), 4)
    console.print(_rich_table(title, header, rows))


def print_speed(results: dict) -> None:
    table = Table(title=f"speed and memory ({results['machine']}, {results['date']})")
    table.add_column("measure")
    table.add_column("ours", justify="right")
    table.add_column("baseline", justify="right")
    table.add_column("ratio", justify="right")
    table.add_column("target", justify="right")
    mini = results["minilm"]
    table.add_row(
        "index build, chunks/s (vs raw encode)",
        f"{mini['chunks_per_s']:.1f}",
        f"{mini['raw_encode_chunks_per_s']:.1f}",
        f"{mini['chunks_per_s'] / mini['raw_encode_chunks_per_s']:.2f}",
        ">= 0.90",
    )
    lat = mini["latency"]
    table.add_row(
        "check p50, ms (vs embed alone)",
        f"{lat['check_p50_ms']:.1f}",
        f"{lat['embed_p50_ms']:.1f}",
        f"{lat['ratio_p50']:.2f}",
        "<= 1.30",
    )
    table.add_row(
        "check p99, ms (vs embed alone)",
        f"{lat['check_p99_ms']:.1f}",
        f"{lat['embed_p99_ms']:.1f}",
        f"{lat['check_p99_ms'] / lat['embed_p99_ms']:.2f}",
        "",
    )
    bm = results["bm25"]
    table.add_row("bm25 index build, chunks/s", f"{bm['chunks_per_s']:.0f}", "", "", "")
    if "memory" in results:
        mem = results["memory"]
        table.add_row(
            f"peak RSS indexing {mem['n_chunks']} chunks, MB",
            f"{mem['peak_mb']:.0f}",
            "",
            "",
            "< 1500",
        )
    console.print(table)


def synthetic_rows(part: dict, statistic: str = "mss") -> list[list[str]]:
    """Table 4 for one statistic: one row per calibration set."""
    rows = []
    for label, entry in part["table"].items():
        m = entry[statistic]
        info = part["sets"].get(label)
        generic = f"{info['generic']:.0%}" if info else ""
        calls = str(info["report"]["requested"]) if info else ""
        rows.append(
            [
                label,
                str(entry["n"]),
                calls,
                generic,
                f"{m['critical_value']:.3f}",
                f"{m['fpr']:.3f}",
            ]
            + [f"{m[d][key]:.3f}" for d in ("MMLU-Med", "TruthfulQA") for key in ("tpr", "der")]
        )
    return rows


SYNTH_HEADER = [
    "calibration set",
    "n",
    "LLM calls",
    "pointing at source",
    "critical value",
    "FPR held-out IK",
    "MMLU-Med TPR",
    "MMLU-Med DER",
    "TruthfulQA TPR",
    "TruthfulQA DER",
]


def statistic_rows(part: dict) -> tuple[list[str], list[list[str]]]:
    """Every statistic: FPR and TPR with real vs default-synthetic calibration."""
    labels = list(part["table"])
    real, synth = labels[0], labels[-1]
    header = ["statistic", "FPR real", "FPR synthetic"]
    header += [f"{d} TPR {c}" for d in ("MMLU-Med", "TruthfulQA") for c in ("real", "synthetic")]
    rows = []
    for name in part["table"][real]:
        if name == "n":
            continue
        a, b = part["table"][real][name], part["table"][synth][name]
        row = [name, f"{a['fpr']:.3f}", f"{b['fpr']:.3f}"]
        row += [f"{x[d]['tpr']:.3f}" for d in ("MMLU-Med", "TruthfulQA") for x in (a, b)]
        rows.append(row)
    return header, rows


def baseline_rows(part: dict) -> list[list[str]]:
    rows = []
    for name, entry in part["baselines"].items():
        if name == "embed_ms":
            continue
        rows.append(
            [name]
            + [f"{entry[d][m]:.3f}" for d in ("MMLU-Med", "TruthfulQA") for m in ("auroc", "auprc")]
            + [f"{entry['ms_per_query']:.3f}", f"{entry['fit_s']:.2f}"]
        )
    return rows


BASELINE_HEADER = [
    "method (300 synthetic IK queries)",
    "MMLU-Med AUROC",
    "MMLU-Med AUPRC",
    "TruthfulQA AUROC",
    "TruthfulQA AUPRC",
    "ms/query (after embedding)",
    "fit s",
]


def judge_rows(part: dict) -> list[list[str]]:
    judge = part["judge"]
    rows = []
    for who in ("ours", "judge"):
        name = "ours (mss)" if who == "ours" else f"LLM relevance judge ({judge['model']})"
        cost = f"{judge['seconds_per_query'] * 1e3:.0f}" if who == "judge" else "see above"
        rows.append(
            [name]
            + [
                f"{judge[d][who][m]:.3f}"
                for d in ("MMLU-Med", "TruthfulQA")
                for m in ("auroc", "auprc")
            ]
            + [cost]
        )
    return rows


def _rich_table(title: str, header: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    return table


def print_synthetic(part: dict) -> None:
    console.print(
        _rich_table(
            "synthetic vs real calibration, mss, alpha = 5%", SYNTH_HEADER, synthetic_rows(part)
        )
    )
    header, rows = statistic_rows(part)
    console.print(
        _rich_table("every statistic: real vs synthetic (default) calibration", header, rows)
    )


def print_baselines(part: dict) -> None:
    console.print(
        _rich_table("baselines (balanced 300 + 300, 10 runs)", BASELINE_HEADER, baseline_rows(part))
    )
    n = part["judge"]["n_per_set"]
    header = ["method", *BASELINE_HEADER[1:5], "ms/query"]
    console.print(_rich_table(f"LLM judge subset ({n} per set)", header, judge_rows(part)))


def _paired_latency_rows(lat: dict) -> list[list[str]]:
    """Median per-query check/plain ratio, and the search step alone (vectors given)."""
    if "paired_ratio_p50" not in lat:
        return []
    return [
        ["median of per-query ratios check / plain", "", "", f"{lat['paired_ratio_p50']:.3f}", ""],
        [
            "search step alone, p50 ms (query vector given; baseline: knowledge top-k)",
            f"{lat['check_search_p50_ms']:.3f}",
            f"{lat['plain_search_p50_ms']:.3f}",
            "",
            "",
        ],
    ]


def synthetic_markdown(results: dict) -> list[str]:
    part = results.get("synthetic") or {}
    lines: list[str] = []
    if "table" in part:
        lines += ["**Synthetic vs real calibration** (MSS, alpha = 5%, minilm)", ""]
        lines += markdown_table(SYNTH_HEADER, synthetic_rows(part))
        header, rows = statistic_rows(part)
        lines += ["", "**Every statistic, real vs synthetic calibration** (the default step)", ""]
        lines += markdown_table(header, rows)
    if "baselines" in part:
        embed = part["baselines"]["embed_ms"]
        lines += ["", f"**Baselines** (query embedding, shared by all: {embed:.1f} ms)", ""]
        lines += markdown_table(BASELINE_HEADER, baseline_rows(part))
    if "judge" in part:
        n = part["judge"]["n_per_set"]
        lines += ["", f"**LLM relevance judge** on a subset ({n} queries per set, seed 0)", ""]
        lines += markdown_table(["method", *BASELINE_HEADER[1:5], "ms/query"], judge_rows(part))
    return lines


def llm_speed_markdown(results: dict) -> list[str]:
    """Local generation speed against a bare llama-cpp-python loop."""
    sp = (results.get("synthetic") or {}).get("speed")
    if not sp:
        return []
    return markdown_table(
        ["local LLM measure", "ours", "baseline (same run)", "ratio", "target"],
        [
            [
                f"generation, tokens/s (baseline: bare llama-cpp-python loop, {sp['prompts']} "
                f"prompts x {sp['passes']})",
                f"{sp['ours_tokens_per_s']:.2f}",
                f"{sp['bare_tokens_per_s']:.2f}",
                f"{sp['ratio']:.2f}",
                ">= 0.90",
            ]
        ],
    )


def warm_synth_markdown(results: dict) -> list[str]:
    """``ragbound synth --n 300`` rerun on a warm response cache."""
    seconds = (results.get("synthetic") or {}).get("warm_synth_s")
    if seconds is None:
        return []
    return markdown_table(
        ["measure", "measured", "target"],
        [["`ragbound synth --n 300`, warm response cache, s", f"{seconds:.2f}", "< 2"]],
    )


def quality_markdown(results: dict) -> list[str]:
    """The 7 statistics x {near, far} table of each embedder, as Markdown lines."""
    lines: list[str] = []
    for embedder in ("minilm", "bm25"):
        quality = results[embedder]["quality"]
        header, rows = quality_table(quality, ("AUROC", "AUPRC", "TPR@5%FPR", "DER"), 3)
        lines += [f"**{embedder}** ({results[embedder]['n_chunks']} chunks)", ""]
        lines += [*markdown_table(header, rows), ""]
    return lines


def speed_markdown(results: dict) -> list[str]:
    """The speed and memory table as Markdown lines (ours next to the baseline, one run)."""
    mini = results["minilm"]
    lat = mini["latency"]
    rows = [
        "| measure | ours | baseline (same run) | ratio | target |",
        "|---|---|---|---|---|",
        f"| index build, chunks/s (baseline: bare `encode`, batch 64) | "
        f"{mini['chunks_per_s']:.1f} | {mini['raw_encode_chunks_per_s']:.1f} | "
        f"{mini['chunks_per_s'] / mini['raw_encode_chunks_per_s']:.2f} | >= 0.90 |",
        f"| check latency p50, ms (baseline: embedding the query alone) | "
        f"{lat['check_p50_ms']:.1f} | {lat['embed_p50_ms']:.1f} | {lat['ratio_p50']:.2f} | "
        "<= 1.30 |",
        f"| check latency p99, ms | {lat['check_p99_ms']:.1f} | {lat['embed_p99_ms']:.1f} | "
        f"{lat['check_p99_ms'] / lat['embed_p99_ms']:.2f} | |",
        f"| BM25 index build, chunks/s | {results['bm25']['chunks_per_s']:.0f} | | | |",
    ]
    if "memory" in results:
        mem = results["memory"]
        rows.append(
            f"| peak memory indexing {mem['n_chunks']:,} one-sentence chunks, MB "
            f"(vectors: {mem['vectors_mb']:.0f} MB) | {mem['peak_mb']:.0f} | | | < 1500 |"
        )
    return ["", *rows, ""]


# python -m benchmarks.run NAME -> the part (the table `--list` prints)
PARTS: dict[str, Part] = {
    "default": Part(
        "`make bench` (no part named): quality, speed and memory of minilm and bm25; shift, "
        "energy-tau, tripwires, tripwire-default, synthetic, ray, near, attached, "
        "monitor-schemes, pvalue-validity, million, lexical-scale",
        lambda _: full_run(),
    ),
    "monitor-schemes": Part(
        "the shift monitor's false-alarm schemes, a simulation",
        main_of("monitor_schemes"),
        "nothing",
    ),
    "pvalue-validity": Part(
        "Fisher's and Simes's p-values under the null, a simulation",
        main_of("pvalue_validity"),
        "nothing",
    ),
    "sentences": Part(
        "ragbound's sentence splitter against blingfire on the corpus zoo and doc2dial",
        main_of("sentences"),
        "data",
        args=True,
    ),
    "conversations": Part(
        "`make bench-conversations`: each reading of a chat on doc2dial",
        main_of("conversations"),
        "nothing",
        args=True,
    ),
    "chat-agreement": Part(
        "the same doc2dial chats through the service, in process and each framework adapter",
        main_of("chat_agreement"),
        "data",
        args=True,
    ),
    "serve": Part(
        "`make bench-serve`: the HTTP service against in-process decisions",
        main_of("serve"),
        "data",
        args=True,
    ),
    "zoo": Part(
        "`make bench-zoo`: every automatic choice against the default on the corpus zoo",
        main_of("zoo"),
        "data",
        args=True,
    ),
    "answerability": Part(
        "`make bench-answerability`: relevance + coverage against relevance alone, leave-one-out",
        main_of("answerability"),
        "data",
        args=True,
    ),
    "answerability-judge": Part(
        "the answerability test's LLM judge (bundled local model) on a subset, leave-one-out",
        main_of("answerability_judge"),
        "data",
        args=True,
    ),
    "answerability-answers": Part(
        "the bundled LLM's answers gated by relevance alone, + coverage, + the judge (slow)",
        main_of("answerability_answers"),
        "data",
        args=True,
    ),
    "install": Part(
        "`make bench-install`: venv size and install time of the core, the image, the demo, "
        "everything; the MiniLM graph built from its weights against the torch export",
        main_of("install"),
        "nothing",
        args=True,
    ),
    "default-path": Part(
        "`make bench-default-path`: a default Gate.decide against the query's embedding alone",
        main_of("default_path"),
        "data",
        args=True,
    ),
    "near": Part("near OoK: COVID-QA halves, PubMedQA half, far sets", stored("near", near_part)),
    "lexical-scale": Part(
        "combined's word index at up to a million chunks",
        stored("lexical-scale", lexical_scale.lexical_part),
    ),
    "shift": Part(
        "the offline shift test (paper Figure 5), KS and monitor speed", stored("shift", _shift)
    ),
    "beta-binomial": Part(
        "the exceedance test's beta-binomial tail: the old integer sum against the current",
        stored("beta_binomial", beta_binomial.beta_binomial_part),
        "nothing",
    ),
    "energy-tau": Part(
        "energy's temperature: the paper's tau = 1 against the embedder's",
        stored("energy_tau", _energy_tau),
    ),
    "attached": Part(
        "an attached Chroma collection against the exact KB, its LangChain retriever, tripwires",
        _attached,
    ),
    "attached-tripwires": Part(
        "the tripwires in the attached collection against the same set as files, alone",
        stored("attached_tripwires", lambda: attached_tripwire_part(pubmedqa().corpus)),
    ),
    "million": Part(
        "float16 vs float32 AUROC and the 1,000,000-chunk row",
        stored("million", _with_pubmedqa(million.million_part, OUT)),
    ),
    "ray": Part(
        "scoring a query log on Ray: 1 and 2 actors",
        stored("ray", lambda: ray_scoring.ray_part(OUT)),
    ),
    "tripwires": Part(
        "HarmfulQA tripwires in the PubMedQA KB (RAR): rates, cascade, speed",
        stored("tripwires", lambda: tripwire_part(minilm_kb())),
    ),
    "tripwire-default": Part(
        "the default tripwire rule against the paper's over seeded splits",
        stored("tripwire_default", lambda: tripwire_default_part(minilm_kb(), OUT)),
    ),
    "tripwire-floor": Part(
        "the calibrated tripwire floor: in-knowledge questions called forbidden on the zoo, "
        "doc2dial and XSTest's safe prompts, beside held-out harmful recall",
        main_of("tripwire_floor"),
        "data",
        args=True,
    ),
    "llm-speed": Part(
        "local generation speed against a bare llama-cpp-python loop",
        _into_synthetic("speed", llm_speed.generation_speed, "llm-speed"),
    ),
    "warm-synth": Part(
        "`ragbound synth --n 300` on a warm cache (a cold one: ~1 h)",
        _into_synthetic(
            "warm_synth_s", lambda kb: llm_speed.warm_synth_seconds(kb.path), "warm-synth"
        ),
    ),
    "synthetic": Part(
        "synthetic vs real calibration (paper Table 4), baselines, LLM speed",
        stored("synthetic", _synthetic, "synthetic", "llm-speed", "warm-synth"),
    ),
}
DEFAULT = "default"


# docs/benchmarks.md section name -> (title, its Markdown lines from the saved results)
SECTIONS: dict[str, tuple[str, Callable[[dict], list[str]]]] = {
    "quality": ("Out-of-knowledge detection (paper Table 1b set-up)", quality_markdown),
    "speed": ("Speed and memory", speed_markdown),
    "energy-tau": (
        "Energy's temperature: the paper's tau = 1 and the embedder's",
        energy_tau_markdown,
    ),
    "shift": ("Offline shift test (paper Figure 5) and monitor speed", shift_markdown),
    "beta-binomial": (beta_binomial.TITLE, beta_binomial.beta_binomial_markdown),
    "ray": ("Ray scoring: workers against one process", ray_scoring.ray_markdown),
    "near": ("Near out-of-knowledge: COVID-QA halves, PubMedQA half, far sets", near.near_markdown),
    "lexical-scale": (
        "The combined statistic's word index at a million chunks",
        lexical_scale.lexical_markdown,
    ),
    "million": ("A million chunks on one machine", million.million_markdown),
    "tripwires": ("Tripwires (RAR)", tripwire_markdown),
    "tripwire-default": (
        "Tripwires: the default rule against the paper's",
        tripwire_default_markdown,
    ),
    "synthetic": ("Synthetic vs real calibration and the baselines", synthetic_markdown),
    "llm-speed": ("Local LLM generation speed", llm_speed_markdown),
    "warm-synth": ("Synthetic queries on a warm cache", warm_synth_markdown),
    "attached": (attached.TITLE, attached.attached_markdown),
    "attached-tripwires": (
        attached_tripwires.TITLE,
        attached_tripwires.attached_tripwires_markdown,
    ),
}


if __name__ == "__main__":
    main()
