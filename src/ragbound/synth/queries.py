"""Synthetic in-knowledge queries (paper 1, section 3.2): an LLM writes a question per chunk.

Chunks are sampled without replacement (seeded), each rendered into the ``synth-query``
prompt with in-context examples, and the reply's ``question`` field is kept when it parses,
is not degenerate and is not a duplicate. Every kept query records where it came from.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from ragbound.artifacts import write_jsonl
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.llm import (
    LLM,
    GenerationParams,
    ParseError,
    Request,
    builtin_examples,
    format_examples,
    load_prompt,
    parse_json_object,
    run_batch,
)

MIN_WORDS = 4
# Chunks are cut to this many words in the prompt so it fits small local models' contexts.
CONTEXT_WORDS = 300


class SyntheticQuery(BaseModel):
    """One generated query and its provenance."""

    query: str
    chunk_id: str
    doc_id: str
    prompt_id: str
    prompt_version: int
    model: str
    created_at: str
    cached: bool = False


class SynthReport(BaseModel):
    """What was asked for, what was kept, and why the rest was dropped."""

    requested: int
    kept: int
    dropped: dict[str, int] = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list, description="first few failures, raw")


def generate_queries(
    kb: KnowledgeBase,
    llm: LLM,
    *,
    n: int = 300,
    seed: int = 0,
    examples: Sequence[dict[str, Any]] | None = None,
    prompt_id: str = "synth-query",
    params: GenerationParams | None = None,
    concurrency: int = 4,
    progress: bool = False,
) -> tuple[list[SyntheticQuery], SynthReport]:
    """Generate up to ``n`` in-knowledge queries from ``n`` sampled chunks.

    ``examples`` are in-context examples (dicts with at least ``question``); the default is
    the paper's PubMed set (Table 13). Use examples in your users' own style: the generated
    questions copy it.
    """
    if n < 1:
        raise InputError(f"n must be at least 1, got {n}")
    prompt = load_prompt(prompt_id)
    shown = format_examples(list(examples) if examples else builtin_examples("pubmed"))
    params = params or GenerationParams(temperature=0.7, max_tokens=160, seed=seed)
    rows = np.random.default_rng(seed).permutation(len(kb))[: min(n, len(kb))]
    requests = [
        Request(
            messages=prompt.render(examples=shown, context=_context(kb.chunk_at(row).text)),
            params=params.model_copy(update={"seed": (params.seed or 0) + int(row)}),
            prompt_id=prompt.id,
            prompt_version=prompt.version,
        )
        for row in rows
    ]
    results = run_batch(llm, requests, concurrency=concurrency, progress=progress)
    kept, dropped, errors, seen = [], Counter(), [], set()
    for row, result in zip(rows, results, strict=True):
        if not result.ok or result.response is None:
            dropped["call failed"] += 1
            errors.append(str(result.error))
            continue
        reason, query = _extract(result.response.text, seen)
        if reason:
            dropped[reason] += 1
            if reason == "unparseable":
                errors.append(result.response.text[:300])
            continue
        chunk = kb.chunk_at(row)
        kept.append(
            SyntheticQuery(
                query=query,
                chunk_id=chunk.id,
                doc_id=chunk.doc_id,
                prompt_id=prompt.id,
                prompt_version=prompt.version,
                model=result.response.model,
                created_at=result.response.created_at,
                cached=result.response.cached,
            )
        )
    report = SynthReport(
        requested=len(rows), kept=len(kept), dropped=dict(dropped), errors=errors[:5]
    )
    return kept, report


def _context(text: str) -> str:
    words = text.split()
    return " ".join(words[:CONTEXT_WORDS])


def _extract(reply: str, seen: set[str]) -> tuple[str | None, str]:
    """(reason to drop or None, the question)."""
    try:
        question = parse_json_object(reply).get("question")
    except ParseError:
        return "unparseable", ""
    if not isinstance(question, str) or not question.strip():
        return "no question field", ""
    question = " ".join(question.split())
    if len(question.split()) < MIN_WORDS:
        return "degenerate (too short)", question
    key = _normalise(question)
    if key in seen:
        return "duplicate", question
    seen.add(key)
    return None, question


def _normalise(question: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", question.lower()).strip()


def save_queries(path: Path, queries: Sequence[SyntheticQuery]) -> None:
    """Write a query file (JSONL, field ``query``) with provenance per line, atomically."""
    write_jsonl(path, (q.model_dump(mode="json") for q in queries))
