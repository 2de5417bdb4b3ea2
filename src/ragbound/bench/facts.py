"""Atomic facts from documents (KnowOrNot step 1): sentences -> self-contained facts.

Documents are split into paragraphs at blank lines, paragraphs into sentences (ragbound's
splitter, :mod:`ragbound.corpus.sentences`), and sentences are numbered (0-based, per document).
Sentences that plainly point at a table, figure, image or sign are skipped before any call.
The rest go to the LLM a window at a time (prompt ``bench-facts``), so that each sentence is
read with its neighbours; every fact must cite one sentence of its window.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ragbound.bench.models import (
    AtomicFact,
    DocumentRef,
    FactSet,
    Provenance,
    SkippedSentence,
    llm_provenance,
    short_id,
)
from ragbound.corpus import Document, load_documents_with_report, split_sentences
from ragbound.errors import InputError
from ragbound.llm import LLM, GenerationParams, ParseError, load_prompt, parse_json_object
from ragbound.llm.batch import ParsedResult, run_parsed

FACTS_PROMPT = "bench-facts"
DEFAULT_WINDOW = 8
DEFAULT_FACT_PARAMS = GenerationParams(temperature=0.0, max_tokens=1024, seed=0)
NO_FACT = "the model extracted no fact"

_MATERIAL_WORDS = (
    "table",
    "figure",
    "diagram",
    "chart",
    "graph",
    "image",
    "picture",
    "photo",
    "photograph",
    "illustration",
    "sign",
    "map",
)
_MATERIAL = "(?:" + "|".join(f"{word}s?" for word in _MATERIAL_WORDS) + r"|fig\.)"
NON_TEXT_REFERENCE = re.compile(
    rf"\b(?:see|refer to|shown in|as shown in|illustrated in)\s+(?:the\s+)?"
    rf"(?:following\s+|above\s+|below\s+)?{_MATERIAL}"
    r"|\b(?:table|figure|fig\.|diagram|chart|exhibit)\s*\d+"
    rf"|\b{_MATERIAL}\s+(?:below|above)\b"
    rf"|\b(?:this|these|the following|the below|the above)\s+{_MATERIAL}(?!\w)",
    re.IGNORECASE,
)
"""Obvious references to non-text material ("see table 2", "the image below", "this sign")."""


_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n")


def document_sentences(text: str) -> list[str]:
    """Sentences of a document: blank lines end a sentence (headings, list items, captions),
    and the sentence splitter splits each paragraph; single line breaks (wrapped lines) do
    not split.

    >>> document_sentences("Road Rules\\n\\nStop at red. Wear a helmet\\nat all times.")
    ['Road Rules', 'Stop at red.', 'Wear a helmet at all times.']
    """
    return [
        sentence
        for paragraph in _PARAGRAPH_BREAK.split(text)
        if paragraph.strip()
        for sentence in split_sentences(paragraph)
    ]


def non_text_reason(sentence: str) -> str | None:
    """Why ``sentence`` cannot stand as text alone (it cites a table, image, sign...), or None.

    >>> non_text_reason("See Table 3 for the rates.")
    "refers to non-text material ('See Table')"
    >>> non_text_reason("The fine is $200.") is None
    True
    """
    match = NON_TEXT_REFERENCE.search(sentence)
    return None if match is None else f"refers to non-text material ({match.group(0)!r})"


@dataclass(frozen=True)
class FactReply:
    """A parsed ``bench-facts`` reply: ``(fact, cited index)`` and ``(index, reason)`` pairs.

    Cited indices are kept as the model wrote them; the caller checks them against the window.
    """

    facts: list[tuple[str, object]]
    skipped: list[tuple[object, str]]


def parse_fact_reply(reply: str) -> FactReply:
    """Read ``{"facts": [{"fact": ..., "sentence": n}], "skipped": [...]}``; ParseError if
    there is no ``facts`` list. Items without fact text are ignored; "skipped" is optional."""
    found = parse_json_object(reply)
    items = found.get("facts")
    if not isinstance(items, list):
        raise ParseError('the reply has no "facts" list', raw=reply)
    facts = [
        (item["fact"].strip(), item.get("sentence"))
        for item in items
        if isinstance(item, dict) and isinstance(item.get("fact"), str) and item["fact"].strip()
    ]
    skipped_items = found.get("skipped")
    skipped = [
        (item.get("sentence"), str(item.get("reason") or "").strip())
        for item in (skipped_items if isinstance(skipped_items, list) else [])
        if isinstance(item, dict)
    ]
    return FactReply(facts=facts, skipped=skipped)


def sentence_index(value: object) -> int | None:
    """A cited sentence index as an int (``3``, ``"3"``, ``3.0``), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("[").rstrip("]").isdigit():
        return int(value.strip().lstrip("[").rstrip("]"))
    return None


@dataclass(frozen=True)
class _Window:
    """Consecutive unskipped sentences of one document, sent in one call."""

    doc_id: str
    doc_hash: str
    sentences: dict[int, str]  # document index -> sentence

    def variables(self) -> dict[str, object]:
        numbered = "\n".join(f"[{index}] {text}" for index, text in self.sentences.items())
        indices = list(self.sentences)
        return {"sentences": numbered, "first": indices[0], "last": indices[-1]}

    def describe(self) -> str:
        indices = list(self.sentences)
        return f"{self.doc_id} sentences {indices[0]}-{indices[-1]}"


def build_facts(
    llm: LLM,
    paths: Sequence[str | Path] | str | Path,
    *,
    window: int = DEFAULT_WINDOW,
    skip_empty: bool = False,
    params: GenerationParams | None = None,
    concurrency: int = 4,
    progress: bool = False,
) -> FactSet:
    """Atomic facts of the documents under ``paths`` (files or folders, as ``ragbound index``).

    Each call shows ``window`` consecutive sentences. A fact citing a sentence outside its
    window is dropped and reported in ``errors``, as is a call whose reply never parses.
    Sentences that refer to tables, images or signs are skipped before any call (reason
    recorded), and so are those the model gives no fact for.

    An empty document (no text, or whitespace only) is an InputError naming it: it is usually
    a failed PDF extraction or a wrong path. With ``skip_empty`` it is skipped with a warning
    and listed in ``errors`` instead.
    """
    if window < 1:
        raise InputError(f"window must be at least 1 sentence, got {window}")
    documents, notes = _load(paths, skip_empty)
    refs, skipped, windows = _plan(documents, window)
    prompt = load_prompt(FACTS_PROMPT)
    params = params or DEFAULT_FACT_PARAMS
    results = run_parsed(
        llm,
        prompt,
        [w.variables() for w in windows],
        parse_fact_reply,
        params=params,
        concurrency=concurrency,
        progress=progress,
    )
    base = llm_provenance(prompt, params, model=llm.model_id)
    facts: list[AtomicFact] = []
    errors = list(notes)
    for part, result in zip(windows, results, strict=True):
        _collect(part, result, base, facts, skipped, errors)
    order = {ref.id: position for position, ref in enumerate(refs)}
    skipped.sort(key=lambda s: (order[s.doc_id], s.sentence_index))  # document order
    return FactSet(documents=refs, facts=facts, skipped=skipped, errors=errors)


def _load(
    paths: Sequence[str | Path] | str | Path, skip_empty: bool
) -> tuple[list[Document], list[str]]:
    """Documents and notes on the empty ones skipped; those are an InputError unless
    ``skip_empty``."""
    documents, report = load_documents_with_report(paths)
    empty = list(report.skipped_empty)
    if empty and not skip_empty:
        raise InputError(
            f"empty document(s), no text to extract facts from: {', '.join(empty)}; "
            "remove them or pass --skip-empty (skip_empty=True)"
        )
    notes = [f"{location}: empty document skipped" for location in empty]
    for note in notes:
        warnings.warn(note, stacklevel=3)
    return documents, notes


def _plan(
    documents: list[Document], window: int
) -> tuple[list[DocumentRef], list[SkippedSentence], list[_Window]]:
    """Split each document, pre-skip non-text references, group the rest into windows."""
    refs: list[DocumentRef] = []
    skipped: list[SkippedSentence] = []
    windows: list[_Window] = []
    for doc in documents:
        sentences = document_sentences(doc.text)
        digest = hashlib.sha256(doc.text.encode("utf-8")).hexdigest()  # a .txt's sha256sum
        refs.append(DocumentRef(id=doc.id, sha256=digest, n_sentences=len(sentences)))
        kept: dict[int, str] = {}
        for index, sentence in enumerate(sentences):
            reason = non_text_reason(sentence)
            if reason is None:
                kept[index] = sentence
            else:
                skipped.append(
                    SkippedSentence(
                        doc_id=doc.id, sentence_index=index, sentence=sentence, reason=reason
                    )
                )
        items = list(kept.items())
        for start in range(0, len(items), window):
            windows.append(_Window(doc.id, digest, dict(items[start : start + window])))
    return refs, skipped, windows


def _collect(
    part: _Window,
    result: ParsedResult[FactReply],
    base: Provenance,
    facts: list[AtomicFact],
    skipped: list[SkippedSentence],
    errors: list[str],
) -> None:
    """Turn one window's reply into facts, skipped sentences and error notes."""
    if result.parsed is None:
        raw = getattr(result.error, "raw", None)
        message = getattr(result.error, "message", str(result.error))
        errors.append(f"{part.describe()}: {message}" + (f"; raw output: {raw}" if raw else ""))
        return
    reply = result.parsed.value
    provenance = base.model_copy(
        update={"source_hash": part.doc_hash, "cached": result.parsed.response.cached}
    )
    cited: set[int] = set()
    seen: set[str] = set()
    for text, given in reply.facts:
        index = sentence_index(given)
        if index is None or index not in part.sentences:
            errors.append(
                f"{part.describe()}: fact {text!r} cites sentence {given!r}, outside the "
                "window; dropped"
            )
            continue
        fact_id = short_id("fact", part.doc_id, str(index), text)
        if fact_id in seen:
            continue
        seen.add(fact_id)
        cited.add(index)
        facts.append(
            AtomicFact(
                id=fact_id,
                text=text,
                doc_id=part.doc_id,
                sentence_index=index,
                sentence=part.sentences[index],
                provenance=provenance,
            )
        )
    reasons = {sentence_index(index): reason for index, reason in reply.skipped}
    for index, sentence in part.sentences.items():
        if index not in cited:
            skipped.append(
                SkippedSentence(
                    doc_id=part.doc_id,
                    sentence_index=index,
                    sentence=sentence,
                    reason=reasons.get(index) or NO_FACT,
                )
            )
