"""QA pairs (KnowOrNot step 2): one objective question and answer per atomic fact, or
curated pairs imported from a JSON, JSONL or CSV file (the PolicyBench case)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragbound.artifacts import sha256_text, utc_now
from ragbound.bench.models import FactSet, Provenance, QAPair, QASet, short_id
from ragbound.corpus._files import (
    csv_rows,
    field_list,
    json_kind,
    jsonl_lines,
    parse_json,
    read_utf8,
)
from ragbound.corpus.loader import _field, _id_value  # the document loader's field checks
from ragbound.errors import InputError, where
from ragbound.llm import LLM, GenerationParams, ParseError, load_prompt, parse_json_object
from ragbound.llm.batch import run_parsed

QA_PROMPT = "bench-qa"
DEFAULT_QA_PARAMS = GenerationParams(temperature=0.0, max_tokens=256, seed=0)
IMPORT_SUFFIXES = (".json", ".jsonl", ".csv")


def parse_qa_reply(reply: str) -> tuple[str, str]:
    """``(question, answer)`` from a ``{"question": ..., "answer": ...}`` reply; ParseError if
    either is missing or empty."""
    found = parse_json_object(reply)
    question, answer = found.get("question"), found.get("answer")
    if not isinstance(question, str) or not question.strip():
        raise ParseError('the reply has no "question" text', raw=reply)
    if not isinstance(answer, str) or not answer.strip():
        raise ParseError('the reply has no "answer" text', raw=reply)
    return question.strip(), answer.strip()


def qa_pair_id(question: str, answer: str) -> str:
    """The id of a pair without one of its own: a hash of its question and answer."""
    return short_id("qa", question, answer)


def generate_qa(
    llm: LLM,
    facts: FactSet,
    *,
    name: str = "generated",
    params: GenerationParams | None = None,
    concurrency: int = 4,
    progress: bool = False,
) -> QASet:
    """One question and answer per fact (prompt ``bench-qa``), in fact order.

    A fact whose reply never parses gives no pair; it is listed in ``errors`` with the raw
    reply. Each pair keeps its fact and document ids; its id hashes the fact id, question and
    answer, so another model's pair for the same fact gets another id.
    """
    if not facts.facts:
        raise InputError("the fact set has no facts to write questions from")
    prompt = load_prompt(QA_PROMPT)
    params = params or DEFAULT_QA_PARAMS
    results = run_parsed(
        llm,
        prompt,
        [{"fact": fact.text} for fact in facts.facts],
        parse_qa_reply,
        params=params,
        concurrency=concurrency,
        progress=progress,
    )
    pairs: list[QAPair] = []
    errors: list[str] = []
    for fact, result in zip(facts.facts, results, strict=True):
        if result.parsed is None:
            raw = getattr(result.error, "raw", None)
            message = getattr(result.error, "message", str(result.error))
            errors.append(f"fact {fact.id}: {message}" + (f"; raw output: {raw}" if raw else ""))
            continue
        question, answer = result.parsed.value
        provenance = Provenance(
            created_at=utc_now(),
            source_hash=fact.provenance.source_hash,
            prompt_id=prompt.id,
            prompt_version=prompt.version,
            model=llm.model_id,
            params=params.model_dump(mode="json"),
            cached=result.parsed.response.cached,
        )
        pairs.append(
            QAPair(
                id=short_id("qa", fact.id, question, answer),
                question=question,
                answer=answer,
                fact_id=fact.id,
                doc_id=fact.doc_id,
                origin="generated",
                provenance=provenance,
            )
        )
    source = sha256_text(*(part for fact in facts.facts for part in (fact.id, fact.text)))
    return QASet(name=name, pairs=pairs, source_hash=source, errors=errors)


@dataclass(frozen=True)
class _Fields:
    question: str
    answer: str
    id: str | None


def import_qa(
    path: str | Path,
    question_field: str = "question",
    answer_field: str = "answer",
    id_field: str | None = None,
    name: str | None = None,
) -> QASet:
    """Curated QA pairs from a ``.json``, ``.jsonl`` or ``.csv`` file.

    ``.json`` holds a list of objects, or an object whose ``"questions"`` is that list (the
    PolicyBench format). With ``id_field`` a pair keeps the file's id (as a string), else its
    id hashes question and answer (:func:`qa_pair_id`). ``name`` defaults to the file stem.

    Raises InputError naming file, line or record and field for: an unsupported or unreadable
    file, a missing column or field, a question or answer that is not text or is empty,
    duplicate ids (without ``id_field``: the same question and answer twice), and no pairs.
    """
    file = Path(path)
    display = str(path)
    if not file.is_file():
        raise InputError(f"{display}: no such file")
    if file.suffix.lower() not in IMPORT_SUFFIXES:
        raise InputError(f"{display}: QA files are {', '.join(IMPORT_SUFFIXES)}")
    text = read_utf8(file, display)
    digest = hashlib.sha256(file.read_bytes()).hexdigest()  # of the file as stored
    fields = _Fields(question_field, answer_field, id_field)
    provenance = Provenance(created_at=utc_now(), source_hash=digest)
    pairs: list[QAPair] = []
    seen: dict[str, str] = {}
    for location, record in _records(file, text, display, fields):
        pair = _pair(record, location, fields, provenance)
        if pair.id in seen:
            what = "id" if id_field else "pair (same question and answer; no --id-field given)"
            raise InputError(f"{location}: duplicate {what} {pair.id!r}, first at {seen[pair.id]}")
        seen[pair.id] = location
        pairs.append(pair)
    if not pairs:
        raise InputError(f"{display}: no QA pairs in the file")
    return QASet(name=name or file.stem, pairs=pairs, source_hash=digest)


def _records(
    file: Path, text: str, display: str, fields: _Fields
) -> list[tuple[str, dict[str, Any]]]:
    """``(location, record)`` for each record: ``file:line`` (JSONL, CSV) or ``file[i]``."""
    suffix = file.suffix.lower()
    if suffix == ".csv":
        header, rows = csv_rows(text, display)
        for column in (fields.question, fields.answer, fields.id):
            if column is not None and column not in header:
                raise InputError(
                    f"{display}: no column {column!r}; columns are: {field_list(header)}"
                )
        return [(where(display, line), dict(row)) for line, row in rows]
    if suffix == ".jsonl":
        records = [(where(display, n), parse_json(raw, display, n)) for n, raw in jsonl_lines(text)]
    else:
        items = _json_items(parse_json(text, display), display)
        records = [(f"{display}[{index}]", item) for index, item in enumerate(items)]
    for location, record in records:
        if not isinstance(record, dict):
            raise InputError(f"{location}: expected an object, got {json_kind(record)}")
    return records


def _json_items(data: object, display: str) -> list[Any]:
    """The record list of a JSON file: the file itself, or its ``"questions"`` list."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict) and isinstance(data.get("questions"), list):
        return data["questions"]
    raise InputError(
        f'{display}: expected a JSON list of objects or an object with a "questions" list, '
        f"got {json_kind(data)}"
        + (f" with fields: {field_list(data)}" if isinstance(data, dict) else "")
    )


def _pair(record: dict[str, Any], location: str, fields: _Fields, provenance: Provenance) -> QAPair:
    question = _text(record, location, fields.question)
    answer = _text(record, location, fields.answer)
    pair_id = (
        qa_pair_id(question, answer)
        if fields.id is None
        else _id_value(record, location, fields.id)
    )
    return QAPair(
        id=pair_id, question=question, answer=answer, origin="imported", provenance=provenance
    )


def _text(record: dict[str, Any], location: str, field: str) -> str:
    value = _field(record, location, field)
    if not isinstance(value, str):
        raise InputError(f"{where(location, field=field)}: expected text, got {json_kind(value)}")
    if not value.strip():
        raise InputError(f"{where(location, field=field)}: empty")
    return value.strip()
