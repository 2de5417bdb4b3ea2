"""Synthetic vs real calibration (paper 1, Table 4), step by step.

Calibration sets on the PubMedQA set-up: the real in-knowledge calibration queries, and 300
synthetic queries from the bundled local model after each fix:

1. the paper's prompt (Table 10) with the Table 13 examples on one chunk, exact duplicates
   dropped (the plain first attempt);
2. the self-contained-question prompt (``synth-query`` v2), still one chunk;
3. + the whole document as context (the abstract the sampled paragraph belongs to);
4. + dropping questions that point at their source ("the study") or copy an example;
5. + dropping near duplicates: the default of ``ragbound synth``.

For every statistic: the critical value at alpha = 5% from each calibration set, the actual
false-positive rate on the held-out real in-knowledge queries, and TPR and DER on MMLU-Med and
TruthfulQA (10 balanced runs of 300 per side, as in the main table).

LLM replies are cached (``~/.cache/ragbound/llm``): the first run generates (10 to 13 s per
call on 2 cores, about an hour per step), reruns are free. ``BENCH_SYNTH_STEPS`` picks steps.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ragbound.detect import Guard
from ragbound.detect.retrieval import search_in_batches
from ragbound.knowledge import KnowledgeBase
from ragbound.llm import LLM
from ragbound.stats import STATISTICS, balanced_runs
from ragbound.synth.queries import QueryFilters, SyntheticQuery, generate_queries

ALPHA = 0.05
N_SYNTHETIC = 300
NO_FILTERS = QueryFilters(
    source_references=False, example_copies=False, near_duplicate_jaccard=None
)


# The corpus holds one record per abstract paragraph; an abstract is the paragraphs of a pmid.
GROUP_BY = "pmid"


@dataclass(frozen=True)
class Step:
    """One synthetic calibration set: a label, the prompt, the context and the filters."""

    label: str
    prompt_id: str
    context: Literal["document", "chunk"]
    filters: QueryFilters


STEPS = (
    Step("1. paper prompt (Table 10), one chunk", "synth-query-paper", "chunk", NO_FILTERS),
    Step("2. self-contained-question prompt, one chunk", "synth-query", "chunk", NO_FILTERS),
    Step("3. + whole document as context", "synth-query", "document", NO_FILTERS),
    Step(
        "4. + drop source references, example copies",
        "synth-query",
        "document",
        QueryFilters(near_duplicate_jaccard=None),
    ),
    Step("5. + drop near duplicates (default)", "synth-query", "document", QueryFilters()),
)


def synthetic_sets(
    kb: KnowledgeBase, llm: LLM, steps: Sequence[Step] = STEPS, n: int = N_SYNTHETIC
) -> dict[str, dict]:
    """Generate (or read from the cache) each step's synthetic queries, with its report."""
    sets = {}
    for step in steps:
        start = time.perf_counter()
        queries, report = generate_queries(
            kb,
            llm,
            n=n,
            seed=0,
            prompt_id=step.prompt_id,
            filters=step.filters,
            context=step.context,
            group_by=GROUP_BY,
            progress=True,
        )
        sets[step.label] = {
            "queries": [q.query for q in queries],
            "report": report.model_dump(),
            "seconds": time.perf_counter() - start,
            "generic": generic_share(queries),
        }
    return sets


def generic_share(queries: Sequence[SyntheticQuery]) -> float:
    """Share of questions that point at their source (what the issue counted by hand)."""
    from ragbound.synth.queries import SOURCE_REFERENCE

    return sum(bool(SOURCE_REFERENCE.search(q.query)) for q in queries) / max(1, len(queries))


def calibration_table(
    kb: KnowledgeBase,
    calibrations: dict[str, list[str]],
    ik_test: list[str],
    ook: dict[str, list[str]],
    k: int = 32,
) -> dict[str, dict]:
    """Critical value, held-out FPR and TPR/DER per OoK set, per calibration set and statistic."""
    sims_test = search_in_batches(kb, ik_test, k, progress=True).similarities
    sims_ook = {
        name: search_in_batches(kb, queries, k, progress=True).similarities
        for name, queries in ook.items()
    }
    table: dict[str, dict] = {}
    for label, queries in calibrations.items():
        guard = Guard.calibrate(kb, queries, k=k)
        table[label] = {"n": len(queries)}
        for statistic in STATISTICS:
            detector = guard.detector(statistic, ALPHA)
            critical = float(detector.critical_value_)
            scores_in = detector.score(sims_test)
            row = {"critical_value": critical, "fpr": float(np.mean(scores_in >= critical))}
            for name, sims in sims_ook.items():
                runs = balanced_runs(
                    scores_in,
                    detector.score(sims),
                    samples=300,
                    runs=10,
                    seed=0,
                    threshold=critical,
                )
                row[name] = {"tpr": runs["tpr_at_5_fpr"], "der": runs["der"]}
            table[label][statistic] = row
    return table
