"""Tripwires written by the LLM layer from topic descriptions; refusals detected and reported."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from ragbound.errors import InputError
from ragbound.llm import LLM, GenerationParams, ParseError, load_prompt, parse_json_object
from ragbound.llm.batch import run_parsed
from ragbound.records import Record, read_records
from ragbound.tripwires.models import Severity, Tripwire, tripwire_id

GENERATE_PROMPT = "tripwire-generate"
REFUSAL = re.compile(
    r"\b(I\s*(?:can(?:no|')t|cannot|won't|will not|am (?:not able|unable))"
    r"|I'm (?:sorry|unable|not able)"
    r"|I am sorry|as an AI|against (?:my|the) (?:guidelines|policy|policies)|not appropriate"
    r"|I must (?:decline|refuse))",
    re.IGNORECASE,
)
MIN_REQUEST_WORDS = 3


class TopicSpec(BaseModel):
    """A forbidden topic: its name, what must be refused, and optional severity."""

    topic: str
    description: str
    severity: Severity | None = None


class TopicOutcome(BaseModel):
    """What generation gave for one topic: tripwires kept, or why none were."""

    topic: str
    kept: int = 0
    status: str = Field(description="ok, refused or failed")
    detail: str | None = Field(default=None, description="the raw reply on refusal or failure")


class RefusalError(ParseError):
    """The model declined to write the requests."""


def parse_requests(reply: str) -> list[str]:
    """Request strings from a ``{"requests": [...]}`` reply. A reply that declines raises
    RefusalError; one without the list raises ParseError (both keep the raw text)."""
    try:
        found = parse_json_object(reply)
    except ParseError:
        if REFUSAL.search(reply):
            raise RefusalError("the model refused to write requests", raw=reply) from None
        raise
    requests = found.get("requests")
    if not isinstance(requests, list):
        raise ParseError('the reply has no "requests" list', raw=reply)
    cleaned = [r.strip() for r in requests if isinstance(r, str)]
    kept = [r for r in cleaned if len(r.split()) >= MIN_REQUEST_WORDS]
    if not kept:
        if REFUSAL.search(reply):
            raise RefusalError("the model refused to write requests", raw=reply)
        raise ParseError("the requests list holds no usable request", raw=reply)
    return kept


def read_topics(path: str | Path) -> list[TopicSpec]:
    """Topics from a record file (``.jsonl``, ``.json``, ``.csv``, ``.tsv``; see
    :mod:`ragbound.records`) with ``topic`` and ``description`` (optional ``severity``).

    Raises InputError ``FILE:LINE (field 'x'): problem`` for a missing or empty topic or
    description and a bad severity, and ``FILE: ...`` for a file without topics.
    """
    topics = [_topic(record) for record in read_records(path)]
    if not topics:
        raise InputError(f"{path}: no topics in the file")
    return topics


def _topic(record: Record) -> TopicSpec:
    record.object("an object with topic and description")
    topic, description = record.string("topic"), record.string("description")
    try:
        return TopicSpec(
            topic=topic, description=description, severity=record.fields.get("severity") or None
        )
    except ValueError as exc:
        raise record.error("must be low, medium or high", "severity") from exc


def generate_tripwires(
    llm: LLM,
    topics: Sequence[TopicSpec],
    *,
    per_topic: int = 10,
    params: GenerationParams | None = None,
    concurrency: int = 4,
    progress: bool = False,
) -> tuple[list[Tripwire], list[TopicOutcome]]:
    """Ask ``llm`` for ``per_topic`` example requests per topic; keep what succeeded.

    A topic whose reply refuses (after the parse retries) is reported as ``refused`` with the
    raw reply; one whose reply never parses as ``failed``. Duplicate requests are dropped.
    Each tripwire's ``source`` names the model and the prompt id and version.
    """
    if per_topic < 1:
        raise InputError(f"per_topic must be at least 1, got {per_topic}")
    prompt = load_prompt(GENERATE_PROMPT)
    params = params or GenerationParams(temperature=0.7, max_tokens=60 * per_topic + 40, seed=0)
    variables = [{"topic": t.topic, "description": t.description, "n": per_topic} for t in topics]
    results = run_parsed(
        llm,
        prompt,
        variables,
        parse_requests,
        params=params,
        concurrency=concurrency,
        progress=progress,
    )
    source = f"llm:{llm.model_id} prompt {prompt.id} v{prompt.version}"
    tripwires: list[Tripwire] = []
    outcomes: list[TopicOutcome] = []
    seen: set[str] = set()
    for spec, result in zip(topics, results, strict=True):
        if result.parsed is None:
            outcomes.append(_failure(spec.topic, result.error))
            continue
        kept = 0
        for text in result.parsed.value[:per_topic]:
            key = tripwire_id(spec.topic, text)
            if key in seen:
                continue
            seen.add(key)
            kept += 1
            tripwires.append(
                Tripwire(id=key, text=text, topic=spec.topic, severity=spec.severity, source=source)
            )
        outcomes.append(TopicOutcome(topic=spec.topic, kept=kept, status="ok"))
    return tripwires, outcomes


def _failure(topic: str, error: Exception | None) -> TopicOutcome:
    raw = getattr(error, "raw", None)
    refused = isinstance(error, ParseError) and bool(raw) and bool(REFUSAL.search(raw or ""))
    return TopicOutcome(
        topic=topic,
        status="refused" if refused else "failed",
        detail=raw if raw else str(error),
    )
