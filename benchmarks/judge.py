"""LLM relevance judge (paper 1, Table 11): the LLM baseline the GoF test is compared against.

Benchmark code, not part of the library: only ``make bench`` (benchmarks/baselines.py) uses it.

For each query the top-k chunks are retrieved, cut to ``context_words`` words in all, and the
``relevance-judge`` prompt asks the model for step-by-step feedback and a relevance score in
[0, 1] (higher = more relevant, i.e. more in-knowledge; the opposite direction of an
out-of-knowledge score). A reply without a usable score is retried, then reported with its
raw text; a score is never guessed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from ragbound.detect.retrieval import search_in_batches
from ragbound.knowledge import KnowledgeBase
from ragbound.llm import LLM, GenerationParams, ParseError, load_prompt, parse_json_object
from ragbound.llm.batch import run_parsed

JUDGE_PROMPT = "relevance-judge"
# The paper truncates long chunks to fit the judge's context; 400 words suit a 4k-token model.
CONTEXT_WORDS = 400


class RelevanceJudgement(BaseModel):
    """One query's judgement: ``score`` in [0, 1] (1 = highly relevant) or the error."""

    query: str
    score: float | None = Field(default=None, description="relevance in [0, 1]; None on error")
    feedback: str = ""
    model: str = ""
    prompt_id: str = JUDGE_PROMPT
    prompt_version: int = 0
    attempts: int = 0
    cached: bool = False
    seconds: float = Field(default=0.0, description="model time for this query, s")
    error: str | None = None


def parse_judgement(reply: str) -> tuple[float, str]:
    """(score, feedback) from a judge reply; ParseError unless the score is a number in [0, 1]."""
    found = parse_json_object(reply)
    score = _as_score(found.get("score"))
    if score is None:
        raise ParseError(f"the score {found.get('score')!r} is not a number in [0, 1]", raw=reply)
    feedback = found.get("feedback", "")
    return score, feedback if isinstance(feedback, str) else str(feedback)


def _as_score(value: Any) -> float | None:
    if isinstance(value, list) and len(value) == 1:  # "[0.8]": the template's brackets copied
        value = value[0]
    try:
        score = float(value)
    except (TypeError, ValueError):
        return None
    return score if math.isfinite(score) and 0.0 <= score <= 1.0 else None


def judge_relevance(
    kb: KnowledgeBase,
    llm: LLM,
    queries: Sequence[str],
    *,
    k: int = 3,
    context_words: int = CONTEXT_WORDS,
    params: GenerationParams | None = None,
    concurrency: int = 4,
    progress: bool = False,
) -> list[RelevanceJudgement]:
    """Ask ``llm`` how relevant each query is to its top-``k`` retrieved chunks.

    Judgements come back in input order; a query whose reply never parses carries ``error``
    (with the raw reply) and ``score=None``. Wrap ``llm`` in a CachedLLM to make reruns free.
    """
    prompt = load_prompt(JUDGE_PROMPT)
    rows = search_in_batches(kb, queries, k, progress=progress).indices
    variables = [
        {"query": query, "context": _context(kb, row_ids, context_words)}
        for query, row_ids in zip(queries, rows, strict=True)
    ]
    params = params or GenerationParams(temperature=0.0, max_tokens=256, seed=0)
    results = run_parsed(
        llm,
        prompt,
        variables,
        parse_judgement,
        params=params,
        concurrency=concurrency,
        progress=progress,
    )
    judgements = []
    for query, result in zip(queries, results, strict=True):
        base = {"query": query, "prompt_version": prompt.version}
        if result.parsed is None:
            judgements.append(RelevanceJudgement(**base, error=str(result.error)))
            continue
        (score, feedback), response = result.parsed.value, result.parsed.response
        judgements.append(
            RelevanceJudgement(
                **base,
                score=score,
                feedback=feedback,
                model=response.model,
                attempts=result.parsed.attempts,
                cached=response.cached,
                seconds=response.seconds,
            )
        )
    return judgements


def _context(kb: KnowledgeBase, rows: Sequence[int], words: int) -> str:
    """The retrieved chunks, best first, cut to ``words`` words in all."""
    text = "\n\n".join(kb.chunk_at(int(row)).text for row in rows)
    return " ".join(text.split(" ")[:words])
