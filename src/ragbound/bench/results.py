"""Abstention and factuality rates of a benchmark run, with confidence intervals.

A *cell* is one (target model, retrieval strategy, system prompt). For each evaluator model
and cell (paper section 5):

- abstention rate = outputs judged ``yes`` / outputs with an abstention verdict;
- factuality rate = (tier_1 + tier_2) / non-abstentions (judged ``no``) with a factuality
  verdict. Only outputs judged not to abstain count, as in the paper's formula; a
  non-abstention without a usable factuality verdict is left out and counted
  (``factuality_excluded``).

Every other evaluation spec is reported as the share of each outcome. Nothing is dropped
silently: failed target calls, pending outputs, evaluator errors, unparsed replies and
missing verdicts are all counted per cell.

Intervals are Wilson score intervals by default: cells are small and their rates sit near 0
or 1, where the normal approximation undercovers and collapses to zero width; Wilson stays
inside [0, 1] near its nominal coverage. The percentile bootstrap (``interval="bootstrap"``)
also collapses to a point at 0 or n successes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ragbound.artifacts import read_json, read_manifest, utc_now, write_json
from ragbound.bench.models import Evaluation, ExperimentInput, ExperimentOutput
from ragbound.bench.rundir import RunDir
from ragbound.errors import ArtifactError, InputError
from ragbound.records import json_kind, read_records
from ragbound.stats import bootstrap_interval, wilson_interval

RESULTS_FORMAT = "ragbound.bench.results/1"
ABSTENTION, FACTUALITY = "abstention", "factuality"
ABSTAINED, NOT_ABSTAINED = "yes", "no"
FACTUAL_TIERS = ("tier_1", "tier_2")
TIERS = (*FACTUAL_TIERS, "tier_3")
ALLOWED = {ABSTENTION: (ABSTAINED, NOT_ABSTAINED), FACTUALITY: TIERS}
UNGROUPED = "(ungrouped)"
IntervalMethod = Literal["wilson", "bootstrap"]
INTERVAL_METHODS: tuple[str, ...] = ("wilson", "bootstrap")
CellKey = tuple[str, str, str]  # (model, strategy, system prompt)


class Rate(BaseModel):
    """``successes / n`` and its confidence interval; all None when ``n`` is 0."""

    successes: int
    n: int
    rate: float | None = None
    low: float | None = None
    high: float | None = None

    def text(self) -> str:
        """``0.62 [0.51, 0.72]``, or ``n/a`` for an empty cell."""
        if self.rate is None or self.low is None or self.high is None:
            return "n/a"
        return f"{self.rate:.2f} [{self.low:.2f}, {self.high:.2f}]"


class OutcomeCounts(BaseModel):
    """One spec's outcomes on the answered outputs of a cell.

    Factuality is tallied over the non-abstentions only, the outputs its rate counts.
    """

    outcomes: dict[str, int] = Field(default_factory=dict, description="usable verdicts")
    errors: int = Field(default=0, description="evaluator call failed")
    unparsed: int = Field(default=0, description="no allowed outcome in the reply")
    missing: int = Field(default=0, description="answered outputs not judged yet")

    @property
    def n_usable(self) -> int:
        return sum(self.outcomes.values())


class CellResult(BaseModel):
    """Rates of one (model, strategy, system prompt) cell, in one group if grouped."""

    model: str
    strategy: str
    system_prompt: str
    group: str | None = None
    n_inputs: int
    n_answered: int = Field(description="outputs without an error")
    n_output_errors: int = Field(description="target-model calls that failed")
    n_pending: int = Field(description="inputs with no output yet")
    n_evaluated: int = Field(description="answered outputs with a usable abstention verdict")
    abstention: Rate
    factuality: Rate
    factuality_excluded: int = Field(
        description="non-abstentions without a usable factuality verdict (left out of the rate)"
    )
    verdicts: dict[str, OutcomeCounts] = Field(description="per spec")
    shares: dict[str, dict[str, Rate]] = Field(
        default_factory=dict, description="custom specs: share of each outcome"
    )

    def problems(self) -> list[str]:
        """What was left out of the rates and why, in words (empty when nothing was)."""
        notes = _counted((self.n_output_errors, "output error(s)"), (self.n_pending, "pending"))
        for spec, counts in self.verdicts.items():
            found = _counted(
                (counts.errors, "error(s)"),
                (counts.unparsed, "unparsed"),
                (counts.missing, "not judged"),
            )
            if found:
                notes.append(f"{spec}: {', '.join(found)}")
        if self.factuality_excluded and FACTUALITY not in self.verdicts:
            notes.append(f"factuality: {self.factuality_excluded} not judged")
        return notes


def _counted(*counts: tuple[int, str]) -> list[str]:
    """``"3 pending"`` for each non-zero count."""
    return [f"{count} {what}" for count, what in counts if count]


class EvaluatorResults(BaseModel):
    """Every cell as judged by one evaluator model."""

    evaluator: str
    specs: list[str]
    cells: list[CellResult]
    by_group: list[CellResult] = Field(default_factory=list)
    stray_verdicts: int = Field(
        default=0, description="verdicts on inputs with no answered output (ignored)"
    )

    def custom_specs(self) -> list[str]:
        """Specs other than abstention and factuality (reported as outcome shares)."""
        return [spec for spec in self.specs if spec not in ALLOWED]

    def outcomes(self, spec: str) -> list[str]:
        """The outcomes of a custom spec that its share tables show, sorted."""
        return list(self.cells[0].shares.get(spec, {})) if self.cells else []


class BenchResults(BaseModel):
    """The results of a run: one entry per evaluator model."""

    format: Literal["ragbound.bench.results/1"] = RESULTS_FORMAT
    run_dir: str
    created_at: str
    confidence: float
    interval: IntervalMethod
    seed: int = Field(description="bootstrap seed (unused by Wilson)")
    n_inputs: int
    n_outputs: int = Field(description="inputs with an output, answered or failed")
    evaluators: list[EvaluatorResults]

    def interval_text(self) -> str:
        """``95% Wilson score intervals``: what the brackets in a table are."""
        method = "Wilson score" if self.interval == "wilson" else "percentile bootstrap"
        return f"{self.confidence:.0%} {method} intervals"

    def describe(self, evaluator: str) -> str:
        """A table title: who judged, the formulas and the interval used."""
        return (
            f"judged by {evaluator}: abstention = share judged 'yes'; factuality = "
            f"(tier 1 + tier 2) / non-abstentions; {self.interval_text()}"
        )


@dataclass(frozen=True)
class _Interval:
    """How every rate's interval is computed."""

    confidence: float
    method: IntervalMethod
    seed: int

    def rate(self, successes: int, n: int) -> Rate:
        if n == 0:
            return Rate(successes=0, n=0)
        if self.method == "wilson":
            low, high = wilson_interval(successes, n, self.confidence)
        else:
            values = [1.0] * successes + [0.0] * (n - successes)
            low, high = bootstrap_interval(values, confidence=self.confidence, seed=self.seed)
        return Rate(successes=successes, n=n, rate=successes / n, low=low, high=high)


def bench_results(
    run_dir: str | Path,
    evaluator: str | None = None,
    *,
    groups: Mapping[str, str] | None = None,
    confidence: float = 0.95,
    interval: str = "wilson",
    seed: int = 0,
) -> BenchResults:
    """Rates with intervals for every evaluator (or only ``evaluator``) of a run directory.

    ``groups`` maps a QA pair id to a group name (a domain, a knowledge file); when given,
    every cell is also broken down per group (``by_group``). ``interval`` is ``wilson`` or
    ``bootstrap`` (percentile, ``seed`` fixes the resamples).
    """
    settings = _settings(confidence, interval, seed)
    run = RunDir(Path(run_dir))
    inputs = run.inputs()
    outputs = latest_outputs(run.outputs().read())
    judged = _evaluations_by_evaluator(run, evaluator)
    per_evaluator = [
        _evaluator_results(name, specs, inputs, outputs, groups, settings)
        for name, specs in judged.items()
    ]
    return BenchResults(
        run_dir=str(run.root),
        created_at=utc_now(),
        confidence=confidence,
        interval=settings.method,
        seed=seed,
        n_inputs=len(inputs),
        n_outputs=sum(item.id in outputs for item in inputs),
        evaluators=per_evaluator,
    )


def write_results(run_dir: str | Path, results: BenchResults) -> Path:
    """Write ``results.json`` of the run directory atomically; return its path."""
    path = RunDir(Path(run_dir)).results_path
    write_json(path, results.model_dump(mode="json"))
    return path


def current_results(run_dir: str | Path) -> BenchResults:
    """``results.json`` if it is newer than every log it summarises, else freshly computed.

    A fresh file keeps what ``bench results`` was asked for (groups, interval method).
    """
    run = RunDir(Path(run_dir))
    sources = [run.inputs_path, run.outputs().path] + [log.path for log in run.evaluation_logs()]
    newest = max((path.stat().st_mtime_ns for path in sources if path.exists()), default=0)
    path = run.results_path
    if path.is_file() and path.stat().st_mtime_ns >= newest:
        try:
            return read_manifest(path, BenchResults, RESULTS_FORMAT, "benchmark results")
        except ArtifactError:
            pass  # derived data in an old or broken form: compute it again
    return bench_results(run.root, groups=manifest_groups(run.root))


def load_groups(path: Path) -> dict[str, str]:
    """A JSON object mapping QA pair id to group name (``{"qa-1a2b": "pension"}``).

    Raises InputError (``FILE:LINE (field 'qa-1a2b'): problem``) for a missing file, invalid
    UTF-8 or JSON, a file that is not one object, and a group name that is not a string.
    """
    records = read_records(path, format="json")
    if len(records) != 1 or not isinstance(records[0].data, dict):
        raise InputError(f"{path}: expected a JSON object of QA id -> group name")
    mapping = records[0].data
    for key, value in mapping.items():
        if not isinstance(value, str):
            raise records[0].error(f"group name must be a string, got {json_kind(value)}", key)
    return mapping


def manifest_groups(run_dir: str | Path) -> dict[str, str] | None:
    """QA id -> knowledge-set name from ``run.json``'s ``sets``, when the run has several.

    Read leniently: a manifest without that list (or with one set) gives None.
    """
    path = RunDir(Path(run_dir)).manifest_path
    if not path.is_file():
        return None
    raw = read_json(path, "run manifest")
    sets = raw.get("sets") if isinstance(raw, dict) else None
    if not isinstance(sets, list) or len(sets) < 2:
        return None
    groups: dict[str, str] = {}
    for entry in sets:
        if not isinstance(entry, dict) or not isinstance(entry.get("qa_ids"), list):
            return None
        groups |= {str(qa_id): str(entry.get("name")) for qa_id in entry["qa_ids"]}
    return groups


def _settings(confidence: float, interval: str, seed: int) -> _Interval:
    if not 0.0 < confidence < 1.0:
        raise InputError(f"confidence must be in (0, 1), got {confidence!r}")
    if interval not in INTERVAL_METHODS:
        raise InputError(f"unknown interval {interval!r}; valid: {', '.join(INTERVAL_METHODS)}")
    return _Interval(confidence, "wilson" if interval == "wilson" else "bootstrap", seed)


def latest_outputs(records: Iterable[ExperimentOutput]) -> dict[str, ExperimentOutput]:
    """One output per input: the last answered one, else the last failure (retries append)."""
    latest: dict[str, ExperimentOutput] = {}
    for record in records:
        kept = latest.get(record.input_id)
        if kept is None or record.error is None or kept.error is not None:
            latest[record.input_id] = record
    return latest


def latest_verdicts(records: Iterable[Evaluation]) -> dict[str, Evaluation]:
    """One verdict per input: the last with an outcome, else the last failure."""
    latest: dict[str, Evaluation] = {}
    for record in records:
        kept = latest.get(record.input_id)
        if kept is None or record.outcome is not None or kept.outcome is None:
            latest[record.input_id] = record
    return latest


def latest_evaluations(run_dir: str | Path) -> dict[tuple[str, str], dict[str, Evaluation]]:
    """(spec, evaluator) -> input id -> the record that counts (newest with an outcome)."""
    grouped: dict[tuple[str, str], list[Evaluation]] = defaultdict(list)
    for log in RunDir(Path(run_dir)).evaluation_logs():
        for record in log.read():
            grouped[(record.spec, record.evaluator)].append(record)
    return {key: latest_verdicts(records) for key, records in sorted(grouped.items())}


def _evaluations_by_evaluator(
    run: RunDir, evaluator: str | None
) -> dict[str, dict[str, dict[str, Evaluation]]]:
    """evaluator -> spec -> input id -> verdict, for every evaluation log of the run."""
    latest = latest_evaluations(run.root)
    evaluators = sorted({name for _, name in latest})
    if not evaluators:
        raise ArtifactError(
            f"{run.root}: no evaluations yet; run `ragbound bench evaluate {run.root}` first"
        )
    if evaluator is not None and evaluator not in evaluators:
        raise InputError(f"no evaluations by {evaluator!r}; evaluators: {', '.join(evaluators)}")
    return {
        name: {spec: verdicts for (spec, judge), verdicts in latest.items() if judge == name}
        for name in ([evaluator] if evaluator is not None else evaluators)
    }


def _evaluator_results(
    evaluator: str,
    specs: dict[str, dict[str, Evaluation]],
    inputs: list[ExperimentInput],
    outputs: dict[str, ExperimentOutput],
    groups: Mapping[str, str] | None,
    settings: _Interval,
) -> EvaluatorResults:
    answered = {key for key, output in outputs.items() if output.error is None}
    outcomes = _custom_outcomes(specs, answered)
    cells = [
        _cell(key, None, members, outputs, specs, outcomes, settings)
        for key, members in _cells(inputs).items()
    ]
    by_group = []
    if groups is not None:
        for group, members_by_cell in _grouped_cells(inputs, groups).items():
            by_group += [
                _cell(key, group, members, outputs, specs, outcomes, settings)
                for key, members in members_by_cell.items()
            ]
    stray = sum(key not in answered for verdicts in specs.values() for key in verdicts)
    return EvaluatorResults(
        evaluator=evaluator, specs=list(specs), cells=cells, by_group=by_group, stray_verdicts=stray
    )


def _cells(inputs: Iterable[ExperimentInput]) -> dict[CellKey, list[str]]:
    """Input ids per cell, cells in order of first appearance."""
    cells: dict[CellKey, list[str]] = defaultdict(list)
    for item in inputs:
        cells[(item.model, item.strategy, item.system_prompt)].append(item.id)
    return cells


def _grouped_cells(
    inputs: list[ExperimentInput], groups: Mapping[str, str]
) -> dict[str, dict[CellKey, list[str]]]:
    """Cells per group (sorted by group name); inputs of unmapped QA ids are ``(ungrouped)``."""
    members: dict[str, list[ExperimentInput]] = defaultdict(list)
    for item in inputs:
        members[groups.get(item.qa_id, UNGROUPED)].append(item)
    return {group: _cells(members[group]) for group in sorted(members)}


def _custom_outcomes(
    specs: dict[str, dict[str, Evaluation]], answered: set[str]
) -> dict[str, list[str]]:
    """Every outcome seen per custom spec, so each cell reports the same columns."""
    return {
        spec: sorted(
            {v.outcome for key, v in verdicts.items() if key in answered and v.outcome is not None}
        )
        for spec, verdicts in specs.items()
        if spec not in ALLOWED
    }


def _usable(verdict: Evaluation | None, spec: str) -> str | None:
    """The verdict's outcome if it is one the spec allows (any outcome for custom specs)."""
    if verdict is None or verdict.outcome is None:
        return None
    allowed = ALLOWED.get(spec)
    return verdict.outcome if allowed is None or verdict.outcome in allowed else None


def _tally(spec: str, ids: list[str], verdicts: dict[str, Evaluation]) -> OutcomeCounts:
    counts = OutcomeCounts()
    for key in ids:
        verdict = verdicts.get(key)
        outcome = _usable(verdict, spec)
        if outcome is not None:
            counts.outcomes[outcome] = counts.outcomes.get(outcome, 0) + 1
        elif verdict is None:
            counts.missing += 1
        elif verdict.outcome is None and verdict.raw is None:
            counts.errors += 1
        else:
            counts.unparsed += 1  # no outcome in the reply, or one the spec does not allow
    return counts


def _cell(
    key: CellKey,
    group: str | None,
    ids: list[str],
    outputs: dict[str, ExperimentOutput],
    specs: dict[str, dict[str, Evaluation]],
    custom_outcomes: dict[str, list[str]],
    settings: _Interval,
) -> CellResult:
    answered = [i for i in ids if i in outputs and outputs[i].error is None]
    verdicts = {spec: _tally(spec, answered, found) for spec, found in specs.items()}
    abstention = verdicts.get(ABSTENTION, OutcomeCounts())
    not_abstained = [
        i
        for i in answered
        if _usable(specs.get(ABSTENTION, {}).get(i), ABSTENTION) == NOT_ABSTAINED
    ]
    tiers = _tally(FACTUALITY, not_abstained, specs.get(FACTUALITY, {}))
    if FACTUALITY in verdicts:
        verdicts[FACTUALITY] = tiers  # judged only where it counts: the non-abstentions
    factual = sum(tiers.outcomes.get(tier, 0) for tier in FACTUAL_TIERS)
    return CellResult(
        model=key[0],
        strategy=key[1],
        system_prompt=key[2],
        group=group,
        n_inputs=len(ids),
        n_answered=len(answered),
        n_output_errors=sum(i in outputs and outputs[i].error is not None for i in ids),
        n_pending=sum(i not in outputs for i in ids),
        n_evaluated=abstention.n_usable,
        abstention=settings.rate(abstention.outcomes.get(ABSTAINED, 0), abstention.n_usable),
        factuality=settings.rate(factual, tiers.n_usable),
        factuality_excluded=len(not_abstained) - tiers.n_usable,
        verdicts=verdicts,
        shares=_shares(verdicts, custom_outcomes, settings),
    )


def _shares(
    verdicts: dict[str, OutcomeCounts], custom_outcomes: dict[str, list[str]], settings: _Interval
) -> dict[str, dict[str, Rate]]:
    """Share of each outcome among a cell's usable verdicts, per custom spec."""
    return {
        spec: {
            outcome: settings.rate(verdicts[spec].outcomes.get(outcome, 0), verdicts[spec].n_usable)
            for outcome in outcomes
        }
        for spec, outcomes in custom_outcomes.items()
    }
