"""Evaluator LLMs judge a run's answers: abstention (yes/no), factuality (tiers), custom specs.

Each spec names a prompt (a prompt-file id, or inline instructions wrapped in a fixed user
template), its allowed outcomes and the tag that holds the outcome. The evaluator sees the
question, the expected answer and the model's answer; its reasoning may sit anywhere outside
``<tag>…</tag>``. A reply without an allowed outcome is retried, then recorded with
``outcome=None``, the error and the raw reply: never guessed.

Each (spec, evaluator model) pair has its own log ``evaluations/SPEC--EVALUATOR.jsonl``,
appended as each judgement finishes. A rerun skips every output already judged; only calls
that failed without a reply (``raw`` None: timeout, server down) are tried again, and the
newest record of an input wins.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from ragbound.artifacts import sha256_text
from ragbound.bench.config import describe_errors, read_config_file
from ragbound.bench.log import JsonlLog
from ragbound.bench.models import Evaluation, EvaluationSpec, ExperimentInput, llm_provenance
from ragbound.bench.results import (
    ABSTAINED,
    ABSTENTION,
    ALLOWED,
    FACTUALITY,
    NOT_ABSTAINED,
    latest_outputs,
    latest_verdicts,
)
from ragbound.bench.results import (
    latest_evaluations as latest_evaluations,  # re-exported: evaluation logs live here
)
from ragbound.bench.rundir import RunDir, slug
from ragbound.errors import InputError, where
from ragbound.llm import LLM, GenerationParams, ParseError, Prompt, extract_tag, load_prompt
from ragbound.llm.batch import check_concurrency, gather_bounded
from ragbound.llm.parse import acomplete_parsed
from ragbound.llm.prompts import Template
from ragbound.progress import progress_bar
from ragbound.records import standard_json

BUILTIN_SPECS: dict[str, EvaluationSpec] = {
    ABSTENTION: EvaluationSpec(
        name=ABSTENTION,
        prompt="bench-eval-abstention",
        outcomes=[ABSTAINED, NOT_ABSTAINED],
        tag=ABSTENTION,
    ),
    FACTUALITY: EvaluationSpec(
        name=FACTUALITY,
        prompt="bench-eval-factuality",
        outcomes=list(ALLOWED[FACTUALITY]),
        tag=FACTUALITY,
    ),
}
DEFAULT_SPECS = (ABSTENTION, FACTUALITY)
EVAL_VARIABLES = ("question", "expected_answer", "model_answer")
# greedy, with room for a few sentences of reasoning before the tag
EVAL_PARAMS = GenerationParams(temperature=0.0, max_tokens=320, seed=0)
_PROMPT_ID = re.compile(r"[a-z0-9][a-z0-9._-]*")
_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


class SpecSummary(BaseModel):
    """What one spec's log holds after a call of :func:`evaluate_run`."""

    spec: str
    evaluator: str
    log: str = Field(description="path of the evaluation log")
    n_answered: int = Field(description="outputs with an answer (the ones judged)")
    n_done_before: int = Field(description="outputs already judged when the call started")
    n_evaluated: int = Field(description="judged by this call")
    n_failed: int = Field(description="of those, without an outcome (recorded, not guessed)")
    n_skipped: int = Field(description="answered outputs the prompt cannot judge (no expected)")
    n_abstained: int = Field(
        default=0,
        description="factuality only: outputs not judged because this evaluator saw an abstention",
    )
    outcomes: dict[str, int] = Field(description="every usable verdict in the log, by outcome")
    n_unresolved: int = Field(description="inputs whose newest record has no outcome")


class EvaluationSummary(BaseModel):
    """One evaluator model's pass over a run's outputs, per spec."""

    run_dir: str
    evaluator: str
    n_outputs: int = Field(description="inputs with an output")
    n_output_errors: int = Field(description="outputs that are errors (never judged)")
    specs: list[SpecSummary]


@dataclass(frozen=True)
class ResolvedSpec:
    """A spec with its loaded prompt and its tag parser."""

    spec: EvaluationSpec
    prompt: Prompt

    def parse(self, text: str) -> str:
        """The allowed outcome inside the spec's tag (ParseError otherwise)."""
        return extract_tag(text, tag=self.spec.tag, allowed=self.spec.outcomes)


@dataclass(frozen=True)
class _Job:
    """One output to judge under one spec."""

    resolved: ResolvedSpec
    log: JsonlLog[Evaluation]
    input_id: str
    variables: dict[str, str]
    source_hash: str


def builtin_spec(name: str) -> EvaluationSpec:
    """The built-in spec ``abstention`` or ``factuality``."""
    if name not in BUILTIN_SPECS:
        raise InputError(f"unknown evaluation spec {name!r}; built in: {', '.join(BUILTIN_SPECS)}")
    return BUILTIN_SPECS[name]


def check_spec(spec: EvaluationSpec, at: str) -> EvaluationSpec:
    """``spec`` if its tag is a plain tag name and its outcomes are distinct and non-blank."""
    if not _TAG_NAME.fullmatch(spec.tag):
        raise InputError(f"{at}: tag {spec.tag!r} must be a name like 'verdict' (letters, _ -)")
    outcomes = [outcome.strip() for outcome in spec.outcomes]
    if any(not outcome for outcome in outcomes):
        raise InputError(f"{at}: outcomes must not be blank")
    if len({outcome.casefold() for outcome in outcomes}) != len(outcomes):
        raise InputError(f"{at}: outcomes {spec.outcomes} repeat (compared ignoring case)")
    if not spec.name.strip() or not spec.prompt.strip():
        raise InputError(f"{at}: name and prompt must not be blank")
    return spec.model_copy(update={"outcomes": outcomes})


def _read_spec_file(path: Path) -> dict[str, Any]:
    """The mapping in a spec file: TOML or YAML as run configs are read, or JSON."""
    if path.suffix.lower() != ".json":
        return read_config_file(path)
    try:
        data = standard_json(path.read_text(encoding="utf-8"))  # ValueError past 128 levels
    except FileNotFoundError as exc:
        raise InputError(f"{path}: no such file") from exc
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected an object with a 'specs' list")
    return data


def load_specs(path: str | Path) -> list[EvaluationSpec]:
    """Custom specs from a ``.toml``, ``.yaml``/``.yml`` or ``.json`` file: a ``specs`` list
    (TOML ``[[specs]]``) of tables with ``name``, ``prompt``, ``outcomes``, ``tag`` and
    optionally ``version``. Names must be unique and differ from the built-in specs.
    """
    file = Path(path)
    entries = _read_spec_file(file).get("specs")
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{file}: expected a non-empty list of specs under 'specs'")
    specs = [
        _spec_entry(entry, where(file, field=f"specs[{i}]")) for i, entry in enumerate(entries)
    ]
    names = [spec.name for spec in specs]
    for name in names:
        if name in BUILTIN_SPECS:
            raise InputError(f"{file}: spec name {name!r} is built in; choose another name")
        if names.count(name) > 1:
            raise InputError(f"{file}: spec name {name!r} is used twice")
    return specs


def _spec_entry(entry: object, at: str) -> EvaluationSpec:
    if not isinstance(entry, dict):
        raise InputError(f"{at}: expected a table with name, prompt, outcomes and tag")
    unknown = sorted(set(entry) - set(EvaluationSpec.model_fields))
    if unknown:
        raise InputError(f"{at}: unknown setting {unknown[0]!r}")
    try:
        spec = EvaluationSpec.model_validate(entry)
    except ValidationError as exc:
        raise InputError(f"{at}: {describe_errors(exc)}") from exc
    return check_spec(spec, at)


def resolve_specs(
    names: Sequence[str] = (), custom: Sequence[EvaluationSpec] = ()
) -> list[EvaluationSpec]:
    """Specs chosen by name among the built-in and ``custom`` ones.

    No names: every custom spec, or both built-in specs when there are none.
    """
    known = {**BUILTIN_SPECS, **{spec.name: spec for spec in custom}}
    if not names:
        return list(custom) if custom else [BUILTIN_SPECS[name] for name in DEFAULT_SPECS]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise InputError(f"unknown evaluation spec {unknown[0]!r}; known: {', '.join(known)}")
    return [known[name] for name in dict.fromkeys(names)]


def spec_prompt(spec: EvaluationSpec) -> Prompt:
    """The prompt of a spec: its prompt file, or its inline instructions in the fixed template.

    A ``prompt`` that looks like a prompt id (lowercase, no spaces) must name a prompt file.
    """
    if _PROMPT_ID.fullmatch(spec.prompt):
        prompt = load_prompt(spec.prompt)
        extra = sorted(set(prompt.variables) - set(EVAL_VARIABLES))
        if extra:
            raise InputError(
                f"spec {spec.name!r}: prompt {prompt.id!r} ({prompt.path}) uses variables "
                f"{extra}; an evaluation prompt may use only {list(EVAL_VARIABLES)}"
            )
    else:
        prompt = inline_prompt(spec)
    literal = "".join(s for t in prompt.templates for s in t.segments if isinstance(s, str))
    if f"<{spec.tag}>".casefold() not in literal.casefold():
        raise InputError(
            f"spec {spec.name!r}: prompt {prompt.id!r} never asks for <{spec.tag}>…</{spec.tag}>"
        )
    return prompt


def inline_prompt(spec: EvaluationSpec) -> Prompt:
    """A prompt from inline instructions: they are the system message; the user message shows
    question, expected answer and model answer and asks for the outcome in the tag."""
    choices = ", ".join(spec.outcomes)
    user = (
        "Question:\n",
        ("question",),
        "\n\nExpected answer:\n",
        ("expected_answer",),
        "\n\nModel answer:\n",
        ("model_answer",),
        "\n\nJudge the model answer by the instructions. Give your reasoning in a few "
        f"sentences, then the outcome as <{spec.tag}>OUTCOME</{spec.tag}>, where OUTCOME is "
        f"exactly one of: {choices}.",
    )
    return Prompt(
        id=f"bench-eval-custom-{slug(spec.name).lower()}",
        version=spec.version,
        description=f"custom evaluation spec {spec.name!r} (inline instructions)",
        variables=EVAL_VARIABLES,
        templates=(Template("system", (spec.prompt.strip(),)), Template("user", user)),
        path=Path(f"<inline spec {spec.name}>"),
    )


def reasoning_outside(text: str, tag: str) -> str:
    """The reply with every ``<tag>…</tag>`` removed: the evaluator's reasoning."""
    name = re.escape(tag)
    pattern = re.compile(rf"<\s*{name}\s*>.*?<\s*/\s*{name}\s*>", re.IGNORECASE | re.DOTALL)
    return pattern.sub("", text).strip()


def _is_final(record: Evaluation) -> bool:
    """A judgement to keep: an outcome, or a reply that held none (rerunning repeats it)."""
    return record.outcome is not None or record.raw is not None


def _variables(item: ExperimentInput, answer: str, prompt: Prompt) -> dict[str, str] | None:
    """The prompt's variables for one output; None if it needs an expected answer and has none."""
    values = {
        "question": item.question,
        "expected_answer": item.expected_answer,
        "model_answer": answer,
    }
    if any(values[name] is None for name in prompt.variables):
        return None
    return {name: str(values[name]) for name in prompt.variables}


def _plan(
    run: RunDir,
    resolved: ResolvedSpec,
    evaluator: str,
    inputs: list[ExperimentInput],
    answers: dict[str, str],
    abstained: set[str],
) -> tuple[list[_Job], int, int]:
    """Jobs still to do for one spec, how many were already done and how many are skipped.

    Outputs in ``abstained`` are left out (neither done nor skipped)."""
    log = run.evaluations(resolved.spec.name, evaluator)
    done = {r.input_id for r in log.read() if _is_final(r)}
    jobs, skipped = [], 0
    for item in inputs:
        if item.id not in answers or item.id in done or item.id in abstained:
            continue
        values = _variables(item, answers[item.id], resolved.prompt)
        if values is None:
            skipped += 1
            continue
        source = sha256_text(item.id, answers[item.id])
        jobs.append(_Job(resolved, log, item.id, values, source))
    return jobs, len(done & answers.keys()), skipped


def _record(
    job: _Job,
    llm: LLM,
    params: GenerationParams,
    *,
    model: str | None = None,
    cached: bool = False,
    **fields: Any,
) -> Evaluation:
    return Evaluation(
        input_id=job.input_id,
        spec=job.resolved.spec.name,
        evaluator=llm.model_id,
        provenance=llm_provenance(
            job.resolved.prompt,
            params,
            source_hash=job.source_hash,
            model=model or llm.model_id,
            cached=cached,
        ),
        **fields,
    )


async def _judge(llm: LLM, job: _Job, params: GenerationParams) -> Evaluation:
    """One judgement; a failure becomes a record with the error (and the raw reply if any)."""
    try:
        parsed = await acomplete_parsed(
            llm, job.resolved.prompt, job.variables, job.resolved.parse, params=params
        )
    except ParseError as exc:
        return _record(job, llm, params, error=exc.message, raw=exc.raw)
    except Exception as exc:  # one failing call must not stop the others; retried on rerun
        return _record(job, llm, params, error=f"{type(exc).__name__}: {exc}")
    response = parsed.response
    return _record(
        job,
        llm,
        params,
        model=response.model,
        cached=response.cached,
        outcome=parsed.value,
        reasoning=reasoning_outside(response.text, job.resolved.spec.tag),
    )


async def _run_jobs(
    llm: LLM, jobs: list[_Job], params: GenerationParams, concurrency: int, progress: bool
) -> list[Evaluation]:
    """Judge every job at bounded concurrency, appending each record as soon as it exists."""

    async def one(job: _Job) -> Evaluation:
        record = await _judge(llm, job, params)
        job.log.append([record])
        return record

    with progress_bar(len(jobs), f"evaluate ({llm.model_id})", progress) as advance:
        return await gather_bounded(llm, jobs, one, concurrency=concurrency, advance=advance)


def _summary(
    run: RunDir, resolved: ResolvedSpec, evaluator: str, counts: Mapping[str, int]
) -> SpecSummary:
    log = run.evaluations(resolved.spec.name, evaluator)
    latest = latest_verdicts(log.read())
    outcomes = Counter(r.outcome for r in latest.values() if r.outcome is not None)
    return SpecSummary(
        spec=resolved.spec.name,
        evaluator=evaluator,
        log=str(log.path),
        outcomes={o: outcomes[o] for o in resolved.spec.outcomes if outcomes[o]},
        n_unresolved=sum(r.outcome is None for r in latest.values()),
        **counts,
    )


def _abstained(run: RunDir, evaluator: str) -> set[str]:
    """Inputs whose answer ``evaluator``'s abstention verdict calls an abstention."""
    log = run.evaluations(ABSTENTION, evaluator)
    return {key for key, r in latest_verdicts(log.read()).items() if r.outcome == ABSTAINED}


def _phases(resolved: list[ResolvedSpec], skip_abstained: bool) -> list[list[ResolvedSpec]]:
    """Specs in the order they run: factuality after the rest when it waits for abstention."""
    later = [r for r in resolved if skip_abstained and r.spec.name == FACTUALITY]
    first = [r for r in resolved if r not in later]
    return [phase for phase in (first, later) if phase]


def evaluate_run(
    run_dir: str | Path,
    llm: LLM,
    specs: Sequence[EvaluationSpec | str] = DEFAULT_SPECS,
    *,
    params: GenerationParams | None = None,
    concurrency: int = 4,
    progress: bool = False,
    skip_abstained: bool = True,
) -> EvaluationSummary:
    """Judge every answered output of a run with ``llm`` under each spec (name or spec).

    Outputs that are errors are not judged; nor, for prompts that need one, are outputs
    without an expected answer (random-synthetic questions). With ``skip_abstained`` (the
    default) the built-in factuality spec runs after the others and skips answers this
    evaluator judged abstentions: the factuality rate counts non-abstentions only, so those
    calls would be wasted. Judgements are appended to ``evaluations/SPEC--MODEL.jsonl`` as
    they finish; a rerun only judges what is missing.
    """
    check_concurrency(concurrency)  # before any file is read: a bad call fails first
    run = RunDir(Path(run_dir))
    chosen = [
        builtin_spec(s) if isinstance(s, str) else check_spec(s, f"spec {s.name!r}") for s in specs
    ]
    names = [spec.name for spec in chosen]
    if len(set(names)) != len(names):
        raise InputError(f"evaluation specs repeat: {names}")
    resolved = [ResolvedSpec(spec, spec_prompt(spec)) for spec in chosen]
    outputs = latest_outputs(run.outputs().read())
    answers = {
        key: out.answer
        for key, out in outputs.items()
        if out.error is None and out.answer is not None
    }
    inputs, evaluator, params = run.inputs(), llm.model_id, params or EVAL_PARAMS
    plans: dict[str, tuple[list[_Job], int, int]] = {}
    left_out: dict[str, set[str]] = {}
    records: list[Evaluation] = []
    for phase in _phases(resolved, skip_abstained):
        for item in phase:
            waits = skip_abstained and item.spec.name == FACTUALITY
            left_out[item.spec.name] = _abstained(run, evaluator) if waits else set()
            plans[item.spec.name] = _plan(
                run, item, evaluator, inputs, answers, left_out[item.spec.name]
            )
        jobs = [job for item in phase for job in plans[item.spec.name][0]]
        records += asyncio.run(_run_jobs(llm, jobs, params, concurrency, progress))
    summaries = []
    for item in resolved:
        planned, done, skipped = plans[item.spec.name]
        mine = [r for r in records if r.spec == item.spec.name]
        counts = {
            "n_answered": len(answers),
            "n_done_before": done,
            "n_evaluated": len(planned),
            "n_failed": sum(r.outcome is None for r in mine),
            "n_skipped": skipped,
            "n_abstained": len(left_out[item.spec.name] & answers.keys()),
        }
        summaries.append(_summary(run, item, evaluator, counts))
    return EvaluationSummary(
        run_dir=str(run.root),
        evaluator=evaluator,
        n_outputs=len(outputs),
        n_output_errors=sum(out.error is not None for out in outputs.values()),
        specs=summaries,
    )
