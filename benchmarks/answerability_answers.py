"""What the gate changes in a RAG system's answers: the bundled LLM answers the questions of
:mod:`benchmarks.answerability_judge`'s subsets from the gate's retrieved chunks, and each
gate lets some of those answers through (slow: the bundled local LLM).

Per corpus with reference answers (PubMedQA: the yes/no/maybe label; COVID-QA: the answer span;
CLAP NQ: the annotator's answer; BANKING77-OOS has none and is skipped), the split of seed 0,
``BENCH_ANSWERS_N`` questions (default 25) of the in-knowledge test and left-out sets (and CLAP
NQ's unanswerable ones), the first of the judge benchmark's seeded sample, so its judge replies
are reused. The target is the bundled Qwen2.5-Coder 1.5B with the leave-one-out benchmark's
basic system prompt (``bench-system-basic``: answer, with no instruction to abstain: the RAG
system that makes things up) and the 3 nearest chunks as numbered facts. Rows: no gate; gated
by relevance alone (the default); relevance + coverage; relevance + judge (the corpora of
``BENCH_ANSWER_JUDGE_CORPORA``). A reply is *correct* when it holds the reference: PubMedQA's
label is the first yes/no/maybe word of the reply (the question asks for it first); for the
free-text references (COVID-QA, CLAP NQ) the same model, as evaluator, puts YES above NO on
"does the reply give the reference answer" (``bench-eval-agrees``, one token). A reply that
says the facts do not hold the answer is a decline (:data:`DECLINES`), not an answer.
Columns: correct among the answers given (in-scope and left-out questions pooled, Wilson 95%
intervals), left-out questions not attempted (gate declined or the model did), in-scope
questions answered.

Replies are cached on disk (``~/.cache/ragbound/llm``). Raw numbers go to
bench_out/answerability_answers.json, the table to the ``answerability-answers`` section of
docs/benchmarks.md (``answerability-answers render``: the section again).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks import answerability, answerability_judge, datasets, near
from benchmarks.doc import markdown_table, measured_or_saved, write_section
from benchmarks.settings import int_value
from ragbound.artifacts import write_json
from ragbound.bench.context import render_context
from ragbound.bench.models import ContextItem
from ragbound.detect import Guard
from ragbound.detect.judge import ALTERNATIVES, no_probability
from ragbound.embedders import load_dense_embedder
from ragbound.gate import Decision, Gate
from ragbound.llm import CachedLLM, GenerationParams, Request, ResponseCache, make_llm, run_batch
from ragbound.llm.prompts import load_prompt
from ragbound.stats.metrics import wilson_interval

RAW = answerability.OUT / "answerability_answers.json"
TITLE = "Answerability: the bundled LLM's answers, gated"
PROMPT_ID = "bench-system-basic"
EVALUATOR_ID = "bench-eval-agrees"
FACTS = 3
ANSWER_TOKENS = 96
LABEL_ASK = " Start your answer with yes, no or maybe."
DECLINES = re.compile(
    r"i don'?t know|not (?:provided|mentioned|stated|specified|given|included) in|"
    r"(?:facts?|context)(?: \d+)? (?:do|does) not (?:provide|mention|contain|specify|say)|"
    r"no (?:information|mention) (?:about|of|on)",
    re.IGNORECASE,
)
LABELS = re.compile(r"\b(yes|no|maybe)\b", re.IGNORECASE)
NO_GATE = "no gate"
COVERAGE = "relevance + coverage"
JUDGE = answerability_judge.WITH_JUDGE
RELEVANCE = answerability_judge.RELEVANCE
CHOICES = (NO_GATE, RELEVANCE, COVERAGE, JUDGE)
SCORED_SETS = ("inside", "left_out")
ANSWERED = ("PubMedQA", answerability.COVID, answerability.CLAP)  # corpora with references
NO_ANSWERS = "no reference answers (an intent classification set)"
NOT_MEASURED = "not measured: the run was stopped before it"


def references(corpus: str) -> tuple[dict[str, str], bool] | None:
    """The corpus's reference answers (question -> reference) and whether they are labels
    (yes/no/maybe) rather than free text; None for a corpus without answers (BANKING77-OOS)."""
    if corpus == "PubMedQA":
        return datasets.pubmedqa_decisions(), True
    if corpus == answerability.COVID:
        return datasets.covidqa_answers(), False
    if corpus == answerability.CLAP:
        return datasets.clapnq_answers(), False
    return None


def label_correct(reply: str, reference: str) -> bool:
    """True when the reply's first yes/no/maybe word is the reference label."""
    found = LABELS.search(reply)
    return found is not None and found.group(1).lower() == reference.lower()


def agreeing(llm: CachedLLM, items: Sequence[tuple[str, str, str]]) -> list[bool]:
    """For each (question, reference, reply): True when the evaluator (``bench-eval-agrees``,
    one token) puts YES above NO, i.e. the reply gives the reference answer."""
    prompt = load_prompt(EVALUATOR_ID)
    params = GenerationParams(max_tokens=2, top_logprobs=ALTERNATIVES)
    requests = [
        Request(
            messages=prompt.render(question=q, reference=ref, model_answer=reply),
            params=params,
            prompt_id=prompt.id,
            prompt_version=prompt.version,
        )
        for q, ref, reply in items
    ]
    found = []
    for result in run_batch(llm, requests, progress=True):
        if result.response is None:
            raise result.error or RuntimeError("the evaluator returned nothing")
        found.append(no_probability(result.response.top_logprobs, result.response.text) < 0.5)
    return found


@dataclass(frozen=True)
class Reply:
    """The target model's reply to one question: what it said and how it was judged."""

    declined: bool
    correct: bool


def answer(
    llm: CachedLLM, corpus: str, decisions: Sequence[Decision], refs: dict[str, str]
) -> list[Reply]:
    """The target model's reply to each decided question, from its 3 nearest chunks, judged
    against the question's reference (a label by its first word, free text by the evaluator)."""
    found = references(corpus)
    assert found is not None
    labels = found[1]
    prompt = load_prompt(PROMPT_ID)
    requests = [
        Request(
            messages=prompt.render(
                question=d.query + (LABEL_ASK if labels else ""), context=facts(d)
            ),
            params=GenerationParams(max_tokens=ANSWER_TOKENS),
            prompt_id=prompt.id,
            prompt_version=prompt.version,
        )
        for d in decisions
    ]
    texts = []
    for result in run_batch(llm, requests, progress=True):
        if result.response is None:
            raise result.error or RuntimeError("the target model returned nothing")
        texts.append(result.response.text)
    declined = [DECLINES.search(text) is not None for text in texts]
    pairs = [(d.query, refs.get(d.query, ""), t) for d, t in zip(decisions, texts, strict=True)]
    if labels:
        right = [label_correct(reply, ref) for _, ref, reply in pairs]
    else:
        right = agreeing(llm, pairs)
    return [
        Reply(gave_up, ok and not gave_up and bool(ref))
        for gave_up, ok, (_, ref, _) in zip(declined, right, pairs, strict=True)
    ]


def facts(decision: Decision) -> str:
    """The decision's nearest chunks as the numbered facts the target model reads."""
    items = [
        ContextItem(number=n.rank, qa_id=n.chunk_id, text=n.text)
        for n in decision.neighbours[:FACTS]
    ]
    return render_context(items)


def gates(split: answerability.LeaveOutSplit, calibration: list[str], judged: bool) -> dict:
    """Each gate of the rows, calibrated on the same questions (the judge's on request)."""
    found = {
        RELEVANCE: Gate(Guard.calibrate(split.kb, calibration)),
        COVERAGE: Gate(Guard.calibrate(split.kb, calibration, answerability="coverage")),
    }
    if judged:
        guard = Guard.calibrate(split.kb, calibration, answerability="judge", llm="local")
        found[JUDGE] = Gate(guard)
    return found


def corpus_rows(corpus: str, embedder: near.CachedEmbedder, llm: CachedLLM, sizes: tuple) -> dict:
    """Each row's answers on one corpus: per set, which questions each gate let through and
    the target model's replies."""
    n, n_cal, judged = sizes
    refs = references(corpus)
    assert refs is not None
    kb, _ = answerability.knowledge_base(corpus, embedder)
    split = answerability.SPLITS[corpus](kb, answerability_judge.SEED)
    calibration = answerability_judge.sample(split.calibration, n_cal, answerability_judge.SEED)
    seed = answerability_judge.SEED + 1
    sets = {name: answerability_judge.sample(qs, n, seed) for name, qs in split.sets().items()}
    made = gates(split, calibration, judged)
    out: dict = {"sets": {}}
    for name, questions in sets.items():
        decided = {choice: gate.decide_many(questions) for choice, gate in made.items()}
        replies = answer(llm, corpus, decided[RELEVANCE], refs[0])
        passed = {c: [d.action == "answer" for d in ds] for c, ds in decided.items()}
        passed[NO_GATE] = [True] * len(questions)
        out["sets"][name] = {
            "passed": passed,
            "declined": [r.declined for r in replies],
            "correct": [r.correct for r in replies],
        }
        print(f"{corpus} {name}: {sum(r.correct for r in replies)} correct", flush=True)
    return out


def answers_part() -> dict:
    n = int_value("BENCH_ANSWERS_N", "25", 1, "25")
    n_cal = int_value("BENCH_ANSWER_JUDGE_CALIBRATION", "60", 20, "60")
    judged_corpora = set(answerability_judge.corpora())
    results: dict = {"n": n, "n_calibration": n_cal, "corpora": {}, "skipped": {}}
    embedder = near.CachedEmbedder(
        load_dense_embedder(answerability.SPEC), answerability.CACHE / "query-cache"
    )
    llm = CachedLLM(make_llm("local"), ResponseCache())
    began = time.perf_counter()
    for corpus in answerability.CORPORA:
        reason = answerability.missing_reason(corpus)
        if reason is None and references(corpus) is None:
            reason = NO_ANSWERS
        if reason:
            results["skipped"][corpus] = reason
            write_json(RAW, results)
            continue
        sizes = (n, n_cal, corpus in judged_corpora)
        results["corpora"][corpus] = corpus_rows(corpus, embedder, llm, sizes)
        results["total_s"] = time.perf_counter() - began
        write_json(RAW, results)
    return results


def share(hits: int, n: int) -> str:
    """``hits / n`` with its Wilson 95% interval (empty for n = 0)."""
    if n == 0:
        return ""
    low, high = wilson_interval(hits, n)
    return f"{hits / n:.2f} [{low:.2f}, {high:.2f}] (n {n})"


def row(found: dict, choice: str) -> list[str] | None:
    """One choice's cells on one corpus (None: the choice did not run there)."""
    sets = found["sets"]
    if any(choice not in sets[s]["passed"] for s in SCORED_SETS if s in sets):
        return None
    correct = given = 0
    for name in SCORED_SETS:
        got = sets[name]
        for passed, declined, right in zip(
            got["passed"][choice], got["declined"], got["correct"], strict=True
        ):
            given += passed and not declined
            correct += passed and right
    cells = [share(correct, given)]
    for name, attempted in (("left_out", False), ("unanswerable", False), ("inside", True)):
        if name not in sets:
            cells.append("")
            continue
        got = sets[name]
        tried = [p and not d for p, d in zip(got["passed"][choice], got["declined"], strict=True)]
        hits = sum(tried) if attempted else len(tried) - sum(tried)
        cells.append(share(hits, len(tried)))
    return cells


def answers_markdown(results: dict) -> list[str]:
    """The section's lines (empty when nothing ran)."""
    if not results.get("corpora"):
        return []
    header = [
        "corpus",
        "gate",
        "correct among answers given (in-scope + left-out)",
        "left-out not attempted",
        "CLAP NQ unanswerable not attempted",
        "in-scope answered",
    ]
    rows = []
    ran = [c for c in answerability.CORPORA if c in results["corpora"]]
    for corpus in ran:
        found = results["corpora"][corpus]
        for choice in CHOICES:
            cells = row(found, choice)
            if cells is not None:
                rows.append([corpus, choice, *cells])
    return [
        f"Seed 0's split; {results['n']} questions per set (the first of the judge subset's "
        f"sample); every gate calibrated on the same {results['n_calibration']} questions at "
        "alpha = 0.05. The target: the bundled Qwen2.5-Coder 1.5B, the `bench-system-basic` "
        "prompt (no instruction to abstain), the 3 nearest chunks as numbered facts, greedy, "
        "96 tokens at most. Correct: PubMedQA's label is the reply's first yes/no/maybe word; "
        "COVID-QA and CLAP NQ: the same model as evaluator (`bench-eval-agrees`, the "
        'probability of YES above NO\'s on "does the reply give the reference answer"; a '
        "1.5B evaluator: read the rows against each other, not as absolute accuracy). A reply "
        "saying the facts do not hold the answer counts as not attempted. Wilson 95% "
        "intervals. The whole run took "
        f"{results.get('total_s', 0.0) / 60:.1f} min.",
        "",
        *markdown_table(header, rows),
        "",
        *(f"- {corpus}: {why}" for corpus, why in missing(results).items()),
    ]


def missing(results: dict) -> dict[str, str]:
    """Each zoo corpus without rows and why: skipped (its reason), or the run stopped first."""
    skipped = results.get("skipped", {})
    return {
        corpus: "skipped, " + skipped[corpus]
        if corpus in skipped
        else ("skipped, " + NO_ANSWERS if corpus not in ANSWERED else NOT_MEASURED)
        for corpus in answerability.CORPORA
        if corpus not in results["corpora"]
    }


def main(argv: Sequence[str] = ()) -> dict:
    """Run the answers, save their raw numbers and write the section; ``render``: the section
    again from the saved raw numbers."""
    results = measured_or_saved(argv, RAW, answers_part, "answerability_answers")
    lines = answers_markdown(results)
    if lines:
        written = write_section("answerability-answers", TITLE, "\n".join(lines))
        print(f"raw numbers: {RAW}; tables written to {written}")
    print("\n".join(lines) if lines else "nothing ran")
    return results
