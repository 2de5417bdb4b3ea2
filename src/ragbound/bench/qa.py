"""QA pairs (KnowOrNot step 2): one objective question and answer per atomic fact, or
curated pairs imported from a JSON, JSONL or CSV file (the PolicyBench case)."""

from __future__ import annotations

from pathlib import Path

from ragbound.artifacts import file_sha256, sha256_text, utc_now
from ragbound.bench.models import FactSet, Provenance, QAPair, QASet, llm_provenance, short_id
from ragbound.errors import InputError
from ragbound.llm import LLM, GenerationParams, ParseError, load_prompt, parse_json_object
from ragbound.llm.batch import run_parsed
from ragbound.records import read_records

QA_PROMPT = "bench-qa"
DEFAULT_QA_PARAMS = GenerationParams(temperature=0.0, max_tokens=256, seed=0)
QA_LIST_KEY = "questions"
"""The field of a top-level JSON object that holds the pairs (PolicyBench's format)."""


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
        provenance = llm_provenance(
            prompt,
            params,
            source_hash=fact.provenance.source_hash,
            model=llm.model_id,
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


def import_qa(
    path: str | Path,
    question_field: str = "question",
    answer_field: str = "answer",
    id_field: str | None = None,
    name: str | None = None,
) -> QASet:
    """Curated QA pairs from a record file (``.json``, ``.jsonl``, ``.csv``, ``.tsv``; see
    :mod:`ragbound.records`).

    ``.json`` holds a list of objects, or an object whose ``"questions"`` is that list (the
    PolicyBench format). With ``id_field`` a pair keeps the file's id (as a string), else its
    id hashes question and answer (:func:`qa_pair_id`). ``name`` defaults to the file stem.

    Raises InputError ``FILE:LINE (field 'x'): problem`` for a missing field, a question or
    answer that is not text or is empty, and duplicate ids (without ``id_field``: the same
    question and answer twice), and ``FILE: ...`` for an unreadable file or no pairs.
    """
    records = read_records(path, key=QA_LIST_KEY)
    digest = file_sha256(Path(path))  # of the file as stored
    provenance = Provenance(created_at=utc_now(), source_hash=digest)
    pairs: list[QAPair] = []
    seen: dict[str, str] = {}
    for record in records:
        record.object("an object with a question and an answer")
        question = record.string(question_field)
        answer = record.string(answer_field)
        pair_id = qa_pair_id(question, answer) if id_field is None else record.id(id_field)
        pair = QAPair(
            id=pair_id, question=question, answer=answer, origin="imported", provenance=provenance
        )
        if pair.id in seen:
            what = "id" if id_field else "pair (same question and answer; no --id-field given)"
            raise record.error(f"duplicate {what} {pair.id!r}, first at {seen[pair.id]}", id_field)
        seen[pair.id] = record.where()
        pairs.append(pair)
    if not pairs:
        raise InputError(f"{path}: no QA pairs in the file")
    return QASet(name=name or Path(path).stem, pairs=pairs, source_hash=digest)
