"""Synthetic in-knowledge queries (paper 1, section 3.2): an LLM writes a question per chunk.

Chunks are sampled without replacement (seeded), each rendered into a prompt with in-context
examples, and the reply's ``question`` field is kept when it parses and passes the filters:
not too short, not pointing at its source ("the study described in the context"), not a
duplicate or near duplicate of a kept question. Chunks are drawn in rounds until ``n``
questions are kept or the request budget is spent. Every kept query records where it came from.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from ragbound.artifacts import write_jsonl
from ragbound.corpus.provenance import LLM_SOURCE
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.llm import (
    LLM,
    GenerationParams,
    LLMResponse,
    ParseError,
    Prompt,
    Request,
    Result,
    builtin_examples,
    format_examples,
    load_prompt,
    parse_json_object,
    run_batch,
)
from ragbound.records import Record, case_hint, field_list, read_records
from ragbound.synth.structure import DocumentStructure, field_structure, infer_structure

MIN_WORDS = 4
DEFAULT_PROMPT = "synth-query"
# Few-shot from the users' own questions (``synth --examples FILE``).
USERS_PROMPT = "synth-query-users"
# Chunks shorter than this (a stray "None." paragraph, a heading) are not sampled: there is
# nothing to ask about, and a small model invents a question instead.
MIN_CHUNK_WORDS = 20
# The context shown is cut to this many words so it fits small local models' windows.
CONTEXT_WORDS = 400
# Examples shown per request; a longer list is sampled per request (see shown_examples).
MAX_SHOWN_EXAMPLES = 8
# Two questions whose word sets overlap this much (Jaccard) ask the same thing.
NEAR_DUPLICATE_JACCARD = 0.8
# Requests are capped at this multiple of n, so a model that fails every filter stops.
REQUEST_BUDGET = 2.0
# Questions that point at the chunk instead of naming their subject. Real users have not seen
# the chunk, and such questions retrieve weakly, which loosens the calibrated critical value.
_SOURCE = (
    r"study|studies|context|passage|text|document|article|paper|abstract|chunk|excerpt|authors?"
)
_WORK = _SOURCE + r"|report|research|investigation|section|review|trial|survey|analysis|experiment"
SOURCE_REFERENCE = re.compile(
    rf"\bthe\s+(?:{_SOURCE})\b"
    rf"|\b(?:this|these|that|given|above|provided|following)\s+(?:[\w-]+\s+){{0,3}}?(?:{_WORK})\b"
    r"|\b(?:described|mentioned|according to)\b"
    r"|\bwhat (?:is|was|are|were) the (?:main |primary |key )?"
    r"(?:objective|purpose|aim|goal|focus|hypothesis|conclusion|finding)s?\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z0-9]+")

DROP_UNPARSEABLE = "unparseable"
DROP_NO_QUESTION = "no question field"
DROP_SHORT = "degenerate (too short)"
DROP_SOURCE = "refers to its source"
DROP_EXAMPLE = "copies an example"
DROP_DUPLICATE = "duplicate"
DROP_NEAR_DUPLICATE = "near duplicate"
DROP_CALL_FAILED = "call failed"


class SyntheticQuery(BaseModel):
    """One generated query and its provenance."""

    query: str
    chunk_id: str
    doc_id: str
    prompt_id: str
    prompt_version: int
    context: str = Field(
        default="", description="how the context's document was found (DocumentStructure.label)"
    )
    model: str
    source: str = Field(default="", description="who wrote it: llm:MODEL")
    created_at: str
    cached: bool = False


class SynthReport(BaseModel):
    """What was asked for, how many calls were made, what was kept, and why the rest was not."""

    wanted: int = Field(description="questions asked for (n)")
    requested: int = Field(description="LLM calls made, one per sampled chunk")
    kept: int
    context: str = Field(default="", description="how documents were found for the context")
    dropped: dict[str, int] = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list, description="first few failures, raw")


@dataclass(frozen=True)
class QueryFilters:
    """Which filters run. Each can be switched off, e.g. to measure its effect."""

    source_references: bool = True
    example_copies: bool = True
    near_duplicate_jaccard: float | None = NEAR_DUPLICATE_JACCARD
    min_words: int = MIN_WORDS


@dataclass
class _Selection:
    """Questions kept so far and the drop counts (exact duplicates are always dropped)."""

    filters: QueryFilters
    examples: list[set[str]] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    word_sets: list[set[str]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    dropped: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)

    def consider(self, result: Result) -> str | None:
        """The question if it passes every filter, else None (and the reason is counted)."""
        if not result.ok or result.response is None:
            return self._drop(DROP_CALL_FAILED, str(result.error))
        reply = result.response.text
        try:
            question = parse_json_object(reply).get("question")
        except ParseError:
            return self._drop(DROP_UNPARSEABLE, reply[:300])
        if not isinstance(question, str) or not question.strip():
            return self._drop(DROP_NO_QUESTION)
        question = " ".join(question.split())
        reason = self._reason(question)
        if reason:
            return self._drop(reason)
        self.kept.append(question)
        return question

    def _reason(self, question: str) -> str | None:
        words = _WORD.findall(question.lower())
        if len(words) < self.filters.min_words:
            return DROP_SHORT
        if self.filters.source_references and SOURCE_REFERENCE.search(question):
            return DROP_SOURCE
        word_set = set(words)
        if self.filters.example_copies and _near_any(
            word_set, self.examples, NEAR_DUPLICATE_JACCARD
        ):
            return DROP_EXAMPLE
        key = " ".join(words)
        if key in self.seen:
            return DROP_DUPLICATE
        limit = self.filters.near_duplicate_jaccard
        if limit is not None and _near_any(word_set, self.word_sets, limit):
            return DROP_NEAR_DUPLICATE
        self.seen.add(key)
        self.word_sets.append(word_set)
        return None

    def _drop(self, reason: str, raw: str | None = None) -> None:
        self.dropped[reason] += 1
        if raw is not None:
            self.errors.append(raw)


def _word_set(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _near_any(words: set[str], others: list[set[str]], limit: float) -> bool:
    """True when the Jaccard overlap of ``words`` with any of ``others`` reaches ``limit``."""
    return any(len(words & other) / len(words | other) >= limit for other in others)


def generate_queries(
    kb: KnowledgeBase,
    llm: LLM,
    *,
    n: int = 300,
    seed: int = 0,
    examples: Sequence[dict[str, Any]] | None = None,
    prompt_id: str = DEFAULT_PROMPT,
    params: GenerationParams | None = None,
    filters: QueryFilters | None = None,
    context: Literal["document", "chunk"] = "document",
    group_by: str | None = None,
    structure: DocumentStructure | None = None,
    max_requests: int | None = None,
    concurrency: int = 4,
    progress: bool = False,
) -> tuple[list[SyntheticQuery], SynthReport]:
    """Generate ``n`` in-knowledge queries, one per sampled chunk, from ``llm``.

    ``examples`` are in-context examples (dicts with at least ``question``; default: the
    paper's PubMed set); the questions copy their style, so give your users' own (with
    ``prompt_id=USERS_PROMPT``, see :func:`default_prompt`). The model sees the sampled chunk
    with its document's neighbours up to ``CONTEXT_WORDS`` words (``context="document"``), or
    the chunk alone (``"chunk"``, as the paper); documents come from ``structure``, else the
    ``group_by`` metadata field, else :func:`~ragbound.synth.structure.infer_structure`.
    Chunks are drawn in a seeded order until ``n`` questions pass the filters or
    ``max_requests`` calls (default ``REQUEST_BUDGET * n``) are spent; the report says why.
    """
    if n < 1:
        raise InputError(f"n must be at least 1, got {n}")
    if max_requests is not None and max_requests < 1:
        raise InputError(f"max_requests must be at least 1, got {max_requests}")
    prompt = load_prompt(prompt_id)
    examples = list(examples) if examples else builtin_examples("pubmed")
    params = params or GenerationParams(temperature=0.7, max_tokens=160, seed=seed)
    structure = structure or context_structure(kb, context, group_by)
    windows = ContextWindows.from_structure(kb, structure)
    order = _sample_order(kb, seed)
    budget = min(len(order), max_requests or math.ceil(REQUEST_BUDGET * n))
    selection = _Selection(
        filters or QueryFilters(), examples=[_word_set(str(e["question"])) for e in examples]
    )
    queries: list[SyntheticQuery] = []
    drawn = 0
    while len(queries) < n and drawn < budget:
        rows = order[drawn : drawn + _round_size(n - len(queries), len(queries), drawn, budget)]
        drawn += len(rows)
        texts = [windows.text(row) for row in rows]
        requests = synth_requests(texts, rows, prompt=prompt, examples=examples, params=params)
        results = run_batch(llm, requests, concurrency=concurrency, progress=progress)
        for row, result in zip(rows, results, strict=True):
            if len(queries) == n:
                break
            question = selection.consider(result)
            if question is not None and result.response is not None:
                queries.append(
                    _provenance(question, kb, int(row), prompt, result.response, structure)
                )
    report = SynthReport(
        wanted=n,
        context=structure.label,
        requested=drawn,
        kept=len(queries),
        dropped=dict(selection.dropped),
        errors=selection.errors[:5],
    )
    return queries, report


def context_structure(
    kb: KnowledgeBase, context: Literal["document", "chunk"], group_by: str | None = None
) -> DocumentStructure:
    """The documents whose chunks make a sampled chunk's context: each chunk alone
    (``context="chunk"``), the ``group_by`` metadata field, or found on its own
    (:func:`ragbound.synth.structure.infer_structure`)."""
    if context == "chunk":
        return DocumentStructure("chunk", tuple(range(len(kb))))
    if group_by is None:
        return infer_structure(kb.chunks)
    return _grouped_by_field(kb, group_by)


def _grouped_by_field(kb: KnowledgeBase, group_by: str) -> DocumentStructure:
    present: set[str] = set()
    for chunk in kb.chunks:
        if group_by in chunk.metadata:
            return field_structure(kb.chunks, group_by)
        present.update(chunk.metadata)
    raise InputError(
        f"no chunk has the metadata field {group_by!r} to group by (fields present: "
        f"{field_list(sorted(present))})" + case_hint((group_by,), present)
    )


def _sample_order(kb: KnowledgeBase, seed: int) -> np.ndarray:
    """Chunk rows in a seeded random order, without chunks too short to ask about (unless
    every chunk is that short)."""
    order = np.random.default_rng(seed).permutation(len(kb))
    long_enough = [row for row in order if kb.chunk_at(row).n_words >= MIN_CHUNK_WORDS]
    return np.array(long_enough) if long_enough else order


def _round_size(missing: int, kept: int, drawn: int, budget: int) -> int:
    """Chunks to draw next: the missing count scaled by the keep rate seen so far."""
    keep_rate = kept / drawn if drawn else 1.0
    return max(1, min(budget - drawn, math.ceil(missing / max(keep_rate, 0.25))))


class ContextWindows:
    """The text shown for a sampled chunk: the chunk and its neighbours in the same document.

    Documents are the chunks sharing ``group_by`` metadata (``None``: the same document id),
    or the groups of a :class:`DocumentStructure` (:meth:`from_structure`), in knowledge-base
    order. The window grows from the sampled chunk, one neighbour at a time on alternate
    sides, while it stays within ``CONTEXT_WORDS`` words.
    """

    def __init__(self, kb: KnowledgeBase, group_by: str | None) -> None:
        if group_by is None:
            structure = DocumentStructure("document", tuple(c.doc_id for c in kb.chunks))
        else:
            structure = _grouped_by_field(kb, group_by)
        self._index(kb, structure)

    @classmethod
    def from_structure(cls, kb: KnowledgeBase, structure: DocumentStructure) -> ContextWindows:
        """Windows over the documents of ``structure`` (one key per chunk row)."""
        windows = cls.__new__(cls)
        windows._index(kb, structure)
        return windows

    def _index(self, kb: KnowledgeBase, structure: DocumentStructure) -> None:
        if len(structure.keys) != len(kb):
            raise InputError(
                f"the document structure has {len(structure.keys)} keys for {len(kb)} chunks"
            )
        self.kb = kb
        self.structure = structure
        self.members: dict[object, list[int]] = {}
        self.group_of: list[object] = list(structure.keys)
        self.position: list[int] = []  # each row's index among its document's members
        for row, key in enumerate(structure.keys):
            members = self.members.setdefault(key, [])
            self.position.append(len(members))
            members.append(row)

    def text(self, row: int) -> str:
        """The window around ``row``, chunks in order, cut to ``CONTEXT_WORDS`` words."""
        members = self.members[self.group_of[int(row)]]
        at = self.position[int(row)]
        low, high = at, at + 1
        words = self.kb.chunk_at(row).n_words
        grew = True
        while grew:
            grew = False
            for side in (high, low - 1):  # next chunk first, then the previous one
                if 0 <= side < len(members) and not low <= side < high:
                    size = self.kb.chunk_at(members[side]).n_words
                    if words + size <= CONTEXT_WORDS:
                        words += size
                        low, high = min(low, side), max(high, side + 1)
                        grew = True
        text = "\n\n".join(self.kb.chunk_at(member).text for member in members[low:high])
        return _cut(text, CONTEXT_WORDS)


def synth_requests(
    texts: Sequence[str],
    rows: Sequence[int] | np.ndarray,
    *,
    prompt: Prompt,
    examples: Sequence[dict[str, Any]],
    params: GenerationParams,
) -> list[Request]:
    """One request per sampled chunk: the prompt with the examples and the chunk's context
    text; the seed is ``params.seed + row``, so each chunk's call is reproducible whatever
    else is in the batch. With more than ``MAX_SHOWN_EXAMPLES`` examples, each request shows
    its own sample of them (seeded the same way), so every example's style is used."""
    requests = []
    for text, row in zip(texts, rows, strict=True):
        seed = (params.seed or 0) + int(row)
        shown = _example_values(prompt, shown_examples(examples, seed))
        requests.append(
            Request(
                messages=prompt.render(**shown, context=text),
                params=params.model_copy(update={"seed": seed}),
                prompt_id=prompt.id,
                prompt_version=prompt.version,
            )
        )
    return requests


def shown_examples(examples: Sequence[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """All the examples when they are few, else a seeded sample of ``MAX_SHOWN_EXAMPLES``
    (in file order), so a long file of user questions fits a small model's context."""
    if len(examples) <= MAX_SHOWN_EXAMPLES:
        return list(examples)
    picked = np.random.default_rng(seed).choice(len(examples), MAX_SHOWN_EXAMPLES, replace=False)
    return [examples[i] for i in sorted(picked)]


def _cut(text: str, words: int) -> str:
    """``text`` cut to its first ``words`` words; paragraph breaks are kept."""
    paragraphs, left = [], words
    for paragraph in text.split("\n\n"):
        kept = paragraph.split()[:left]
        if not kept:
            break
        paragraphs.append(" ".join(kept))
        left -= len(kept)
    return "\n\n".join(paragraphs)


def _example_values(prompt: Prompt, examples: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Fill the prompt's example variable: full JSON objects, or a list of the questions."""
    values = {}
    if "examples" in prompt.variables:
        values["examples"] = format_examples(examples)
    if "sample_questions" in prompt.variables:
        values["sample_questions"] = "\n".join(f"- {e['question']}" for e in examples)
    return values


def _provenance(
    question: str,
    kb: KnowledgeBase,
    row: int,
    prompt: Prompt,
    response: LLMResponse,
    structure: DocumentStructure,
) -> SyntheticQuery:
    chunk = kb.chunk_at(row)
    return SyntheticQuery(
        query=question,
        chunk_id=chunk.id,
        doc_id=chunk.doc_id,
        prompt_id=prompt.id,
        prompt_version=prompt.version,
        context=structure.label,
        model=response.model,
        source=f"{LLM_SOURCE}{response.model}",
        created_at=response.created_at,
        cached=response.cached,
    )


def default_prompt(examples_source: str) -> str:
    """``USERS_PROMPT`` when the examples are a file (the users' own questions), else
    ``DEFAULT_PROMPT`` (built-in example sets)."""
    return USERS_PROMPT if Path(examples_source).exists() else DEFAULT_PROMPT


def load_examples(source: str) -> list[dict[str, Any]]:
    """In-context examples: a built-in set (``pubmed``, ``textbooks``) or a file of your own.

    A file is any record file (:mod:`ragbound.records`): JSON (a list of objects or strings),
    JSONL, CSV/TSV, or text with one question per line. Every example needs a non-empty
    ``question`` (a string record is the question itself); other fields are kept.
    """
    path = Path(source)
    if not path.exists():
        if "/" in source or "." in source:
            raise InputError(f"examples file not found: {source}")
        return builtin_examples(source)
    examples = [_example(record) for record in read_records(path)]
    if not examples:
        raise InputError(f"{path}: no examples")
    return examples


def _example(record: Record) -> dict[str, Any]:
    """One example as an object with a non-empty ``question``."""
    if isinstance(record.data, str):
        return {"question": record.text()}
    record.object("an object with a question, or a string")
    record.string("question")
    return record.data


def save_queries(path: Path, queries: Sequence[SyntheticQuery]) -> None:
    """Write a query file (JSONL, field ``query``) with provenance per line, atomically."""
    write_jsonl(path, (q.model_dump(mode="json") for q in queries))
