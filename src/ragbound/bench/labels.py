"""Human labels: a stratified sample, a labelling session (terminal here, web page in
``label_web``) and agreement between annotators and with the evaluator models.

Every label is appended to ``labels/ANNOTATOR.jsonl`` the moment it is given, so an
interrupted session loses nothing and the next one resumes where it stopped. When an
annotator labels the same item and task again, the newest label counts.

Factuality is asked only of answers the annotator judged not to be abstentions (the paper's
factuality rate counts non-abstentions only), so an abstention labelled ``yes`` closes the item.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from ragbound.artifacts import read_manifest, utc_now, write_json
from ragbound.bench.evaluate import BUILTIN_SPECS, DEFAULT_SPECS, latest_evaluations
from ragbound.bench.models import (
    SAMPLE_FORMAT,
    Evaluation,
    EvaluationSpec,
    ExperimentInput,
    ExperimentOutput,
    Label,
)
from ragbound.bench.results import ABSTAINED, ABSTENTION, FACTUALITY, latest_outputs
from ragbound.bench.rundir import RunDir
from ragbound.errors import ArtifactError, InputError
from ragbound.stats import accuracy, cohen_kappa, confusion_matrix, fleiss_kappa, rating_counts

CONTEXT_ITEMS = 5  # context pieces shown per item (the most similar first)
CONTEXT_CHARS = 400  # characters shown per context piece
MAX_NAME = 100
# task -> (task, value) that makes it moot: no factuality for an answer that abstained
SKIP_WHEN: dict[str, tuple[str, str]] = {FACTUALITY: (ABSTENTION, ABSTAINED)}
ALLOCATION = "proportional to stratum size, rounded by largest remainder, at least one per stratum"

Stratum = tuple[str, str, str]  # (model, strategy, system prompt)


# ---------------------------------------------------------------- sampling


class StratumCount(BaseModel):
    """How many answered outputs a stratum has and how many were sampled from it."""

    model: str
    strategy: str
    system_prompt: str
    population: int
    sampled: int


class LabelSample(BaseModel):
    """The items shown to annotators, in the order shown (``labels/sample.json``)."""

    format: Literal["ragbound.bench.sample/1"] = SAMPLE_FORMAT
    created_at: str
    seed: int
    n_requested: int
    n_population: int = Field(description="answered outputs sampled from")
    allocation: str = ALLOCATION
    strata: list[StratumCount]
    input_ids: list[str]


def allocate(sizes: Sequence[int], n: int) -> list[int]:
    """Items to draw per stratum: ``n`` shared in proportion to ``sizes``, at least one each.

    Quotas ``n * size / total`` are rounded down (but to at least one), then the items still
    missing go one at a time to the strata with the largest remainders (ties: the earlier
    stratum). If the floor of one per stratum overshoots ``n``, items come back from the
    strata furthest over their quota, never below one, so with more strata than ``n`` every
    stratum still gets one. No stratum gets more than its size; all of them when ``n`` covers
    the total.
    """
    if n < 1:
        raise InputError(f"the sample size must be at least 1, got {n}")
    total = sum(sizes)
    if total <= n:
        return list(sizes)
    quota = [n * size / total for size in sizes]
    counts = [
        min(size, max(1, int(q))) if size else 0 for size, q in zip(sizes, quota, strict=True)
    ]
    while sum(counts) < n:
        open_ = [i for i, size in enumerate(sizes) if counts[i] < size]
        counts[max(open_, key=lambda i: (quota[i] - counts[i], -i))] += 1
    while sum(counts) > n and any(count > 1 for count in counts):
        over = [i for i, count in enumerate(counts) if count > 1]
        counts[max(over, key=lambda i: (counts[i] - quota[i], -i))] -= 1
    return counts


def _draw(run: RunDir, n: int, seed: int) -> LabelSample:
    outputs = latest_outputs(run.outputs().read())
    answered = {key for key, out in outputs.items() if out.error is None and out.answer is not None}
    items = [item for item in run.inputs() if item.id in answered]
    if not items:
        raise InputError(f"{run.root}: no answered outputs to label; run `ragbound bench run`")
    strata: dict[Stratum, list[str]] = defaultdict(list)
    for item in sorted(items, key=lambda i: i.id):
        strata[(item.model, item.strategy, item.system_prompt)].append(item.id)
    keys = sorted(strata)
    counts = allocate([len(strata[key]) for key in keys], n)
    rng = np.random.default_rng(seed)
    chosen = [
        str(member)
        for key, count in zip(keys, counts, strict=True)
        for member in rng.choice(strata[key], size=count, replace=False)
    ]
    order = rng.permutation(len(chosen))  # strata interleaved, not shown in blocks
    return LabelSample(
        created_at=utc_now(),
        seed=seed,
        n_requested=n,
        n_population=len(items),
        strata=[
            StratumCount(
                model=key[0],
                strategy=key[1],
                system_prompt=key[2],
                population=len(strata[key]),
                sampled=count,
            )
            for key, count in zip(keys, counts, strict=True)
        ],
        input_ids=[chosen[i] for i in order],
    )


def sample_for_labelling(run_dir: str | Path, n: int = 200, seed: int = 0) -> LabelSample:
    """The stratified sample of answered outputs to label (model x strategy x system prompt).

    Drawn once and saved atomically to ``labels/sample.json``; later calls reuse the saved
    sample whatever ``n`` and ``seed`` say, so every annotator sees the same items.
    """
    run = RunDir(Path(run_dir))
    if run.sample_path.exists():
        return read_manifest(run.sample_path, LabelSample, SAMPLE_FORMAT, "label sample")
    sample = _draw(run, n, seed)
    write_json(run.sample_path, sample.model_dump(mode="json"))
    return sample


# ---------------------------------------------------------------- what an annotator sees


class LabelItem(BaseModel):
    """One output as shown to an annotator (context trimmed)."""

    input_id: str
    position: int = Field(description="1-based place in the sample")
    question: str
    expected_answer: str | None
    answer: str
    model: str
    strategy: str
    system_prompt: str
    context: list[str] = Field(description="the most similar pieces, each trimmed")
    n_context: int = Field(description="context pieces the model was given")


class TaskView(BaseModel):
    """A labelling task: its outcomes, and the label that makes it moot (if any)."""

    name: str
    outcomes: list[str]
    skip_if: dict[str, str] | None = Field(default=None, description="{task, value}")


def trim(text: str, limit: int = CONTEXT_CHARS) -> str:
    """``text`` cut to ``limit`` characters at a word boundary, with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut + " …"


def _context(item: ExperimentInput) -> list[str]:
    pieces = list(item.context)
    if all(piece.similarity is not None for piece in pieces):
        pieces.sort(key=lambda piece: -(piece.similarity or 0.0))
    return [f"[{p.number}] {trim(p.text)}" for p in pieces[:CONTEXT_ITEMS]]


def resolve_tasks(tasks: Sequence[str | EvaluationSpec]) -> list[EvaluationSpec]:
    """Label tasks by spec name (``abstention``, ``factuality``) or as custom specs."""
    chosen = []
    for task in tasks:
        if isinstance(task, EvaluationSpec):
            chosen.append(task)
        elif task in BUILTIN_SPECS:
            chosen.append(BUILTIN_SPECS[task])
        else:
            raise InputError(f"unknown label task {task!r}; known: {', '.join(BUILTIN_SPECS)}")
    if not chosen:
        raise InputError("give at least one label task")
    return list({spec.name: spec for spec in chosen}.values())


def check_annotator(name: str) -> str:
    """The annotator name, stripped; it must be non-blank and at most 100 characters."""
    name = name.strip()
    if not name or len(name) > MAX_NAME:
        raise InputError(f"annotator name must be 1 to {MAX_NAME} characters, got {name!r}")
    return name


class LabelSession:
    """Labelling of a run's sample by any number of annotators under one set of tasks.

    Shared by the terminal labeller and the web server; writes are serialised by a lock.
    """

    def __init__(
        self,
        run_dir: str | Path,
        tasks: Sequence[str | EvaluationSpec] = DEFAULT_SPECS,
        *,
        n: int = 200,
        seed: int = 0,
    ) -> None:
        self.run = RunDir(Path(run_dir))
        self.tasks = resolve_tasks(tasks)
        self.sample = sample_for_labelling(self.run.root, n, seed)
        inputs = {item.id: item for item in self.run.inputs()}
        answers = latest_outputs(self.run.outputs().read())
        missing = [key for key in self.sample.input_ids if key not in inputs or key not in answers]
        if missing:
            raise ArtifactError(
                f"{self.run.sample_path} names outputs the run lacks ({missing[0]}, ...); "
                "delete it to draw a new sample"
            )
        self.items = [
            self._item(position, inputs[key], answers[key].answer or "")
            for position, key in enumerate(self.sample.input_ids, 1)
        ]
        self._by_id = {item.input_id: item for item in self.items}
        self._lock = threading.Lock()

    @staticmethod
    def _item(position: int, item: ExperimentInput, answer: str) -> LabelItem:
        return LabelItem(
            input_id=item.id,
            position=position,
            question=item.question,
            expected_answer=item.expected_answer,
            answer=answer,
            model=item.model,
            strategy=item.strategy,
            system_prompt=item.system_prompt,
            context=_context(item),
            n_context=len(item.context),
        )

    def task_views(self) -> list[TaskView]:
        """The tasks as the web page needs them."""
        names = {spec.name for spec in self.tasks}
        return [
            TaskView(
                name=spec.name,
                outcomes=list(spec.outcomes),
                skip_if=_skip_rule(spec.name, names),
            )
            for spec in self.tasks
        ]

    def given(self, annotator: str) -> dict[str, dict[str, str]]:
        """input id -> task -> the annotator's newest label."""
        found: dict[str, dict[str, str]] = defaultdict(dict)
        with self._lock:  # a read beside a half-written line would drop it as torn
            labels = self.run.labels(check_annotator(annotator)).read()
        for label in labels:
            found[label.input_id][label.task] = label.value
        return found

    def open_tasks(self, labels: dict[str, str]) -> list[EvaluationSpec]:
        """Tasks an item still needs, given the labels it has."""
        names = {spec.name for spec in self.tasks}
        return [
            spec
            for spec in self.tasks
            if spec.name not in labels and not _moot(spec.name, labels, names)
        ]

    def pending(self, annotator: str) -> list[LabelItem]:
        """Items the annotator has not finished, in sample order."""
        given = self.given(annotator)
        return [item for item in self.items if self.open_tasks(given.get(item.input_id, {}))]

    def record(
        self, annotator: str, input_id: str, values: dict[str, str], note: str = ""
    ) -> list[Label]:
        """Check and append the annotator's labels for one item; returns what was written."""
        annotator = check_annotator(annotator)
        if input_id not in self._by_id:
            raise InputError(f"input {input_id!r} is not in the label sample")
        if not values:
            raise InputError("no labels given")
        specs = {spec.name: spec for spec in self.tasks}
        labels = [
            Label(
                input_id=input_id,
                annotator=annotator,
                task=task,
                value=_canonical(specs, task, value),
                note=note,
                created_at=utc_now(),
            )
            for task, value in values.items()
        ]
        with self._lock:
            self.run.labels(annotator).append(labels)
        return labels


def _skip_rule(task: str, names: set[str]) -> dict[str, str] | None:
    rule = SKIP_WHEN.get(task)
    return {"task": rule[0], "value": rule[1]} if rule and rule[0] in names else None


def _moot(task: str, labels: dict[str, str], names: set[str]) -> bool:
    rule = SKIP_WHEN.get(task)
    return rule is not None and rule[0] in names and labels.get(rule[0]) == rule[1]


def _canonical(specs: dict[str, EvaluationSpec], task: str, value: object) -> str:
    if task not in specs:
        raise InputError(f"unknown task {task!r}; tasks: {', '.join(specs)}")
    allowed = {outcome.casefold(): outcome for outcome in specs[task].outcomes}
    if not isinstance(value, str) or value.strip().casefold() not in allowed:
        raise InputError(f"{task}: {value!r} is not one of {specs[task].outcomes}")
    return allowed[value.strip().casefold()]


# ---------------------------------------------------------------- terminal labeller


class LabelProgress(BaseModel):
    """Where an annotator stands after a session."""

    annotator: str
    total: int = Field(description="items in the sample")
    finished: int = Field(description="items with every task labelled")
    given: int = Field(description="labels given in this session")
    interrupted: bool = False


def choice_keys(outcomes: Sequence[str]) -> dict[str, str]:
    """Accepted answers -> outcome: the number (1-based), the outcome itself, and its first
    letter when the first letters are all different (``y``/``n`` for yes/no)."""
    keys = {str(i): outcome for i, outcome in enumerate(outcomes, 1)}
    keys |= {outcome.casefold(): outcome for outcome in outcomes}
    initials = [outcome[0].casefold() for outcome in outcomes]
    if len(set(initials)) == len(initials):
        keys |= dict(zip(initials, outcomes, strict=True))
    return keys


def _menu(outcomes: Sequence[str]) -> str:
    keys = choice_keys(outcomes)
    parts = []
    for i, outcome in enumerate(outcomes, 1):
        letter = outcome[0].casefold()
        shortcut = f"{i}/{letter}" if keys.get(letter) == outcome else str(i)
        parts.append(f"[{shortcut}] {outcome}")
    return "  ".join(parts)


def _show(out: Any, item: LabelItem, total: int) -> None:
    from rich.panel import Panel
    from rich.text import Text

    out.rule(
        f"item {item.position}/{total} · {item.model} · {item.strategy} · {item.system_prompt}"
    )
    out.print(Panel(Text(item.question), title="question", title_align="left"))
    expected = item.expected_answer if item.expected_answer is not None else "(none)"
    out.print(Panel(Text(expected), title="expected answer", title_align="left"))
    shown = f"{len(item.context)} of {item.n_context}, trimmed"
    context = Text("\n".join(item.context) or "(no context)", style="dim")
    out.print(Panel(context, title=f"context ({shown})", title_align="left"))
    out.print(Panel(Text(item.answer), title="model answer", title_align="left"))


def _ask(ask: Callable[[str], str], out: Any, spec: EvaluationSpec) -> str:
    keys = choice_keys(spec.outcomes)
    while True:
        reply = ask(f"{spec.name}? {_menu(spec.outcomes)} > ").strip().casefold()
        if reply in keys:
            return keys[reply]
        out.print(f"answer with one of {', '.join(sorted(keys))}", style="red", markup=False)


def label_terminal(
    run_dir: str | Path,
    annotator: str,
    tasks: Sequence[str | EvaluationSpec] = DEFAULT_SPECS,
    *,
    n: int = 200,
    seed: int = 0,
    console: Any = None,
    ask: Callable[[str], str] | None = None,
) -> LabelProgress:
    """Label the run's sample in the terminal, skipping what ``annotator`` already labelled.

    Each answer is written the moment it is given; Ctrl-C or end of input stops the session
    and loses nothing given. ``ask`` reads one answer (default: a line from the terminal).
    """
    from rich.console import Console

    session = LabelSession(run_dir, tasks, n=n, seed=seed)
    annotator = check_annotator(annotator)
    out = console or Console()
    read = ask or (lambda prompt: out.input(prompt, markup=False))
    given = session.given(annotator)
    count, interrupted = 0, False
    try:
        for item in session.pending(annotator):
            labels = given.setdefault(item.input_id, {})
            _show(out, item, len(session.items))
            while spec := next(iter(session.open_tasks(labels)), None):
                labels[spec.name] = _ask(read, out, spec)
                session.record(annotator, item.input_id, {spec.name: labels[spec.name]})
                count += 1
    except (KeyboardInterrupt, EOFError):
        interrupted = True
        out.print(f"\nstopped; {count} label(s) of this session are saved")
    remaining = len(session.pending(annotator))
    return LabelProgress(
        annotator=annotator,
        total=len(session.items),
        finished=len(session.items) - remaining,
        given=count,
        interrupted=interrupted,
    )


# ---------------------------------------------------------------- agreement


class PairAgreement(BaseModel):
    """Cohen's kappa of two annotators on the items both labelled for a task."""

    task: str
    annotators: list[str]
    n_items: int
    observed: float | None = Field(description="share of items with the same label")
    kappa: float | None


class FleissAgreement(BaseModel):
    """Fleiss' kappa of every annotator of a task on the items all of them labelled."""

    task: str
    annotators: list[str]
    n_items: int
    kappa: float | None


class Disagreement(BaseModel):
    """An item whose annotators gave different labels for a task (to adjudicate)."""

    input_id: str
    task: str
    labels: dict[str, str] = Field(description="annotator -> label")
    question: str
    answer: str | None


class EvaluatorAgreement(BaseModel):
    """An evaluator model against the human majority label, for one task.

    ``confusion[i][j]`` counts items the humans put in ``outcomes[i]`` and the evaluator in
    ``outcomes[j]``. Items whose human labels tie are ``unresolved`` and left out.
    """

    task: str
    evaluator: str
    n_items: int
    accuracy: float | None
    kappa: float | None
    outcomes: list[str]
    confusion: list[list[int]]
    unresolved: list[str] = Field(default_factory=list, description="input ids, humans tied")
    not_evaluated: int = Field(default=0, description="human-labelled items the model never saw")
    evaluator_failed: int = Field(default=0, description="items where the model gave no outcome")


class AgreementReport(BaseModel):
    """Agreement between annotators and between evaluator models and the annotators."""

    run_dir: str
    created_at: str
    annotators: list[str]
    tasks: list[str]
    n_labels: int = Field(description="labels counted (the newest per annotator, item, task)")
    pairs: list[PairAgreement]
    fleiss: list[FleissAgreement]
    disagreements: list[Disagreement]
    evaluators: list[EvaluatorAgreement]


HumanLabels = dict[str, dict[str, dict[str, str]]]  # task -> input id -> annotator -> value


def _human_labels(run: RunDir) -> HumanLabels:
    table: HumanLabels = defaultdict(lambda: defaultdict(dict))
    for log in run.label_logs():
        for label in log.read():
            table[label.task][label.input_id][label.annotator] = label.value
    return table


def _ordered_tasks(names: Iterable[str]) -> list[str]:
    names = set(names)
    return [t for t in BUILTIN_SPECS if t in names] + sorted(names - set(BUILTIN_SPECS))


def _outcome_order(task: str, seen: Iterable[str]) -> list[str]:
    base = list(BUILTIN_SPECS[task].outcomes) if task in BUILTIN_SPECS else []
    return base + sorted(set(seen) - set(base))


def _pairs(
    task: str, items: dict[str, dict[str, str]], annotators: list[str]
) -> list[PairAgreement]:
    found = []
    for i, first in enumerate(annotators):
        for second in annotators[i + 1 :]:
            both = [labels for labels in items.values() if first in labels and second in labels]
            a, b = [x[first] for x in both], [x[second] for x in both]
            found.append(
                PairAgreement(
                    task=task,
                    annotators=[first, second],
                    n_items=len(both),
                    observed=accuracy(a, b) if both else None,
                    kappa=cohen_kappa(a, b) if both else None,
                )
            )
    return found


def _fleiss(task: str, items: dict[str, dict[str, str]], annotators: list[str]) -> FleissAgreement:
    full = [labels for labels in items.values() if all(a in labels for a in annotators)]
    ratings = [[labels[a] for a in annotators] for labels in full]
    order = _outcome_order(task, (value for row in ratings for value in row))
    kappa = fleiss_kappa(rating_counts(ratings, order)) if full else None
    return FleissAgreement(task=task, annotators=annotators, n_items=len(full), kappa=kappa)


def _majority(labels: dict[str, str]) -> str | None:
    """The most common label; None on a tie for first place."""
    ranked = Counter(labels.values()).most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return None
    return ranked[0][0]


def _versus(
    task: str, evaluator: str, items: dict[str, dict[str, str]], verdicts: dict[str, Evaluation]
) -> EvaluatorAgreement:
    truth, predicted, unresolved, missing, failed = [], [], [], 0, 0
    for input_id, labels in sorted(items.items()):
        majority = _majority(labels)
        verdict = verdicts.get(input_id)
        if majority is None:
            unresolved.append(input_id)
        elif verdict is None:
            missing += 1
        elif verdict.outcome is None:
            failed += 1
        else:
            truth.append(majority)
            predicted.append(verdict.outcome)
    order = _outcome_order(task, [*truth, *predicted])
    matrix = confusion_matrix(truth, predicted, order) if truth else np.zeros((len(order),) * 2)
    return EvaluatorAgreement(
        task=task,
        evaluator=evaluator,
        n_items=len(truth),
        accuracy=accuracy(truth, predicted) if truth else None,
        kappa=cohen_kappa(truth, predicted, order) if truth else None,
        outcomes=order,
        confusion=matrix.astype(int).tolist(),
        unresolved=unresolved,
        not_evaluated=missing,
        evaluator_failed=failed,
    )


def _disagreements(
    task: str,
    items: dict[str, dict[str, str]],
    inputs: dict[str, ExperimentInput],
    answers: dict[str, ExperimentOutput],
) -> list[Disagreement]:
    found = []
    for input_id, labels in sorted(items.items()):
        if len(set(labels.values())) > 1:
            item, output = inputs.get(input_id), answers.get(input_id)
            found.append(
                Disagreement(
                    input_id=input_id,
                    task=task,
                    labels=dict(sorted(labels.items())),
                    question=item.question if item else "",
                    answer=output.answer if output else None,
                )
            )
    return found


def agreement_report(run_dir: str | Path) -> AgreementReport:
    """Kappas between annotators (pairs: Cohen; all: Fleiss), items to adjudicate, and each
    evaluator model against the human majority (accuracy, Cohen's kappa, confusion matrix)."""
    run = RunDir(Path(run_dir))
    human = _human_labels(run)
    if not human:
        raise ArtifactError(
            f"{run.root}: no labels yet; run `ragbound bench label {run.root} --annotator NAME`"
        )
    inputs = {item.id: item for item in run.inputs()}
    answers = latest_outputs(run.outputs().read())
    tasks = _ordered_tasks(human)
    evaluations = latest_evaluations(run.root)
    pairs, fleiss, disagreements, evaluators = [], [], [], []
    for task in tasks:
        items = human[task]
        annotators = sorted({name for labels in items.values() for name in labels})
        pairs += _pairs(task, items, annotators)
        if len(annotators) > 1:
            fleiss.append(_fleiss(task, items, annotators))
        disagreements += _disagreements(task, items, inputs, answers)
        evaluators += [
            _versus(task, evaluator, items, verdicts)
            for (spec, evaluator), verdicts in evaluations.items()
            if spec == task
        ]
    return AgreementReport(
        run_dir=str(run.root),
        created_at=utc_now(),
        annotators=sorted({a for items in human.values() for x in items.values() for a in x}),
        tasks=tasks,
        n_labels=sum(len(x) for items in human.values() for x in items.values()),
        pairs=pairs,
        fleiss=fleiss,
        disagreements=disagreements,
        evaluators=evaluators,
    )
