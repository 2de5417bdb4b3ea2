"""Synthetic calibration without grouping metadata (issue 16, part 6).

The PubMedQA corpus loaded as one record per abstract paragraph, ``{id: "PMID-i", text}``, with
no document field: each record is its own document. Three parts:

1. ``structure``: does :func:`infer_structure` find the abstracts? Groups found against the
   true pmids (no LLM).
2. ``check``: the ``calibrate --real-queries`` check on real data (no LLM). Calibration sets
   whose scores run high, as detail-asking synthetic questions do, are made by mixing a share
   of MMLU-Med questions (near out-of-knowledge) into real calibration questions; for each
   share: the held-out false-positive rate and MMLU-Med power at alpha = 0.05, and how often
   the check warns (level 0.05: KS or the exceedance test, each at 0.025; and each test alone)
   given 20 or 50 real questions, over seeded draws.
3. ``llm`` (slow: the local LLM, ~10 s per call on an idle 2-core machine, minutes when it is
   busy): FPR on held-out real in-knowledge questions and MMLU-Med power at alpha = 0.05, for
   calibration on (real) the real calibration half, (a) ``synth`` as it was (each record
   alone), (b) the inferred document structure, (c) (b) + few-shot from 20 real questions
   (``synth-query-users``); plus the check's verdict against those 20 questions. Replies are
   cached (``~/.cache/ragbound/llm``), so a rerun or a larger ``BENCH_SYNTH_STRUCTURE_N``
   reuses them.

``python -m benchmarks.synth_structure [structure|check|llm ...]`` (default: all three), or
``python -m benchmarks.run synth-structure``. ``BENCH_SYNTH_STRUCTURE_N`` (default 100)
synthetic questions per condition. Results go to bench_out/synth_structure.json and the
``synth-structure`` section of docs/benchmarks.md (the parts run this time).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import datasets
from benchmarks.doc import markdown_table, write_section
from ragbound.artifacts import write_json
from ragbound.detect import Guard
from ragbound.detect.config import DEFAULTS
from ragbound.detect.evaluate import split_queries
from ragbound.detect.guard import search_in_batches
from ragbound.detect.shift import MIN_REFERENCE
from ragbound.knowledge import KnowledgeBase
from ragbound.llm import LLM
from ragbound.stats import EmpiricalNull, bonferroni_alpha, calibration_mismatch
from ragbound.synth.check import CHECK_LEVEL, compare_with_real
from ragbound.synth.queries import USERS_PROMPT, context_structure, generate_queries
from ragbound.synth.structure import DocumentStructure, infer_structure

OUT = datasets.REPO / "bench_out"
ALPHA = 0.05
N_EXAMPLES = 20
MIX_SHARES = (0.0, 0.1, 0.2, 0.3)
CHECK_SIZES = (20, 50)
CHECK_DRAWS = 200
# the check's verdict, then each of its two tests alone (at half the level, as in the check)
CHECK_TESTS = ("check", "ks", "exceedance")
REAL_HALF = "real calibration half"
N_CALIBRATION_MIX = 300


def write_paragraph_corpus(path: Path) -> tuple[Path, list[str]]:
    """The paragraphs as ``{id, text}`` records (no pmid field); also each record's pmid."""
    pmids = []
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        abstracts = json.loads((datasets.data_root() / "pubmedqa" / "ori_pqal.json").read_text())
        for pmid, record in abstracts.items():
            for i, context in enumerate(record["CONTEXTS"]):
                out.write(json.dumps({"id": f"{pmid}-{i}", "text": context}) + "\n")
                pmids.append(pmid)
    return path, pmids


def structure_part(kb: KnowledgeBase, pmids: list[str]) -> dict:
    """How the inferred documents compare with the true abstracts."""
    start = time.perf_counter()
    found = infer_structure(kb.chunks)
    seconds = time.perf_counter() - start
    # a record's line number names its true abstract (a long paragraph may be several chunks)
    truth = [pmids[int(c.doc_id.rsplit(":", 1)[1]) - 1] for c in kb.chunks]
    pairs = set(zip(found.keys, truth, strict=True))
    return {
        "label": found.label,
        "n_chunks": len(kb),
        "n_found": len(set(found.keys)),
        "n_true": len(set(pmids)),
        # every found document is one abstract and every abstract one found document
        "exact": len(pairs) == len(set(found.keys)) == len(set(pmids)),
        "seconds": seconds,
    }


def check_part(
    kb: KnowledgeBase,
    real: list[str],
    ik_test: list[str],
    near: list[str],
    *,
    n_calibration: int = N_CALIBRATION_MIX,
    sizes: tuple[int, ...] = CHECK_SIZES,
    draws: int = CHECK_DRAWS,
    k: int = DEFAULTS.k,
) -> dict:
    """FPR, power and the check's warning rate for calibrations mixed with near-OoK questions:
    each draw takes ``n_calibration`` of ``real`` (a share replaced by ``near``) and checks it
    against ``sizes`` other real questions."""
    guard = Guard.calibrate(kb, real, k=k)
    detector = guard.detector(None, ALPHA)
    score = {
        "real": detector.score(guard.calibration.similarities),
        "test": detector.score(search_in_batches(kb, ik_test, k).similarities),
        "near": detector.score(search_in_batches(kb, near, k).similarities),
    }
    rng = np.random.default_rng(0)
    rows = []
    for share in MIX_SHARES:
        n_near = round(share * n_calibration)
        fprs, powers = [], []
        warnings = {(size, test): 0 for size in sizes for test in CHECK_TESTS}
        for _ in range(draws):
            order = rng.permutation(len(score["real"]))
            cal = np.concatenate(
                [
                    score["real"][order[: n_calibration - n_near]],
                    rng.choice(score["near"], n_near, replace=False),
                ]
            )
            critical = EmpiricalNull(cal).critical_value(ALPHA)
            fprs.append(np.mean(score["test"] >= critical))
            powers.append(np.mean(score["near"] >= critical))
            unused = order[n_calibration:]  # real questions no draw calibrates on
            for size in sizes:
                sample = score["real"][rng.choice(unused, size, replace=False)]
                mismatch = calibration_mismatch(cal, sample, critical, CHECK_LEVEL)
                warned = (mismatch.differ, mismatch.ks.shifted, mismatch.exceedance.shifted)
                for test, warns in zip(CHECK_TESTS, warned, strict=True):
                    warnings[size, test] += warns
        rows.append(
            {
                "near_share": share,
                "fpr": float(np.mean(fprs)),
                "fpr_sd": float(np.std(fprs)),
                "power": float(np.mean(powers)),
                **{
                    f"warn_{size}" + ("" if test == "check" else f"_{test}"): count / draws
                    for (size, test), count in warnings.items()
                },
            }
        )
    return {
        "statistic": detector.statistic,
        "draws": draws,
        "n_calibration": n_calibration,
        "sizes": list(sizes),
        "rows": rows,
    }


def llm_part(
    kb: KnowledgeBase,
    llm: LLM,
    real: list[str],
    ik_test: list[str],
    near: list[str],
    n: int,
    k: int = DEFAULTS.k,
) -> dict:
    """Calibrate on real and on each synthetic condition; FPR, power and the check."""
    examples = [{"question": q} for q in real[:N_EXAMPLES]]
    conditions = {
        "(a) each record alone (synth before)": {
            "structure": DocumentStructure("document", tuple(c.doc_id for c in kb.chunks))
        },
        "(b) inferred documents": {"structure": context_structure(kb, "document")},
        f"(c) (b) + few-shot from {N_EXAMPLES} real questions": {
            "structure": context_structure(kb, "document"),
            "examples": examples,
            "prompt_id": USERS_PROMPT,
        },
    }
    sets = {REAL_HALF: {"queries": real, "seconds": 0.0, "report": {}}}
    for label, options in conditions.items():
        start = time.perf_counter()
        queries, report = generate_queries(kb, llm, n=n, seed=0, progress=True, **options)
        sets[label] = {
            "queries": [q.query for q in queries],
            "seconds": time.perf_counter() - start,
            "report": report.model_dump(),
        }
    rows = {}
    for label, entry in sets.items():
        # the check's real questions must be ones the calibration did not see: the few-shot
        # examples for the synthetic rows (as a user would pass them), held-out ones for the
        # real half, which holds the examples
        checked = ik_test[-N_EXAMPLES:] if label == REAL_HALF else real[:N_EXAMPLES]
        rows[label] = _calibration_row(kb, entry["queries"], ik_test, near, checked, k)
        rows[label] |= {"seconds": entry["seconds"], "report": entry["report"]}
        rows[label]["examples"] = entry["queries"][:5]
    return {"n": n, "rows": rows}


def _calibration_row(
    kb: KnowledgeBase,
    queries: list[str],
    ik_test: list[str],
    near: list[str],
    real: list[str],
    k: int,
) -> dict:
    guard = Guard.calibrate(kb, queries, alpha=ALPHA, k=k)
    detector = guard.detector()
    critical = float(detector.critical_value_)
    scores_test = detector.score(search_in_batches(kb, ik_test, guard.k).similarities)
    scores_near = detector.score(search_in_batches(kb, near, guard.k).similarities)
    enough = len(queries) >= MIN_REFERENCE  # the KS check needs this many
    return {
        "n": len(queries),
        "fpr": float(np.mean(scores_test >= critical)),
        "power": float(np.mean(scores_near >= critical)),
        "median_score": float(np.median(detector.decision_scores_)),
        "median_held_out": float(np.median(scores_test)),
        "check": compare_with_real(guard, real).model_dump(mode="json") if enough else None,
    }


def markdown(results: dict) -> str:
    lines = [
        "PubMedQA abstract paragraphs as records `{id: PMID-i, text}` (no document field), "
        "MiniLM, alpha = 0.05, default statistic; near out-of-knowledge: MMLU-Med.",
        "",
    ]
    found = results.get("structure")
    if found:
        lines += [
            f"Document structure found on its own: `{found['label']}`, {found['n_found']} "
            f"documents for {found['n_true']} abstracts ({found['n_chunks']} paragraphs), "
            f"exactly the abstracts: {found['exact']}; {found['seconds'] * 1000:.0f} ms.",
            "",
        ]
    check = results.get("check")
    if check:
        header = ["near-OoK share in calibration", "held-out FPR (sd)", "MMLU-Med power"]
        header += [
            f"check warns, {size} real (KS alone / exceedance alone)" for size in check["sizes"]
        ]
        rows = [
            [
                f"{row['near_share']:.0%}",
                f"{row['fpr']:.3f} ({row['fpr_sd']:.3f})",
                f"{row['power']:.3f}",
                *[_warn_rates(row, size) for size in check["sizes"]],
            ]
            for row in check["rows"]
        ]
        lines += [
            f"`calibrate --real-queries` check (level {CHECK_LEVEL}: KS or the exceedance test, "
            f"each at {bonferroni_alpha(CHECK_LEVEL, 2):g}; {check['statistic']} scores), "
            f"{check['n_calibration']} calibration queries of which a share are MMLU-Med "
            f"questions (scores that run high, as detail-asking synthetic questions do), "
            f"{check['draws']} seeded draws. The 0% row is the check's false-warning rate.",
            "",
            *markdown_table(header, rows),
            "",
        ]
    llm = results.get("llm")
    if llm:
        header = ["calibration", "n", "held-out FPR", "MMLU-Med power", "median score"]
        header += ["check: KS D (p); real reaching the critical value (p)", "warns"]
        header += ["generation s (cached replies: ~0)"]
        rows = []
        for label, row in llm["rows"].items():
            c = row["check"]
            rows.append(
                [
                    label,
                    str(row["n"]),
                    f"{row['fpr']:.3f}",
                    f"{row['power']:.3f}",
                    f"{row['median_score']:.4f}",
                    _check_cell(c) if c else "n < 20",
                    ("yes" if c["differ"] else "no") if c else "",
                    f"{row['seconds']:.0f}",
                ]
            )
        lines += [
            f"Synthetic calibration with the local LLM, {llm['n']} questions per condition "
            f"(check against the {N_EXAMPLES} real questions used as few-shot examples; for "
            f"the real half, which holds them, against {N_EXAMPLES} held-out ones). "
            f"Median score: the calibration queries' median {DEFAULTS.statistic}; held-out "
            f"real questions: {next(iter(llm['rows'].values()))['median_held_out']:.4f}.",
            "",
            *markdown_table(header, rows),
        ]
    return "\n".join(lines)


def _check_cell(check: dict) -> str:
    cell = f"{check['ks_statistic']:.3f} ({check['p_value']:.2g})"
    if check.get("exceedance_p_value") is None:  # a check from before the exceedance test
        return cell
    return f"{cell}; {check['real_fpr']:.0%} ({check['exceedance_p_value']:.2g})"


def _warn_rates(row: dict, size: int) -> str:
    """The check's warning rate, then each test's alone (rows from before: the check only)."""
    alone = [row.get(f"warn_{size}_{test}") for test in CHECK_TESTS[1:]]
    if None in alone:
        return f"{row[f'warn_{size}']:.3f}"
    return f"{row[f'warn_{size}']:.3f} ({alone[0]:.3f} / {alone[1]:.3f})"


def main(parts: list[str] | None = None) -> dict:
    parts = parts or sys.argv[1:] or ["structure", "check", "llm"]
    reason = datasets.missing_reason()
    if reason:
        print(f"skipping: {reason}")
        return {}
    corpus, pmids = write_paragraph_corpus(OUT / "pubmedqa_paragraphs_nodoc.jsonl")
    kb_dir = OUT / "kb-paragraphs-nodoc"
    if kb_dir.is_dir():
        kb = KnowledgeBase.load(kb_dir)
    else:
        kb = KnowledgeBase.build([corpus], embedder="minilm", id_field=datasets.CORPUS_IDS)
        kb.save(kb_dir)
    real, ik_test = split_queries(datasets.pubmedqa_questions(), 0.5, seed=0)
    near = datasets.mmlu_med_questions()
    results_path = OUT / "synth_structure.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    if "structure" in parts:
        results["structure"] = structure_part(kb, pmids)
    if "check" in parts:
        results["check"] = check_part(kb, real, ik_test, near)
    if "llm" in parts:
        from ragbound.llm import CachedLLM, ResponseCache, make_llm

        n = int(os.environ.get("BENCH_SYNTH_STRUCTURE_N", "100"))
        llm = CachedLLM(make_llm("local"), ResponseCache())
        results["llm"] = llm_part(kb, llm, real, ik_test, near, n)
    write_json(results_path, results)
    shown = {part: results[part] for part in ("structure", "check", "llm") if part in results}
    write_section(
        "synth-structure", "Synthetic calibration without a document field", markdown(shown)
    )
    print(markdown(shown))
    return results


if __name__ == "__main__":
    main()
