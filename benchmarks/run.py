"""``make bench``: the paper's online test on real data, plus speed and memory targets.

Prints, for minilm and bm25 on the PubMedQA corpus: the 7 statistics x {MMLU-Med (near),
TruthfulQA (far)} table of AUROC, AUPRC, TPR@5%FPR and DER (10 runs x 300 per side);
index build throughput against raw ``encode`` on the same chunks; ``check`` latency p50/p99
against embedding the query alone, measured interleaved in one run; and peak memory while
indexing many chunks (in a child process). Results also go to bench_out/results.json.

With the local LLM installed (``ragbound[local]``), also: synthetic vs real calibration step
by step (paper Table 4), the outlier-detector and LLM-judge baselines (Tables 2-3) and the
local generation speed (see benchmarks/synthetic.py, baselines.py, llm_speed.py).

``python -m benchmarks.run synthetic|shift|near|approx|million|ray|tripwires|tripwire-default|
tripwire-rule|tripwire-llm|llm-speed`` runs only that part and merges it into the saved results.
``python -m benchmarks.run serve [--requests N] [--per-level N] [--threads N|default]`` is
``make bench-serve`` (benchmarks/serve.py: the HTTP service against in-process decisions; raw
numbers in bench_out/serve.json). ``python -m benchmarks.run zoo`` is ``make bench-zoo``
(benchmarks/zoo.py: every automatic choice against the default on PubMedQA, PubMedQA-half,
COVID-QA halves, BANKING77-OOS and CLAP NQ; BENCH_ZOO_SEEDS, BENCH_ZOO_CORPORA; raw numbers in
bench_out/zoo.json; BENCH_ZOO_SYNTH=1: synthetic calibration instead, bench_out/zoo_synth.json).
``conversations`` is ``make bench-conversations`` (benchmarks/conversations.py: each reading of a
chat against the last message alone on doc2dial; BENCH_CONV_SEEDS, BENCH_CONV_REWRITE_N,
BENCH_CONV_LATENCY_N; raw numbers in bench_out/conversations.json).
``int8`` (benchmarks/int8.py): dynamic int8 MiniLM against the fp32 ONNX default on the zoo's
corpora, one seed (BENCH_INT8_SEED, BENCH_INT8_CORPORA; raw numbers in bench_out/int8.json).
The tripwire parts (benchmarks/tripwires.py,
tripwire_default.py, and tripwire_rule.py: every rule's curve on harmful sources left out of
the tripwires; ``tripwire-rule-mpnet``: its candidates with MPNet; ``tripwire-llm``,
tripwire_llm.py: the local LLM judging what probe-general flags, BENCH_TRIPWIRE_LLM_N prompts
per set, BENCH_TRIPWIRE_LLM_GROUNDED its grounded splits) need HarmfulQA and XSTest;
BENCH_CASCADE_N sets its LLM cascade subset (default 30 per side).
The near part (benchmarks/near.py) needs COVID-QA too; BENCH_NEAR_SEEDS sets its splits (5).
``near-mpnet``: the same splits with all-mpnet-base-v2 (its COVID-QA knowledge base, 27,891
vectors, took 85 minutes to build on 2 shared cores, once; cached under bench_out/near-mpnet/);
BENCH_NEAR_MPNET_CORPORA (default "COVID-QA,PubMedQA") picks the corpora.
``lexical-scale`` (benchmarks/lexical_scale.py): the combined statistic's in-memory word
index at BENCH_LEXICAL_CHUNKS chunks (default "100000,1000000"): build, memory, search.
``near-synth`` (benchmarks/near_synth.py, the local LLM): mss and combined calibrated on
synthetic questions on the COVID-QA halves (BENCH_NEAR_SYNTH_SEEDS, BENCH_NEAR_SYNTH_N).
``approx`` (benchmarks/approx.py): exact, HNSW and pgvector searches with their calibrations.
``million`` (benchmarks/million.py): float16 vs float32 AUROC and the 1,000,000-chunk row.
``native-guard`` (benchmarks/native_guard.py): the guard on a LangChain vector store against
the bare retriever, p50 latency (the bundled sample corpus: needs no data set).
``cli-start`` (benchmarks/cli_start.py): whole-process wall time of ``ragbound --help`` and a
one-query ``check`` (ONNX and torch) against a bare process that embeds one query with torch.
``attached`` (benchmarks/attached.py): the PubMedQA corpus in a Chroma collection embedded
through infinity-emb, attached, against the exact knowledge base; and a guarded LangChain
retriever over it (needs chromadb and infinity-emb, else skipped with the reason); and the
tripwire set added into the collection against the same set as files (benchmarks/
attached_tripwires.py), which ``attached-tripwires`` runs alone on a collection set up again.
Environment: RAGBOUND_DATA (data folder), BENCH_MEMORY_CHUNKS (default 100000; 0 skips),
BENCH_MILLION_CHUNKS (default 1000000; 0 keeps only the float16 quality table),
BENCH_SYNTH (default 1; 0 skips the LLM parts), BENCH_SYNTH_STEPS (default all: "1,2,3,4,5").
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence

from rich.console import Console
from rich.table import Table

from benchmarks import (
    approx,
    attached,
    attached_collection,
    attached_tripwires,
    baselines,
    cli_start,
    datasets,
    doc2query,
    lexical_scale,
    llm_speed,
    million,
    monitor_schemes,
    native_guard,
    near,
    pvalue_validity,
    ray_scoring,
    serve,
    shift,
    synthetic,
    tripwires,
)
from benchmarks.doc import machine_description, markdown_table, write_section
from benchmarks.energy_tau import energy_tau_markdown, energy_tau_part
from benchmarks.timing import latency, timed
from benchmarks.tripwire_default import tripwire_default_markdown, tripwire_default_part
from benchmarks.tripwire_llm import tripwire_llm_markdown, tripwire_llm_part
from benchmarks.tripwire_rule import (
    tripwire_rule_markdown,
    tripwire_rule_mpnet_markdown,
    tripwire_rule_part,
)
from ragbound.detect import Guard
from ragbound.detect.evaluate import evaluate, split_queries, statistic_scores
from ragbound.knowledge import KnowledgeBase

OUT = datasets.REPO / "bench_out"
console = Console(width=200)  # wide tables stay readable when piped to a file


def main() -> None:
    if sys.argv[1:] == ["monitor-schemes"]:  # a simulation: needs no data set
        monitor_schemes.main()
        return
    if sys.argv[1:] == ["pvalue-validity"]:  # a simulation: needs no data set
        pvalue_validity.main()
        return
    if sys.argv[1:] == ["synth-structure"]:  # synthetic calibration without a document field
        from benchmarks import synth_structure

        synth_structure.main(["structure", "check", "llm"])
        return
    if sys.argv[1:] == ["near-synth"]:  # near OoK, calibrated on synthetic questions (LLM)
        from benchmarks import near_synth

        near_synth.main()
        return
    sample_parts = {  # the bundled sample corpus: they need no data set
        "native-guard": ("native_guard", native_guard.native_guard_part),
        "cli-start": ("cli_start", cli_start.cli_start_part),
    }
    if len(sys.argv) == 2 and sys.argv[1] in sample_parts:
        key, run_part = sample_parts[sys.argv[1]]
        results = saved_results()
        results[key] = run_part()
        save(results, [sys.argv[1]])
        print(json.dumps(results[key], indent=2))
        return
    if sys.argv[1:2] == ["conversations"]:  # `make bench-conversations`: doc2dial, own section
        from benchmarks import conversations

        # `conversations render`: the section again from bench_out/conversations.json
        conversations.main(sys.argv[2:])
        return
    reason = datasets.missing_reason()
    if reason:
        console.print(f"[yellow]skipping the benchmark: {reason}[/]")
        return
    if sys.argv[1:] == ["tripwire-llm"]:  # an LLM judge behind probe-general (the local LLM)
        reason = datasets.tripwire_missing_reason()
        if reason:
            console.print(f"[yellow]skipping the tripwire-llm benchmark: {reason}[/]")
            return
        results = saved_results()
        results["tripwire_llm"] = tripwire_llm_part()
        save(results, ["tripwire-llm"])
        print("\n".join(tripwire_llm_markdown(results)))
        return
    if sys.argv[1:2] == ["serve"]:  # `make bench-serve`; takes its own options
        serve.main(sys.argv[2:])
        return
    if sys.argv[1:2] == ["zoo"]:  # `make bench-zoo`: its own raw file and section
        from benchmarks import zoo

        zoo.main(sys.argv[2:])  # `zoo render`: the section again from bench_out/zoo.json
        return
    if sys.argv[1:2] == ["int8"]:  # dynamic int8 MiniLM against fp32 on the zoo
        from benchmarks import int8

        int8.main(sys.argv[2:])  # `int8 render`: the section again from bench_out/int8.json
        return
    corpus = datasets.write_pubmedqa_corpus(OUT / "pubmedqa_corpus.jsonl")
    calibration, ik_test = split_queries(datasets.pubmedqa_questions(), 0.5, seed=0)
    ook = {"MMLU-Med": datasets.mmlu_med_questions(), "TruthfulQA": datasets.truthfulqa_questions()}
    if sys.argv[1:] == ["near"]:
        results = saved_results()
        results["near"] = near_part()
        save(results, ["near"])
        return
    if sys.argv[1:] == ["lexical-scale"]:  # combined's word index at up to a million chunks
        results = saved_results()
        results["lexical-scale"] = lexical_scale.lexical_part()
        save(results, ["lexical-scale"])
        return
    if sys.argv[1:] == ["near-mpnet"]:  # the same splits with the stronger embedder
        results = saved_results()
        corpora = os.environ.get("BENCH_NEAR_MPNET_CORPORA", ",".join(near.CORPORA))
        results["near-mpnet"] = near_part("mpnet", [c.strip() for c in corpora.split(",")])
        save(results, ["near-mpnet"])
        return
    if sys.argv[1:] == ["doc2query"]:  # the bundled LLM at index time (minutes per split)
        results = saved_results()
        results["doc2query"] = doc2query.doc2query_part(OUT, doc2query.doc2query_llm())
        save(results, ["doc2query"])
        return
    if sys.argv[1:] == ["near-cost"]:  # the cost table again, the saved splits kept
        results = saved_results()
        results["near"] = near.near_cost_part(OUT, results.get("near", {}))
        save(results, ["near"])
        return
    if sys.argv[1:] == ["shift"]:
        results = saved_results()
        kb = KnowledgeBase.build([corpus], embedder="minilm", id_field=datasets.CORPUS_IDS)
        results["shift"] = shift_part(Guard.calibrate(kb, calibration, k=32), ook, ik_test)
        save(results, ["shift"])
        return
    if sys.argv[1:] == ["energy-tau"]:
        results = saved_results()
        kb = KnowledgeBase.build([corpus], embedder="minilm", id_field=datasets.CORPUS_IDS)
        results["energy_tau"] = energy_tau_part(kb, calibration, ik_test, ook)
        save(results, ["energy-tau"])
        return
    if sys.argv[1:] == ["approx"]:
        results = saved_results()
        results["approx"] = approx.approx_part(corpus, calibration, ik_test, ook)
        save(results, ["approx"])
        return
    if sys.argv[1:] == ["attached"]:
        results = saved_results()
        attached_parts(results, corpus, calibration, ik_test, ook)
        save(results, ["attached", "attached-tripwires"])
        return
    if sys.argv[1:] == ["attached-tripwires"]:  # the collection's tripwires alone
        results = saved_results()
        results["attached_tripwires"] = attached_tripwire_part(corpus)
        save(results, ["attached-tripwires"])
        return
    if sys.argv[1:] == ["million"]:
        results = saved_results()
        results["million"] = million.million_part(OUT, corpus, calibration, ik_test, ook)
        save(results, ["million"])
        return
    if sys.argv[1:] == ["ray"]:
        results = saved_results()
        results["ray"] = ray_scoring.ray_part(OUT)
        save(results, ["ray"])
        return
    if sys.argv[1:] == ["tripwires"]:
        results = saved_results()
        kb = KnowledgeBase.build([corpus], embedder="minilm", id_field=datasets.CORPUS_IDS)
        results["tripwires"] = tripwire_part(kb)
        save(results, ["tripwires"])
        return
    if sys.argv[1:] == ["tripwire-default"]:
        results = saved_results()
        kb = KnowledgeBase.build([corpus], embedder="minilm", id_field=datasets.CORPUS_IDS)
        results["tripwire_default"] = tripwire_default_part(kb, OUT)
        save(results, ["tripwire-default"])
        return
    if sys.argv[1:] == ["tripwire-rule"]:  # leave-source-out curves of every tripwire rule
        reason = datasets.tripwire_missing_reason()
        if reason:
            console.print(f"[yellow]skipping the tripwire-rule benchmark: {reason}[/]")
            return
        results = saved_results()
        kb = KnowledgeBase.build([corpus], embedder="minilm", id_field=datasets.CORPUS_IDS)
        results["tripwire_rule"] = tripwire_rule_part(kb)
        save(results, ["tripwire-rule"])
        return
    if sys.argv[1:] == ["tripwire-rule-mpnet"]:  # the candidates with MPNet (~10 min, no KB)
        results = saved_results()
        results["tripwire_rule_mpnet"] = tripwire_rule_part(None, "mpnet")
        save(results, ["tripwire-rule-mpnet"])
        return
    if sys.argv[1:] == ["llm-speed"]:
        results = saved_results()
        kb = KnowledgeBase.build([corpus], embedder="minilm", id_field=datasets.CORPUS_IDS)
        kb.save(OUT / "kb-minilm", overwrite=True)
        results.setdefault("synthetic", {})["speed"] = llm_speed.generation_speed(kb)
        save(results, ["llm-speed"])
        return
    if sys.argv[1:] == ["warm-synth"]:  # a cold cache first generates 300 queries (~1 h)
        results = saved_results()
        kb = KnowledgeBase.build([corpus], embedder="minilm", id_field=datasets.CORPUS_IDS)
        kb.save(OUT / "kb-minilm", overwrite=True)
        warm_s = llm_speed.warm_synth_seconds(kb.path)
        results.setdefault("synthetic", {})["warm_synth_s"] = warm_s
        save(results, ["warm-synth"])
        return
    if sys.argv[1:] == ["synthetic"]:
        results = saved_results()
        kb = KnowledgeBase.build([corpus], embedder="minilm", id_field=datasets.CORPUS_IDS)
        kb.save(OUT / "kb-minilm", overwrite=True)
        results["synthetic"] = synthetic_part(kb, calibration, ik_test, ook)
        save(results, ["synthetic", "llm-speed", "warm-synth"])
        return
    results: dict = {"machine": machine_description(), "date": time.strftime("%Y-%m-%d")}
    saved = saved_results()
    for alone in ("near-mpnet", "doc2query"):  # hours, or the LLM: run on their own, kept
        if alone in saved:
            results[alone] = saved[alone]
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
    """Paper Figure 5 (rejection rate per IK ratio), the KS / monitor speed targets, and a
    run folder (bench_out/run) that `ragbound report` turns into a page."""
    from ragbound.report import record_evaluation, record_windows

    part = shift.rejection_rates(guard, datasets.pubmedqa_questions(), ook)
    run_dir = OUT / "run"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    shift.write_rejection(run_dir, part)
    scored = statistic_scores(guard, ik_test, ook["MMLU-Med"])
    report = evaluate(guard, ik_test, ook["MMLU-Med"], samples=300, runs=10, scored=scored)
    record_evaluation(run_dir, report, scored)
    record_windows(run_dir, shift.monitor_log(guard, ik_test, ook["MMLU-Med"], OUT / "log"))
    part["ks_speed"] = shift.ks_speed()
    part["monitor_speed"] = shift.monitor_speed(guard)
    header, rows = shift_rows(part)
    console.print(_rich_table("offline shift test: KS rejection rate per IK ratio", header, rows))
    return part


def shift_rows(part: dict) -> tuple[list[str], list[list[str]]]:
    """One row per IK ratio; a column per statistic x OoK set."""
    columns = [(stat, name) for stat in shift.STATISTICS for name in part[stat]]
    header = ["IK ratio"] + [f"{stat} {name}" for stat, name in columns]
    rows = []
    for i, ratio in enumerate(part["ratios"]):
        row = [f"{ratio:.1f}"]
        row += [f"{part[stat][name]['rows'][i]['rejection_rate']:.3f}" for stat, name in columns]
        rows.append(row)
    return header, rows


def shift_markdown(results: dict) -> list[str]:
    part = results.get("shift")
    if not part:
        return []
    header, rows = shift_rows(part)
    ks, mon = part["ks_speed"], part["monitor_speed"]
    return [
        f"KS rejection rate at alpha = 5%, reference "
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


def near_part(embedder: str = "minilm", corpora: Sequence[str] = near.CORPORA) -> dict:
    """Near out-of-knowledge: COVID-QA halves, PubMedQA half, far sets (benchmarks/near.py)."""
    part = near.near_part(OUT, embedder, corpora)
    if "skipped" in part:
        console.print(f"[yellow]skipping the near out-of-knowledge benchmark: {part['skipped']}[/]")
        return part
    header, rows = near.quality_table(part)
    title = f"near out-of-knowledge, {embedder} (mean ± sd over seeds)"
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


def print_quality(embedder: str, quality: dict) -> None:
    table = Table(title=f"{embedder}: PubMedQA corpus, 500 calibration / 500 test IK queries")
    table.add_column("statistic")
    for dataset in quality:
        for metric in ("AUROC", "AUPRC", "TPR@5%", "DER"):
            table.add_column(f"{dataset} {metric}", justify="right")
    names = next(iter(quality.values()))["statistics"].keys()
    for name in names:
        row = [name]
        for report in quality.values():
            m = report["statistics"][name]
            row += [f"{m[key]:.4f}" for key in ("auroc", "auprc", "tpr_at_5_fpr", "der")]
        table.add_row(*row)
    console.print(table)


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
        header = ["statistic"] + [
            f"{d} {m}" for d in quality for m in ("AUROC", "AUPRC", "TPR@5%FPR", "DER")
        ]
        lines += [f"**{embedder}** ({results[embedder]['n_chunks']} chunks)", ""]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for name in next(iter(quality.values()))["statistics"]:
            row = [name]
            for report in quality.values():
                m = report["statistics"][name]
                row += [f"{m[key]:.3f}" for key in ("auroc", "auprc", "tpr_at_5_fpr", "der")]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
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


# docs/benchmarks.md section name -> (title, its Markdown lines from the saved results)
SECTIONS: dict[str, tuple[str, Callable[[dict], list[str]]]] = {
    "quality": ("Out-of-knowledge detection (paper Table 1b set-up)", quality_markdown),
    "speed": ("Speed and memory", speed_markdown),
    "energy-tau": (
        "Energy's temperature: the paper's tau = 1 and the embedder's",
        energy_tau_markdown,
    ),
    "shift": ("Offline shift test (paper Figure 5) and monitor speed", shift_markdown),
    "ray": ("Ray scoring: workers against one process", ray_scoring.ray_markdown),
    "near": ("Near out-of-knowledge: COVID-QA halves, PubMedQA half, far sets", near.near_markdown),
    "near-mpnet": ("Near out-of-knowledge: MPNet against MiniLM", near.mpnet_markdown),
    "doc2query": (
        "Near out-of-knowledge: questions written at index time (doc2query)",
        doc2query.doc2query_markdown,
    ),
    "lexical-scale": (
        "The combined statistic's word index at a million chunks",
        lexical_scale.lexical_markdown,
    ),
    "approx": ("Approximate search (HNSW) with valid calibration", approx.approx_markdown),
    "million": ("A million chunks on one machine", million.million_markdown),
    "tripwires": ("Tripwires (RAR)", tripwire_markdown),
    "tripwire-default": (
        "Tripwires: the default rule against the paper's",
        tripwire_default_markdown,
    ),
    "tripwire-rule": (
        "Tripwires: every rule's trade-off curve on held-out harmful sources",
        tripwire_rule_markdown,
    ),
    "tripwire-rule-mpnet": (
        "Tripwires: the knowledge-independent candidates with MPNet",
        tripwire_rule_mpnet_markdown,
    ),
    "tripwire-llm": (
        "Tripwires: an LLM judge behind the embedding rule (cascade)",
        tripwire_llm_markdown,
    ),
    "synthetic": ("Synthetic vs real calibration and the baselines", synthetic_markdown),
    "llm-speed": ("Local LLM generation speed", llm_speed_markdown),
    "warm-synth": ("Synthetic queries on a warm cache", warm_synth_markdown),
    "native-guard": (native_guard.TITLE, native_guard.native_guard_markdown),
    "cli-start": (cli_start.TITLE, cli_start.cli_start_markdown),
    "attached": (attached.TITLE, attached.attached_markdown),
    "attached-tripwires": (
        attached_tripwires.TITLE,
        attached_tripwires.attached_tripwires_markdown,
    ),
}


if __name__ == "__main__":
    main()
