"""The layout of a benchmark run directory; every stage reads and writes through this.

::

    RUN_DIR/
      run.json                      the resolved config, input hashes, timings (atomic JSON)
      inputs.jsonl                  every ExperimentInput (written atomically before any call)
      outputs.jsonl                 ExperimentOutput, appended as each call finishes
      evaluations/SPEC--EVAL.jsonl  Evaluation per output, per spec and evaluator model
      labels/sample.json            the stratified sample shown to annotators
      labels/ANNOTATOR.jsonl        Label, appended as each is given
      results.json                  rates with confidence intervals
"""

from __future__ import annotations

import re
from pathlib import Path

from ragbound.artifacts import iter_jsonl, write_jsonl
from ragbound.bench.log import JsonlLog, RecordT
from ragbound.bench.models import Evaluation, ExperimentInput, ExperimentOutput, Label
from ragbound.errors import ArtifactError


def slug(name: str) -> str:
    """A file-name-safe form of a model id or name (``openai:gpt-4o`` -> ``openai_gpt-4o``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "_"


class RunDir:
    """Paths and logs of one run directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def manifest_path(self) -> Path:
        return self.root / "run.json"

    @property
    def inputs_path(self) -> Path:
        return self.root / "inputs.jsonl"

    @property
    def results_path(self) -> Path:
        return self.root / "results.json"

    @property
    def sample_path(self) -> Path:
        return self.root / "labels" / "sample.json"

    def write_inputs(self, inputs: list[ExperimentInput]) -> None:
        """Write every input at once (atomic), before any model is called."""
        write_jsonl(self.inputs_path, (item.model_dump(mode="json") for item in inputs))

    def inputs(self) -> list[ExperimentInput]:
        """The run's inputs; a missing file means this is not a run directory."""
        if not self.inputs_path.exists():
            raise ArtifactError(f"{self.root} is not a benchmark run (no inputs.jsonl)")
        return [ExperimentInput.model_validate(r) for r in iter_jsonl(self.inputs_path, "inputs")]

    def outputs(self) -> JsonlLog[ExperimentOutput]:
        return JsonlLog(self.root / "outputs.jsonl", ExperimentOutput)

    def evaluations(self, spec: str, evaluator: str) -> JsonlLog[Evaluation]:
        return JsonlLog(
            self.root / "evaluations" / f"{slug(spec)}--{slug(evaluator)}.jsonl", Evaluation
        )

    def evaluation_logs(self) -> list[JsonlLog[Evaluation]]:
        """Every evaluation log present, sorted by file name."""
        return self._logs("evaluations", Evaluation)

    def labels(self, annotator: str) -> JsonlLog[Label]:
        return JsonlLog(self.root / "labels" / f"{slug(annotator)}.jsonl", Label)

    def label_logs(self) -> list[JsonlLog[Label]]:
        """Every annotator's label log, sorted by file name."""
        return self._logs("labels", Label)

    def _logs(self, folder: str, model: type[RecordT]) -> list[JsonlLog[RecordT]]:
        # globbing a folder that does not exist finds nothing
        return [JsonlLog(path, model) for path in sorted((self.root / folder).glob("*.jsonl"))]
