"""Leave-one-out abstention benchmark (KnowOrNot): facts -> QA pairs -> diversity filters ->
leave-one-out runs -> evaluators -> human labels and agreement -> results."""

from ragbound.bench.config import BenchConfig, load_config
from ragbound.bench.experiment import RunManifest, RunSummary, run_experiment
from ragbound.bench.log import JsonlLog
from ragbound.bench.models import (
    STRATEGIES,
    AtomicFact,
    ContextItem,
    DocumentRef,
    Evaluation,
    EvaluationSpec,
    ExperimentInput,
    ExperimentOutput,
    FactSet,
    FilterDrop,
    FilteredSet,
    Label,
    Provenance,
    QAPair,
    QASet,
    SkippedSentence,
    short_id,
)
from ragbound.bench.rundir import RunDir, slug

__all__ = [
    "STRATEGIES",
    "AtomicFact",
    "BenchConfig",
    "ContextItem",
    "DocumentRef",
    "Evaluation",
    "EvaluationSpec",
    "ExperimentInput",
    "ExperimentOutput",
    "FactSet",
    "FilterDrop",
    "FilteredSet",
    "JsonlLog",
    "Label",
    "Provenance",
    "QAPair",
    "QASet",
    "RunDir",
    "RunManifest",
    "RunSummary",
    "SkippedSentence",
    "load_config",
    "run_experiment",
    "short_id",
    "slug",
]
