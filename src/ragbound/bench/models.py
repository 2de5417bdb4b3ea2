"""Typed artifacts of the leave-one-out abstention benchmark (KnowOrNot), each with provenance.

Stage by stage: documents -> :class:`FactSet` -> :class:`QASet` -> :class:`FilteredSet` ->
:class:`ExperimentInput` / :class:`ExperimentOutput` -> :class:`Evaluation` -> :class:`Label`.
Whole-set artifacts are JSON written atomically (``write_model``); per-item records
(outputs, evaluations, labels) are appended one JSON line at a time to a :class:`JsonlLog`,
so a crash loses at most the line being written and a rerun skips what is done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ragbound.artifacts import sha256_text, utc_now

if TYPE_CHECKING:
    from ragbound.llm import GenerationParams, Prompt

Strategy = Literal["direct", "long_context", "rag", "hyde"]
STRATEGIES: tuple[str, ...] = ("direct", "long_context", "rag", "hyde")
Mode = Literal["leave_one_out", "random_synthetic"]

FACTS_FORMAT = "ragbound.bench.facts/1"
QA_FORMAT = "ragbound.bench.qa/1"
FILTERED_FORMAT = "ragbound.bench.filtered/1"
RUN_FORMAT = "ragbound.bench.run/1"
SAMPLE_FORMAT = "ragbound.bench.sample/1"


def short_id(prefix: str, *parts: str) -> str:
    """A stable id: ``prefix`` + the first 12 hex digits of the SHA-256 of ``parts``."""
    return f"{prefix}-{sha256_text(*parts)[:12]}"


class Provenance(BaseModel):
    """Where an item came from. LLM-made items name the prompt, its version, model and params."""

    model_config = ConfigDict(frozen=True)

    created_at: str = Field(description="ISO 8601 UTC")
    source_hash: str | None = Field(default=None, description="sha256 of the input it came from")
    prompt_id: str | None = None
    prompt_version: int | None = None
    model: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    cached: bool = False


def llm_provenance(prompt: Prompt, params: GenerationParams, **fields: Any) -> Provenance:
    """The provenance of an LLM-made item: ``prompt``'s id and version, ``params`` and the
    other ``fields`` (``created_at`` defaults to now)."""
    fields.setdefault("created_at", utc_now())
    return Provenance(
        prompt_id=prompt.id,
        prompt_version=prompt.version,
        params=params.model_dump(mode="json"),
        **fields,
    )


class DocumentRef(BaseModel):
    """A source document: its id (the path relative to the input), sha256 and sentence count."""

    id: str
    sha256: str
    n_sentences: int


class AtomicFact(BaseModel):
    """One self-contained fact and the sentence it came from (0-based index in its document)."""

    id: str
    text: str
    doc_id: str
    sentence_index: int
    sentence: str
    provenance: Provenance


class SkippedSentence(BaseModel):
    """A sentence that gave no fact, and why (for example it refers to a table or image)."""

    doc_id: str
    sentence_index: int
    sentence: str
    reason: str


class FactSet(BaseModel):
    """Every atomic fact of a set of documents."""

    format: Literal["ragbound.bench.facts/1"] = FACTS_FORMAT
    documents: list[DocumentRef]
    facts: list[AtomicFact]
    skipped: list[SkippedSentence] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list, description="failed calls, with raw output")


class QAPair(BaseModel):
    """One question and its expected answer; ``fact_id`` names its source fact, if generated."""

    id: str
    question: str
    answer: str
    fact_id: str | None = None
    doc_id: str | None = None
    origin: Literal["generated", "imported"]
    provenance: Provenance


class QASet(BaseModel):
    """QA pairs, generated from facts or imported from a file (``name`` labels the set)."""

    format: Literal["ragbound.bench.qa/1"] = QA_FORMAT
    name: str
    pairs: list[QAPair]
    source_hash: str | None = None
    errors: list[str] = Field(default_factory=list)


class FilterDrop(BaseModel):
    """A dropped pair: which filter, its score, the cut-off, and (semantic) the pair it was near."""

    id: str
    filter: Literal["keyword", "semantic"]
    reason: str
    score: float
    cutoff: float
    near_id: str | None = None


class FilteredSet(BaseModel):
    """The diverse subset of a QA set and a record of every drop."""

    format: Literal["ragbound.bench.filtered/1"] = FILTERED_FORMAT
    name: str
    method: Literal["none", "keyword", "semantic", "both"]
    keyword_threshold: float | None = None
    semantic_threshold: float | None = None
    embedder: str | None = None
    input_hash: str
    kept: list[QAPair]
    dropped: list[FilterDrop] = Field(default_factory=list)
    provenance: Provenance


class ContextItem(BaseModel):
    """One numbered piece of context shown to the target model (``number`` is 1-based)."""

    number: int
    qa_id: str
    text: str
    similarity: float | None = Field(default=None, description="cosine to the query vector")


class ExperimentInput(BaseModel):
    """What one target model is asked: question, system prompt and leave-one-out context.

    ``id`` hashes everything that defines the call, so a rerun finds its finished output.
    """

    id: str
    mode: Mode
    qa_id: str
    question: str
    expected_answer: str | None = None
    model: str
    strategy: Strategy
    system_prompt: str
    prompt_version: int
    context: list[ContextItem] = Field(default_factory=list)
    hypothetical_answers: list[str] = Field(default_factory=list, description="HyDE only")


class ExperimentOutput(BaseModel):
    """The target model's answer to one input, or the error that stopped it."""

    input_id: str
    answer: str | None = None
    error: str | None = None
    seconds: float = Field(default=0.0, description="model time, s")
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    provenance: Provenance


class EvaluationSpec(BaseModel):
    """A custom evaluation: a prompt, the allowed outcomes and the tag that holds the outcome.

    ``prompt`` is a prompt-file id (``bench-eval-abstention``) or inline instructions; the
    model's reasoning may sit outside the tag, only ``<tag>outcome</tag>`` is read.
    """

    name: str
    prompt: str
    outcomes: list[str] = Field(min_length=2)
    tag: str
    version: int = 1


class Evaluation(BaseModel):
    """One evaluator's judgement of one output under one spec (``outcome`` None on failure)."""

    input_id: str
    spec: str
    evaluator: str
    outcome: str | None = None
    reasoning: str = ""
    raw: str | None = Field(default=None, description="the reply, kept when it did not parse")
    error: str | None = None
    provenance: Provenance


class Label(BaseModel):
    """One human label: annotator, task (an evaluation spec name) and the chosen outcome."""

    input_id: str
    annotator: str
    task: str
    value: str
    note: str = ""
    created_at: str
