"""Leave-one-out experiments: build each question's context without its own pair, ask the models.

For pair i of a knowledge set, the context comes from every *other* pair of the same set (never
from a pair sharing its source fact): ``direct`` (none), ``long_context`` (all of them),
``rag`` (the ``k`` nearest the question) or ``hyde`` (the ``k`` nearest the mean of three
model-written hypothetical answers). ``random_synthetic`` mode asks LLM-written questions near,
but outside, the set instead. :func:`run_experiment` writes the run directory
(:class:`~ragbound.bench.rundir.RunDir`); a rerun skips every answered input and asks failed
ones again.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from ragbound.artifacts import read_manifest, sha256_text, utc_now, write_json
from ragbound.bench.config import HYDE_PROMPT, RANDOM_QUESTIONS_PROMPT, BenchConfig, ModelSpec
from ragbound.bench.context import (
    HYDE_ANSWERS,
    KnowledgeSet,
    Probe,
    all_context,
    leave_one_out_probes,
    normal_question,
    pair_text,
    parse_hypothetical_answers,
    parse_questions,
    question_clusters,
    read_knowledge,
    render_context,
    sample_probes,
    top_k_context,
    unit_rows,
    unseen_questions,
)
from ragbound.bench.log import JsonlLog
from ragbound.bench.models import (
    RUN_FORMAT,
    ContextItem,
    ExperimentInput,
    ExperimentOutput,
    Strategy,
    llm_provenance,
    short_id,
)
from ragbound.bench.rundir import RunDir
from ragbound.embedders import DenseEmbedder, load_dense_embedder
from ragbound.errors import InputError
from ragbound.llm import (
    LLM,
    CachedLLM,
    ChatMessage,
    GenerationParams,
    LLMResponse,
    Prompt,
    ResponseCache,
    acall,
    load_prompt,
    run_parsed,
)
from ragbound.llm.batch import gather_bounded
from ragbound.progress import Advance, progress_bar

# --- time spent inside model calls ----------------------------------------------------------


class BusyClock:
    """Seconds during which at least one model call was running (overlapping calls count once)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._running = 0
        self._since = 0.0
        self._lock = threading.Lock()

    @contextmanager
    def busy(self) -> Iterator[None]:
        with self._lock:
            if self._running == 0:
                self._since = time.perf_counter()
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    self.seconds += time.perf_counter() - self._since


class TimedLLM:
    """An LLM whose calls are timed on a :class:`BusyClock` (wrap it in CachedLLM so that
    cache hits, which make no call, are not counted)."""

    def __init__(self, llm: LLM, clock: BusyClock) -> None:
        self.llm = llm
        self.clock = clock

    @property
    def model_id(self) -> str:
        return self.llm.model_id

    @property
    def max_parallel(self) -> int | None:
        return getattr(self.llm, "max_parallel", None)

    def complete(
        self, messages: Sequence[ChatMessage], params: GenerationParams | None = None
    ) -> LLMResponse:
        with self.clock.busy():
            return self.llm.complete(messages, params)

    async def acomplete(
        self, messages: Sequence[ChatMessage], params: GenerationParams | None = None
    ) -> LLMResponse:
        with self.clock.busy():
            return await self.llm.acomplete(messages, params)


# --- the run's records ----------------------------------------------------------------------


class SetRecord(BaseModel):
    """A knowledge set of the run: file, hash, pairs, and how many questions were asked."""

    name: str
    path: str
    sha256: str
    format: str
    n_pairs: int
    n_asked: int
    qa_ids: list[str] = Field(description="the asked questions' ids (synthetic ids in that mode)")


Stage = Literal["hyde", "random_questions"]


class InputFailure(BaseModel):
    """A step before the target call that failed (a HyDE or question-writing reply); the
    items it blocked count as failed and are tried again on the next run."""

    set: str
    stage: Stage
    model: str
    qa_id: str | None = None
    items: int = Field(description="planned inputs this failure blocked")
    error: str


class RunSummary(BaseModel):
    """One invocation of a run: counts and timings (s).

    ``items`` planned inputs; ``done`` answered now; ``skipped`` answered by an earlier run;
    ``failed`` calls that failed now plus inputs that could not be built;
    ``input_failures`` HyDE or question-writing replies that failed (listed in ``run.json``,
    written again on the next run). ``llm_seconds`` is
    the time at least one real model call was running (cache hits excluded);
    ``overhead_share`` is (wall - llm) / wall.
    """

    run_dir: str
    started_at: str
    items: int = 0
    done: int = 0
    skipped: int = 0
    failed: int = 0
    input_failures: int = 0
    setup_seconds: float = 0.0
    wall_seconds: float = 0.0
    llm_seconds: float = 0.0
    overhead_share: float = 0.0


class RunManifest(BaseModel):
    """``run.json``: the resolved config, input hashes, embedder, models and every
    invocation's summary."""

    format: Literal["ragbound.bench.run/1"] = RUN_FORMAT
    config: dict[str, Any]
    config_hash: str
    sets: list[SetRecord]
    embedder: dict[str, Any]
    models: dict[str, str] = Field(description="model name -> model id")
    prompts: dict[str, int] = Field(description="prompt id -> version")
    n_inputs: int
    input_failures: list[InputFailure] = Field(default_factory=list)
    runs: list[RunSummary] = Field(default_factory=list)


# --- building inputs ------------------------------------------------------------------------


@dataclass
class _Models:
    """The run's LLMs by name, each timed and (optionally) cached."""

    by_name: dict[str, LLM]
    clock: BusyClock
    cache: ResponseCache | None
    given: Mapping[str, LLM]

    def get(self, spec: ModelSpec) -> LLM:
        if spec.label not in self.by_name:
            base = self.given[spec.label] if spec.label in self.given else spec.make()
            timed = TimedLLM(base, self.clock)
            cached = CachedLLM(timed, self.cache) if self.cache is not None else timed
            self.by_name[spec.label] = cached
        return self.by_name[spec.label]


SearchVector = tuple[np.ndarray, list[str]]  # a search vector and, for HyDE, the answers behind it


@dataclass
class _Plan:
    """What a run asks: inputs, set records, blocked items."""

    inputs: list[ExperimentInput]
    sets: list[SetRecord]
    failures: list[InputFailure]


def input_messages(item: ExperimentInput, prompt: Prompt) -> list[ChatMessage]:
    """The chat messages of an input under its system prompt."""
    return prompt.render(question=item.question, context=render_context(item.context))


def input_id(item: ExperimentInput, prompt: Prompt, model_id: str, params: GenerationParams) -> str:
    """A hash of everything that defines the call and the item."""
    record = {
        "mode": item.mode,
        "qa_id": item.qa_id,
        "expected_answer": item.expected_answer,
        "model": item.model,
        "model_id": model_id,
        "strategy": item.strategy,
        "prompt": [prompt.id, prompt.version],
        "messages": [m.model_dump() for m in input_messages(item, prompt)],
        "params": params.model_dump(),
    }
    return short_id("exp", json.dumps(record, sort_keys=True, ensure_ascii=False))


class _Builder:
    """Builds one set's inputs for every model, strategy and system prompt."""

    def __init__(
        self,
        config: BenchConfig,
        models: _Models,
        embedder: DenseEmbedder,
        prompts: dict[str, Prompt],
        progress: bool,
    ) -> None:
        self.config = config
        self.models = models
        self.embedder = embedder
        self.prompts = prompts
        self.progress = progress
        self.failures: list[InputFailure] = []
        self._hyde: dict[tuple[str, str], tuple[dict[str, SearchVector], dict[str, str]]] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.embedder.info.dimension))
        return unit_rows(self.embedder.encode(list(texts)))

    def build(self, kset: KnowledgeSet) -> tuple[list[ExperimentInput], SetRecord]:
        pair_vectors = self.embed([pair_text(pair) for pair in kset.pairs])
        if self.config.mode == "leave_one_out":
            probes = leave_one_out_probes(kset.pairs)
        else:
            probes = self.synthetic_probes(kset)
        probes = sample_probes(probes, self.config.limit, self.config.seed)
        queries: dict[Strategy, dict[str, SearchVector]] = {}
        if "rag" in self.config.strategies:
            vectors = self.embed([probe.question for probe in probes])
            queries["rag"] = {p.qa_id: (v, []) for p, v in zip(probes, vectors, strict=True)}
        inputs = []
        for spec in self.config.models:
            if "hyde" in self.config.strategies:
                queries["hyde"] = self.hyde_queries(kset, probes, spec)
            for probe in probes:
                contexts = self.contexts(kset, pair_vectors, probe, queries)
                inputs += self.inputs_for(probe, spec, contexts)
        record = SetRecord(
            name=kset.name,
            path=str(kset.path),
            sha256=kset.sha256,
            format=kset.format,
            n_pairs=len(kset.pairs),
            n_asked=len(probes),
            qa_ids=[p.qa_id for p in probes],
        )
        return inputs, record

    def contexts(
        self,
        kset: KnowledgeSet,
        pair_vectors: np.ndarray,
        probe: Probe,
        queries: Mapping[Strategy, Mapping[str, SearchVector]],
    ) -> dict[Strategy, tuple[list[ContextItem], list[str]]]:
        """Per strategy: the context and (HyDE) the hypothetical answers; a search strategy
        whose query could not be made for this probe is absent."""
        found: dict[Strategy, tuple[list[ContextItem], list[str]]] = {}
        for strategy in self.config.strategies:
            if strategy == "direct":
                found[strategy] = ([], [])
            elif strategy == "long_context":
                found[strategy] = (all_context(kset.pairs, probe.excluded), [])
            elif probe.qa_id in queries.get(strategy, {}):
                vector, answers = queries[strategy][probe.qa_id]
                context = top_k_context(
                    kset.pairs, pair_vectors, vector, probe.excluded, self.config.k
                )
                found[strategy] = (context, answers)
        return found

    def inputs_for(
        self,
        probe: Probe,
        spec: ModelSpec,
        contexts: dict[Strategy, tuple[list[ContextItem], list[str]]],
    ) -> list[ExperimentInput]:
        model_id = self.models.get(spec).model_id
        inputs = []
        for strategy, (context, answers) in contexts.items():
            for prompt in self.prompts.values():
                item = ExperimentInput(
                    id="pending",
                    mode=self.config.mode,
                    qa_id=probe.qa_id,
                    question=probe.question,
                    expected_answer=probe.expected_answer,
                    model=spec.label,
                    strategy=strategy,
                    system_prompt=prompt.id,
                    prompt_version=prompt.version,
                    context=context,
                    hypothetical_answers=answers,
                )
                ident = input_id(item, prompt, model_id, self.config.params)
                inputs.append(item.model_copy(update={"id": ident}))
        return inputs

    def hyde_queries(
        self, kset: KnowledgeSet, probes: Sequence[Probe], target: ModelSpec
    ) -> dict[str, SearchVector]:
        """Per question id: the unit mean of the embeddings of three hypothetical answers, and
        the answers (written by ``hyde_model``, else by the target). A question whose answers
        could not be written is absent, and recorded as a failure of ``target``."""
        spec = self.config.hyde_model or target
        key = (kset.name, spec.label)
        if key not in self._hyde:
            self._hyde[key] = self._write_hypotheses(probes, spec)
        found, errors = self._hyde[key]
        for qa_id, error in errors.items():
            self._fail(kset, "hyde", target.label, qa_id, error, items=len(self.config.prompts))
        return found

    def _write_hypotheses(
        self, probes: Sequence[Probe], spec: ModelSpec
    ) -> tuple[dict[str, SearchVector], dict[str, str]]:
        results = run_parsed(
            self.models.get(spec),
            load_prompt(HYDE_PROMPT, override_dir=self.config.prompt_dir),
            [{"question": probe.question} for probe in probes],
            parse_hypothetical_answers,
            params=self.config.generator_params,
            concurrency=self.config.concurrency,
            progress=self.progress,
        )
        answered = [(p, r.parsed.value) for p, r in zip(probes, results, strict=True) if r.parsed]
        vectors = self.embed([answer for _, answers in answered for answer in answers])
        found = {}
        for n, (probe, answers) in enumerate(answered):
            block = vectors[n * HYDE_ANSWERS : (n + 1) * HYDE_ANSWERS]
            found[probe.qa_id] = (unit_rows(block.mean(axis=0)), answers)
        errors = {
            probe.qa_id: str(result.error)
            for probe, result in zip(probes, results, strict=True)
            if result.parsed is None
        }
        return found, errors

    def _fail(
        self,
        kset: KnowledgeSet,
        stage: Stage,
        model: str,
        qa_id: str | None,
        error: str,
        *,
        items: int,
    ) -> None:
        self.failures.append(
            InputFailure(
                set=kset.name, stage=stage, model=model, qa_id=qa_id, items=items, error=error
            )
        )

    def synthetic_probes(self, kset: KnowledgeSet) -> list[Probe]:
        """``n_questions`` LLM-written questions near the set's clusters, none of them a set
        question; they may see the whole set."""
        spec = self.config.generator_model or self.config.models[0]
        clusters = question_clusters(
            kset.pairs,
            self.embed([pair.question for pair in kset.pairs]),
            math.ceil(self.config.n_questions / self.config.questions_per_cluster),
            self.config.seed,
        )
        results = run_parsed(
            self.models.get(spec),
            load_prompt(RANDOM_QUESTIONS_PROMPT, override_dir=self.config.prompt_dir),
            [
                {
                    "questions": "\n".join(f"- {q}" for q in cluster),
                    "n": self.config.questions_per_cluster,
                }
                for cluster in clusters
            ],
            parse_questions,
            params=self.config.generator_params,
            concurrency=self.config.concurrency,
            progress=self.progress,
        )
        seen = {normal_question(pair.question) for pair in kset.pairs}
        probes: list[Probe] = []
        for result in results:
            if result.parsed is None:
                self._fail(kset, "random_questions", spec.label, None, str(result.error), items=0)
                continue
            for question in unseen_questions(result.parsed.value, seen)[
                : self.config.questions_per_cluster
            ]:
                seen.add(normal_question(question))
                probes.append(
                    Probe(short_id("syn", kset.name, question), question, None, frozenset())
                )
        return probes[: self.config.n_questions]


# --- asking the target models ---------------------------------------------------------------


async def ask(
    llm: LLM, item: ExperimentInput, prompt: Prompt, params: GenerationParams
) -> ExperimentOutput:
    """The model's answer to one input, or an output carrying the error (never raises for a
    failed call, so one failure does not stop the run). ``source_hash`` hashes the input."""
    source = sha256_text(item.model_dump_json())
    try:
        response = await acall(
            llm,
            input_messages(item, prompt),
            params,
            prompt_id=prompt.id,
            prompt_version=prompt.version,
        )
    except Exception as exc:  # recorded; asked again on the next run
        return ExperimentOutput(
            input_id=item.id,
            error=f"{type(exc).__name__}: {exc}",
            provenance=llm_provenance(prompt, params, source_hash=source, model=llm.model_id),
        )
    return ExperimentOutput(
        input_id=item.id,
        answer=response.text,
        seconds=response.seconds,
        prompt_tokens=response.prompt_tokens,
        completion_tokens=response.completion_tokens,
        provenance=llm_provenance(
            prompt,
            params,
            source_hash=source,
            model=response.model,
            cached=response.cached,
            created_at=response.created_at,
        ),
    )


async def ask_all(
    llm: LLM,
    items: Sequence[ExperimentInput],
    prompts: Mapping[str, Prompt],
    params: GenerationParams,
    log: JsonlLog[ExperimentOutput],
    *,
    concurrency: int,
    advance: Advance,
) -> int:
    """Ask every item with at most ``concurrency`` calls in flight (capped by the backend),
    appending each output to ``log`` the moment it finishes. Returns the number answered."""

    async def one(item: ExperimentInput) -> bool:
        output = await ask(llm, item, prompts[item.system_prompt], params)
        log.append([output])
        return output.error is None

    return sum(await gather_bounded(llm, items, one, concurrency=concurrency, advance=advance))


# --- the run --------------------------------------------------------------------------------


def _cache(config: BenchConfig) -> ResponseCache | None:
    if config.cache is False:
        return None
    return ResponseCache(None if config.cache is True else Path(config.cache))


def _read_sets(config: BenchConfig) -> list[KnowledgeSet]:
    sets = [read_knowledge(path) for path in config.knowledge]
    names = [kset.name for kset in sets]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise InputError(f"knowledge[{index}] ({sets[index].path}): set name {name!r} repeats")
    return sets


def _plan(
    config: BenchConfig,
    sets: list[KnowledgeSet],
    models: _Models,
    embedder: DenseEmbedder,
    prompts: dict[str, Prompt],
    progress: bool,
) -> _Plan:
    builder = _Builder(config, models, embedder, prompts, progress)
    inputs: list[ExperimentInput] = []
    records = []
    for kset in sets:
        built, record = builder.build(kset)
        inputs += built
        records.append(record)
    return _Plan(inputs, records, builder.failures)


def _manifest(
    config: BenchConfig,
    plan: _Plan,
    embedder: DenseEmbedder,
    models: _Models,
    prompts: dict[str, Prompt],
    runs: list[RunSummary],
) -> RunManifest:
    return RunManifest(
        config=config.model_dump(mode="json"),
        config_hash=config.config_hash(),
        sets=plan.sets,
        embedder=embedder.info.model_dump(mode="json"),
        models={name: llm.model_id for name, llm in models.by_name.items()},
        prompts={pid: prompt.version for pid, prompt in prompts.items()},
        n_inputs=len(plan.inputs),
        input_failures=plan.failures,
        runs=runs,
    )


def run_experiment(
    config: BenchConfig,
    *,
    llms: Mapping[str, LLM] | None = None,
    embedder: DenseEmbedder | None = None,
    progress: bool = False,
) -> RunSummary:
    """Build every input, then ask each target model what is not answered yet.

    ``llms`` maps model names (:attr:`ModelSpec.label`) to ready backends, used instead of
    making them from their specs; ``embedder`` replaces loading ``config.embedder``. Each
    output is appended as its call finishes, so an interruption loses only calls in flight;
    a rerun skips answered inputs and asks failed ones again.
    """
    _refuse_inside_event_loop()
    started, clock = time.perf_counter(), BusyClock()
    summary = RunSummary(run_dir=str(config.out), started_at=utc_now())
    run = RunDir(config.out)
    models = _Models({}, clock, _cache(config), llms or {})
    prompts = {pid: load_prompt(pid, override_dir=config.prompt_dir) for pid in config.prompts}
    sets = _read_sets(config)  # bad input fails before the embedder loads
    for spec in _specs_used(config):
        models.get(spec)  # an unusable backend fails now too (models load lazily)
    embedder = embedder or load_dense_embedder(config.embedder)
    plan = _plan(config, sets, models, embedder, prompts, progress)
    runs: list[RunSummary] = []
    if run.manifest_path.exists():
        runs = read_manifest(run.manifest_path, RunManifest, RUN_FORMAT, "run manifest").runs
    run.write_inputs(plan.inputs)
    write_json(
        run.manifest_path,
        _manifest(config, plan, embedder, models, prompts, runs).model_dump(mode="json"),
    )
    summary.setup_seconds = time.perf_counter() - started
    _ask_pending(config, run, plan.inputs, models, prompts, summary, progress)
    summary.items = len(plan.inputs) + sum(failure.items for failure in plan.failures)
    summary.failed += sum(failure.items for failure in plan.failures)
    summary.input_failures = len(plan.failures)
    summary.wall_seconds = time.perf_counter() - started
    summary.llm_seconds = clock.seconds
    if summary.wall_seconds > 0:
        summary.overhead_share = max(0.0, 1 - clock.seconds / summary.wall_seconds)
    manifest = _manifest(config, plan, embedder, models, prompts, [*runs, summary])
    write_json(run.manifest_path, manifest.model_dump(mode="json"))
    return summary


def _refuse_inside_event_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise InputError(
        "run_experiment blocks and runs its own event loop: call it outside one, "
        "e.g. `await asyncio.to_thread(run_experiment, config)`"
    )


def _specs_used(config: BenchConfig) -> list[ModelSpec]:
    """The target models, and the HyDE and question-writing models when they are used."""
    helpers = [
        config.hyde_model if "hyde" in config.strategies else None,
        config.generator_model if config.mode == "random_synthetic" else None,
    ]
    return [*config.models, *(spec for spec in helpers if spec is not None)]


def _ask_pending(
    config: BenchConfig,
    run: RunDir,
    inputs: list[ExperimentInput],
    models: _Models,
    prompts: dict[str, Prompt],
    summary: RunSummary,
    progress: bool,
) -> None:
    """Ask every input without an answer, one model after the other; update ``summary``."""
    log = run.outputs()
    answered = {output.input_id for output in log.read() if output.error is None}
    pending = [item for item in inputs if item.id not in answered]
    summary.skipped = len(inputs) - len(pending)
    with progress_bar(len(pending), "bench run", progress) as advance:
        for spec in config.models:
            items = [item for item in pending if item.model == spec.label]
            if not items:
                continue
            done = asyncio.run(
                ask_all(
                    models.get(spec),
                    items,
                    prompts,
                    config.params,
                    log,
                    concurrency=config.concurrency,
                    advance=advance,
                ),
            )
            summary.done += done
            summary.failed += len(items) - done
