"""A run folder: what ``evaluate``, ``shift`` and the benchmark record for ``ragbound report``.

Files (each optional, all plain JSON, written atomically):

- ``evaluation.json``: the EvaluationReport, plus every statistic's per-query values on the
  in- and out-of-knowledge test queries and its critical value (histograms, ROC curves), and
  the EvaluationInputs it ran on (absent when its recorder kept none, as a benchmark's);
- ``shift.json``: the last batch ShiftReport;
- ``monitor.jsonl``: one WindowResult per tested window, appended as the monitor runs;
- ``shift_rates.json``: a shift-rate experiment (paper Figure 5: the share of batches the KS
  test found shifted, p <= alpha), written by the benchmark (``benchmarks/shift.py``) in the
  shape ``report.plots.shift_curves`` reads;
- ``tripwire_tuning.json``: a tripwire rule search with its trade-off surface (RAR Figure 3);
- ``inputs.jsonl`` and the rest of a benchmark run directory (``ragbound.bench.rundir``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ragbound.artifacts import iter_jsonl, read_json, write_json
from ragbound.bench.results import BenchResults, current_results
from ragbound.bench.rundir import RunDir
from ragbound.errors import InputError
from ragbound.results import EvaluationInputs, EvaluationReport, ShiftReport, WindowResult
from ragbound.tripwires.tune import TuningResult

EVALUATION = "evaluation.json"
SHIFT = "shift.json"
MONITOR = "monitor.jsonl"
SHIFT_RATES = "shift_rates.json"
TUNING = "tripwire_tuning.json"


class ScoredValues(Protocol):
    """One statistic's values on the in- and out-of-knowledge test queries (higher = more
    out-of-knowledge) and its critical value; ``detect.evaluate.ScoredSets`` is one."""

    @property
    def scores_in(self) -> Iterable[float]: ...

    @property
    def scores_out(self) -> Iterable[float]: ...

    @property
    def critical_value(self) -> float: ...


@dataclass
class RunData:
    """Everything a run folder holds; ``None`` / empty where a part was not recorded."""

    path: Path
    evaluation: EvaluationReport | None = None
    inputs: EvaluationInputs | None = None
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)
    shift: ShiftReport | None = None
    windows: list[WindowResult] = field(default_factory=list)
    shift_rates: dict[str, Any] | None = None
    tuning: TuningResult | None = None
    bench: BenchResults | None = None

    def is_empty(self) -> bool:
        parts = (self.evaluation, self.shift, self.windows, self.shift_rates, self.tuning)
        return not any(parts) and self.bench is None


def record_evaluation(
    run_dir: Path,
    report: EvaluationReport,
    sets: Mapping[str, ScoredValues],
    inputs: EvaluationInputs | None = None,
) -> None:
    """Save an evaluation with its per-query statistic values and the inputs it ran on."""
    payload: dict[str, Any] = {
        "report": report.model_dump(mode="json"),
        "scores": score_lists(sets),
    }
    if inputs is not None:
        payload["inputs"] = inputs.model_dump(mode="json")
    write_json(run_dir / EVALUATION, payload)


def score_lists(sets: Mapping[str, ScoredValues]) -> dict[str, dict[str, Any]]:
    """Per-statistic values as plain lists, the form a run folder stores."""
    return {
        name: {
            "in": [float(value) for value in scored.scores_in],
            "out": [float(value) for value in scored.scores_out],
            "critical_value": scored.critical_value
            if math.isfinite(scored.critical_value)
            else None,
        }
        for name, scored in sets.items()
    }


def record_shift(run_dir: Path, report: ShiftReport) -> None:
    write_json(run_dir / SHIFT, report.model_dump(mode="json"))


def record_windows(run_dir: Path, windows: Iterable[WindowResult]) -> None:
    """Append windows to ``monitor.jsonl`` (one line each, flushed per window)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / MONITOR).open("a", encoding="utf-8") as out:
        for window in windows:
            out.write(window.model_dump_json() + "\n")
            out.flush()


def load_run(run_dir: str | Path) -> RunData:
    """Read a run folder; a folder with none of the files is an error."""
    root = Path(run_dir)
    if not root.is_dir():
        raise InputError(f"{root}: no such run folder")
    data = RunData(path=root)
    if (root / EVALUATION).is_file():
        raw = read_json(root / EVALUATION, "evaluation")
        data.evaluation = EvaluationReport.model_validate(raw["report"])
        data.scores = raw["scores"]
        if raw.get("inputs") is not None:
            data.inputs = EvaluationInputs.model_validate(raw["inputs"])
    if (root / SHIFT).is_file():
        data.shift = ShiftReport.model_validate(read_json(root / SHIFT, "shift report"))
    if (root / MONITOR).is_file():
        data.windows = [
            WindowResult.model_validate(r) for r in iter_jsonl(root / MONITOR, "monitor")
        ]
    if (root / SHIFT_RATES).is_file():
        data.shift_rates = read_json(root / SHIFT_RATES, "shift-rate experiment")
    if (root / TUNING).is_file():
        data.tuning = TuningResult.model_validate(read_json(root / TUNING, "tripwire tuning"))
    if RunDir(root).inputs_path.is_file():  # a benchmark run directory
        data.bench = current_results(root)
    if data.is_empty():
        raise InputError(
            f"{root}: nothing to report; record a run with `ragbound evaluate --run {root}` or "
            f"`ragbound shift --run {root}`"
        )
    return data


def record_tuning(run_dir: Path, result: TuningResult) -> None:
    """Save a tripwire rule search (``tripwire tune --run``)."""
    write_json(run_dir / TUNING, result.model_dump(mode="json"))
