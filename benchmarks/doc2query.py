"""Index-time questions from the bundled LLM (doc2query), probed where the combined score fails.

PubMedQA-half stays at 0.976 AUROC with the combined score (target 0.985). The pairs it gets
wrong are in-knowledge questions whose own abstract scores low and near out-of-knowledge
questions with a close twin among the indexed abstracts. A reader of the text is what is
left, and the one offline reader, the bundled 1.5B LLM, took 7 s per abstract here (936 s
for 134 on a quiet machine): too slow in ``check``, but affordable once per document at index
time. Doc2query spends it there: the LLM writes the questions each abstract answers, and a
query's similarity to the nearest of them becomes a signal (the combined score's query
similarity, with the generated questions as its references).

Generating for every indexed abstract of a split (500) would take about an hour, so this probe
asks the deciding question on the pairs that matter. On each split (``BENCH_DOC2QUERY_SEEDS``,
default 0) the combined score is calibrated as ``ragbound calibrate --statistic combined``
does; the ``BENCH_DOC2QUERY_HARD`` (default 40) in-knowledge test questions it scores most
out of knowledge, and as many out-of-knowledge ones it scores least, are the hard set. The LLM
writes 3 questions (``PROMPT``) for every abstract a hard question could match: an
in-knowledge question's own abstract and its 2 nearest, an out-of-knowledge question's 2
nearest. Questions that point at their source ("the study") are dropped, as ``synth`` drops
them. A hard question's signal is its similarity to the nearest generated question of those
abstracts, which is what it would be with every abstract covered unless a farther abstract's
question came closer. Adding the signal to the score can only reorder the hard pairs if it
ranks them the right way: an AUROC above 0.5 on the hard set (in-knowledge higher). Replies
are cached (the LLM response cache), so a rerun is free. ``BENCH_DOC2QUERY_LLM=openai:MODEL``
asks a stronger model on an OpenAI-compatible server instead (``RAGBOUND_LLM_BASE_URL``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks import datasets
from benchmarks.doc import markdown_table
from benchmarks.near import Split, knowledge_bases, pubmedqa_split
from benchmarks.settings import int_list, int_value
from ragbound.detect import Guard
from ragbound.knowledge import KnowledgeBase
from ragbound.llm import (
    LLM,
    CachedLLM,
    GenerationParams,
    LLMError,
    ParseError,
    Request,
    ResponseCache,
    make_llm,
    run_batch,
)
from ragbound.llm.base import parallel_limit
from ragbound.llm.parse import parse_json_object
from ragbound.llm.prompts import Prompt, parse_prompt
from ragbound.stats import auroc
from ragbound.synth.queries import SOURCE_REFERENCE

# a server LLM answers several calls at once; the local one runs them one by one
SERVER_CONCURRENCY = 4
# the words of an abstract the LLM reads (PubMedQA abstracts run to about 250)
ABSTRACT_WORDS = 300
NEAREST_DOCUMENTS = 2
PARAMS = GenerationParams(temperature=0.0, max_tokens=120, seed=0)
PROMPT = """---
id: doc-questions
version: 1
description: The questions one document answers, as users of a search system would type them; JSON list.
variables: [context]
---
# system
You read one document from a collection and list the questions it answers, as the people who use a search system over the collection would type them. Each question:
- is a short, natural question, such as "Does X improve Y in Z?" or "Is X a risk factor for Y?";
- names its specific subject in full words (the condition, method, substance, group, product, place or event);
- never points at a source: no "the study", "this study", "the document", "the authors", "described" or "mentioned".

# user
Document:
---
{context}
---
Write 3 different questions this document answers: first the main question it sets out to answer, then two about its other findings. Reply with only this JSON object:
{{"questions": ["...", "...", "..."]}}
"""  # noqa: E501 (a prompt's lines are its text)


@dataclass(frozen=True)
class HardQuestion:
    """A question the combined score misjudges, its score, and the abstracts it may match."""

    text: str
    score: float
    abstracts: tuple[str, ...]


def doc_prompt() -> Prompt:
    return parse_prompt(PROMPT, Path(__file__))


def nearest_abstracts(kb: KnowledgeBase, queries: Sequence[str], n: int) -> list[list[str]]:
    """Per query, the pmids of the ``n`` nearest distinct abstracts (by chunk similarity)."""
    # an abstract is a few chunks: 16 per wanted abstract finds n distinct ones
    hits = kb.search(list(queries), min(16 * n, len(kb)))
    found = []
    for row in hits.indices:
        pmids: list[str] = []
        for chunk_row in row:
            pmid = kb.chunks[int(chunk_row)].metadata["pmid"]
            if pmid not in pmids:
                pmids.append(pmid)
        found.append(pmids[:n])
    return found


def hard_questions(split: Split, n_hard: int) -> tuple[list[HardQuestion], list[HardQuestion]]:
    """The ``n_hard`` in-knowledge test questions the combined score ranks most out of
    knowledge, and the ``n_hard`` out-of-knowledge ones it ranks least."""
    guard = Guard.calibrate(split.kb, split.calibration, statistic="combined")
    outside = split.outside["PubMedQA half"]
    score_in = np.array([v.score for v in guard.check_many(split.inside, evidence=0)])
    score_out = np.array([v.score for v in guard.check_many(outside, evidence=0)])
    pmid_of = {q: p for p, q in datasets.pubmedqa_questions_by_pmid().items()}
    rows_in, rows_out = np.argsort(-score_in)[:n_hard], np.argsort(score_out)[:n_hard]
    near_in = nearest_abstracts(split.kb, [split.inside[i] for i in rows_in], NEAREST_DOCUMENTS)
    near_out = nearest_abstracts(split.kb, [outside[i] for i in rows_out], NEAREST_DOCUMENTS)
    hard_in = [
        HardQuestion(
            split.inside[i], float(score_in[i]), _own_first(pmid_of[split.inside[i]], near)
        )
        for i, near in zip(rows_in, near_in, strict=True)
    ]
    hard_out = [
        HardQuestion(outside[i], float(score_out[i]), tuple(near))
        for i, near in zip(rows_out, near_out, strict=True)
    ]
    return hard_in, hard_out


def _own_first(own: str, nearest: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([own, *nearest]))


def usable_questions(reply: str) -> list[str]:
    """The questions of one reply that do not point at their source; [] when it does not parse."""
    try:
        questions = parse_json_object(reply).get("questions")
    except ParseError:
        return []
    if not isinstance(questions, list):
        return []
    texts = (" ".join(q.split()) for q in questions if isinstance(q, str))
    return [q for q in texts if q and not SOURCE_REFERENCE.search(q)]


def generate(llm: LLM, abstracts: dict[str, str]) -> dict[str, list[str]]:
    """pmid -> the usable questions the LLM writes for that abstract (first ABSTRACT_WORDS)."""
    prompt = doc_prompt()
    pmids = list(abstracts)
    requests = [
        Request(
            messages=prompt.render(context=" ".join(abstracts[p].split()[:ABSTRACT_WORDS])),
            params=PARAMS,
            prompt_id=prompt.id,
            prompt_version=prompt.version,
        )
        for p in pmids
    ]
    concurrency = parallel_limit(llm, SERVER_CONCURRENCY)
    results = run_batch(llm, requests, concurrency=concurrency, progress=True)
    return {
        p: usable_questions(r.response.text) if r.ok and r.response is not None else []
        for p, r in zip(pmids, results, strict=True)
    }


def question_similarity(
    kb: KnowledgeBase, hard: Sequence[HardQuestion], generated: dict[str, list[str]]
) -> np.ndarray:
    """Each hard question's similarity to the nearest generated question of its abstracts
    (NaN when none of them has a usable question)."""
    texts = list(dict.fromkeys(q for questions in generated.values() for q in questions))
    row = {text: i for i, text in enumerate(texts)}
    sims = np.full(len(hard), np.nan)
    if not texts:
        return sims
    # every hard question against every generated one, each embedded once
    table = kb.embed([h.text for h in hard]) @ kb.embed(texts).T
    for i, h in enumerate(hard):
        columns = [row[q] for p in h.abstracts for q in generated.get(p, [])]
        if columns:
            sims[i] = float(table[i, columns].max())
    return sims


def probe_split(kb: KnowledgeBase, llm: LLM, seed: int, n_hard: int) -> dict:
    """One split's hard set, generated questions, and the signal's AUROC on it."""
    split = pubmedqa_split(kb, seed)
    hard_in, hard_out = hard_questions(split, n_hard)
    abstracts = datasets.pubmedqa_abstracts()
    needed = list(dict.fromkeys(p for h in hard_in + hard_out for p in h.abstracts))
    started = time.perf_counter()
    generated = generate(llm, {p: abstracts[p] for p in needed})
    seconds = time.perf_counter() - started
    sim_in = question_similarity(split.kb, hard_in, generated)
    sim_out = question_similarity(split.kb, hard_out, generated)
    keep_in, keep_out = ~np.isnan(sim_in), ~np.isnan(sim_out)
    score_in = np.array([h.score for h in hard_in])[keep_in]
    score_out = np.array([h.score for h in hard_out])[keep_out]
    return {
        "seed": seed,
        "n_in": int(keep_in.sum()),
        "n_out": int(keep_out.sum()),
        "abstracts": len(needed),
        "questions": sum(len(q) for q in generated.values()),
        "generation_s": seconds,
        # the combined score's AUROC on its own hard set (low by construction)
        "combined_auroc": auroc(score_in, score_out),
        # higher similarity = more in knowledge: negate for the higher = OoK convention
        "similarity_auroc": auroc(-sim_in[keep_in], -sim_out[keep_out]),
        "similarity_in": float(np.mean(sim_in[keep_in])),
        "similarity_out": float(np.mean(sim_out[keep_out])),
    }


def doc2query_llm() -> LLM:
    """The LLM that writes the questions, replies cached: ``BENCH_DOC2QUERY_LLM`` (an
    ``--llm`` spec such as ``openai:MODEL``, with its server in ``RAGBOUND_LLM_BASE_URL``),
    else the bundled local model. SystemExit with the reason when it cannot be had."""
    spec = os.environ.get("BENCH_DOC2QUERY_LLM", "local")
    try:
        if spec == "local":
            from benchmarks.near_synth import make_local_llm  # OMP_NUM_THREADS threads

            return make_local_llm()
        return CachedLLM(make_llm(spec), ResponseCache())
    except LLMError as exc:
        raise SystemExit(f"BENCH_DOC2QUERY_LLM={spec!r}: {exc}") from None


def doc2query_part(out: Path, llm: LLM) -> dict:
    """Every seed's probe (BENCH_DOC2QUERY_SEEDS, default 0; BENCH_DOC2QUERY_HARD, 40)."""
    seeds = int_list("BENCH_DOC2QUERY_SEEDS", "0", 0, "0,1,2")
    n_hard = int_value("BENCH_DOC2QUERY_HARD", "40", 2, "40")
    kbs, _ = knowledge_bases(out, "minilm", ["PubMedQA"])
    splits = [probe_split(kbs["PubMedQA"], llm, seed, n_hard) for seed in seeds]
    return {"model": llm.model_id, "n_hard": n_hard, "splits": splits}


def doc2query_markdown(results: dict) -> list[str]:
    part = results.get("doc2query")
    if not part:
        return []
    header = [
        "split",
        "hard in / out",
        "abstracts (questions)",
        "generation",
        "combined AUROC",
        "question-similarity AUROC",
        "mean similarity in / out",
    ]
    rows = [
        [
            f"seed {s['seed']}",
            f"{s['n_in']} / {s['n_out']}",
            f"{s['abstracts']} ({s['questions']})",
            f"{s['generation_s']:.0f} s",
            f"{s['combined_auroc']:.3f}",
            f"{s['similarity_auroc']:.3f}",
            f"{s['similarity_in']:.3f} / {s['similarity_out']:.3f}",
        ]
        for s in part["splits"]
    ]
    return [
        "",
        f"PubMedQA-half, the {part['n_hard']} in-knowledge and {part['n_hard']} out-of-knowledge "
        f"questions the combined score ranks worst on each split; {part['model']} writes 3 "
        "questions per abstract they could match (`python -m benchmarks.run doc2query`; "
        "generation is 0 s when the replies were cached). A question-similarity AUROC above 0.5 "
        "would mean the signal ranks the hard pairs the right way; below 0.5 it ranks them the "
        "wrong way, and adding it to the score cannot help.",
        "",
        *markdown_table(header, rows),
        "",
    ]
