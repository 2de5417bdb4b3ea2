"""Leave-one-out abstention benchmark on PolicyBench (KnowOrNot), with the bundled local model.

`make bench-abstention`. The four domains' curated QA pairs (331, already filtered by the
paper's authors) are imported as four knowledge sets; each question is asked with its own pair
left out. The bundled Qwen2.5-Coder-1.5B is the target and the evaluator. A full run (331
questions x 4 strategies, each answer judged twice) would take days on 2 CPU cores, so this is
a documented subset, seeded:

- run "retrieval": BENCH_ABSTENTION_N questions per domain (default 5) x direct, rag, hyde;
- run "long-context": the same number of questions of the two smallest domains (MediShield, 29
  pairs; BTT, 55) with every other pair in the prompt (the larger two exceed what a 2-core CPU
  can read per question in reasonable time);
- system prompts: the paper's conservative (A.4) and basic ones (BENCH_ABSTENTION_PROMPTS,
  comma-separated ids, overrides).

Then both evaluators (abstention, factuality) judge every answer, and a warm rerun of the whole
benchmark into fresh run directories is timed (target < 60 s). Writes bench_out/abstention.json
and its section of docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from benchmarks.datasets import data_root
from benchmarks.doc import markdown_table, write_section
from ragbound.artifacts import write_json
from ragbound.bench.config import BenchConfig, ModelSpec
from ragbound.bench.evaluate import evaluate_run
from ragbound.bench.experiment import run_experiment
from ragbound.bench.qa import import_qa
from ragbound.bench.results import (
    BenchResults,
    CellResult,
    bench_results,
    manifest_groups,
    write_results,
)
from ragbound.llm import CachedLLM, GenerationParams, ResponseCache
from ragbound.llm.local import LocalLlama

OUT = Path("bench_out")
DOMAINS = {
    "MediShield": "medishield_QA.json",
    "BTT": "BTT_QA.json",
    "CPF": "CPF_filtered_qa.json",
    "ICA": "ICA_filtered_qa.json",
}
LONG_CONTEXT_DOMAINS = ("MediShield", "BTT")
PER_DOMAIN = int(os.environ.get("BENCH_ABSTENTION_N", "5"))
PROMPTS = os.environ.get(
    "BENCH_ABSTENTION_PROMPTS", "bench-system-conservative,bench-system-basic"
).split(",")
PROGRESS = sys.stderr.isatty()  # bars on a terminal, nothing in a log file
TITLE = "Leave-one-out abstention on PolicyBench (`make bench-abstention`)"
RATE_HEADER = [
    "strategy",
    "system prompt",
    "domain",
    "n",
    "abstention",
    "factuality (non-abstentions)",
]
N_CTX = 8192  # the long-context prompts of BTT reach about 4,000 tokens


def missing_reason() -> str | None:
    folder = data_root() / "policybench" / "questions"
    return None if folder.is_dir() else f"PolicyBench not found at {folder}"


def import_sets(folder: Path) -> dict[str, Path]:
    """Each domain's curated pairs as a QA-set file (ids = PolicyBench's identifiers)."""
    source = data_root() / "policybench" / "questions"
    paths = {}
    for domain, name in DOMAINS.items():
        qa = import_qa(source / name, id_field="identifier", name=domain)
        paths[domain] = folder / f"{domain}.json"
        write_json(paths[domain], qa.model_dump(mode="json"))
    return paths


def configs(sets: dict[str, Path], root: Path) -> dict[str, BenchConfig]:
    common = {
        "models": [ModelSpec(spec="local")],
        "prompts": PROMPTS,
        "limit": PER_DOMAIN,
        "seed": 0,
        "params": GenerationParams(temperature=0.0, max_tokens=200, seed=0),
    }
    return {
        "retrieval": BenchConfig(
            knowledge=list(sets.values()),
            strategies=["direct", "rag", "hyde"],
            out=root / "retrieval",
            **common,
        ),
        "long-context": BenchConfig(
            knowledge=[sets[d] for d in LONG_CONTEXT_DOMAINS],
            strategies=["long_context"],
            out=root / "long-context",
            **common,
        ),
    }


def run_all(llm: LocalLlama, root: Path) -> dict:
    """Every run, then every evaluation; timings of each step."""
    sets = import_sets(root / "sets")
    timings: dict = {}
    for name, config in configs(sets, root).items():
        summary = run_experiment(config, llms={"local": llm}, progress=PROGRESS)
        start = time.perf_counter()
        evaluator = CachedLLM(llm, ResponseCache())
        evaluation = evaluate_run(config.out, evaluator, progress=PROGRESS)
        timings[name] = {
            "run": summary.model_dump(mode="json"),
            "evaluate_s": time.perf_counter() - start,
            "evaluation": evaluation.model_dump(mode="json"),
        }
    return timings


def results(root: Path) -> dict[str, BenchResults]:
    found = {}
    for name in ("retrieval", "long-context"):
        found[name] = bench_results(root / name, groups=manifest_groups(root / name))
        write_results(root / name, found[name])
    return found


def main() -> None:
    reason = missing_reason()
    if reason:
        print(f"skipping the abstention benchmark: {reason}")
        return
    llm = LocalLlama(n_ctx=N_CTX)
    llm.load()
    root = OUT / "abstention"
    shutil.rmtree(root, ignore_errors=True)
    start = time.perf_counter()
    cold = run_all(llm, root)
    cold_s = time.perf_counter() - start
    warm_root = OUT / "abstention-warm"
    shutil.rmtree(warm_root, ignore_errors=True)
    start = time.perf_counter()
    run_all(llm, warm_root)  # every reply from the response cache
    warm_s = time.perf_counter() - start
    shutil.rmtree(warm_root, ignore_errors=True)
    found = results(root)
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "per_domain": PER_DOMAIN,
        "prompts": PROMPTS,
        "cold_s": cold_s,
        "warm_rerun_s": warm_s,
        "steps": cold,
        "results": {name: r.model_dump(mode="json") for name, r in found.items()},
    }
    (OUT / "abstention.json").write_text(json.dumps(report, indent=2))
    body = "\n".join(markdown(report, found))
    print(body)
    print(f"written to {write_section('abstention', TITLE, body)}")


def markdown(report: dict, found: dict[str, BenchResults]) -> list[str]:
    """The rates table of every cell, per domain folded away, and the timing line."""
    cells = [cell for result in found.values() for e in result.evaluators for cell in e.cells]
    groups = [cell for result in found.values() for e in result.evaluators for cell in e.by_group]
    return [
        f"{report['per_domain']} questions per domain, target and evaluator = the bundled "
        "Qwen2.5-Coder-1.5B (local), 95% Wilson intervals.",
        "",
        *markdown_table(RATE_HEADER, [_rate_row(cell) for cell in cells]),
        "",
        "<details><summary>per domain</summary>",
        "",
        *markdown_table(RATE_HEADER, [_rate_row(cell) for cell in groups]),
        "",
        "</details>",
        "",
        _timing_line(report),
    ]


def _rate_row(cell: CellResult) -> list[str]:
    return [
        cell.strategy,
        cell.system_prompt,
        cell.group or "all",
        str(cell.n_inputs),
        cell.abstention.text(),
        cell.factuality.text(),
    ]


def _timing_line(report: dict) -> str:
    runs = [step["run"] for step in report["steps"].values()]
    wall = sum(r["wall_seconds"] for r in runs)
    llm = sum(r["llm_seconds"] for r in runs)
    share = (wall - llm) / wall if wall else 0.0
    return (
        f"Cold run {report['cold_s']:.0f} s (leave-one-out runs {wall:.0f} s, of which "
        f"pipeline overhead beside the LLM calls {share:.1%}; target < 5%). Warm rerun of the "
        f"whole benchmark into fresh run directories: {report['warm_rerun_s']:.1f} s "
        "(target < 60 s)."
    )


if __name__ == "__main__":
    main()
