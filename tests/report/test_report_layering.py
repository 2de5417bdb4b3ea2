"""``report`` is a layer above the features: it reads result models, calls no feature code,
and only the user-facing entry points (the CLI, the demo) import it."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

SRC = Path(__file__).resolve().parents[2] / "src"
REPORT = SRC / "ragbound" / "report"
# modules of plain data and I/O helpers that report may use freely
FOUNDATION = (
    "ragbound._lazy",
    "ragbound.artifacts",
    "ragbound.errors",
    "ragbound.results",
    "ragbound.report",
    # pure numeric metrics (no I/O, no feature code): the ROC plot's curve and AUROC, which
    # came from scikit-learn before the core dropped it
    "ragbound.stats.metrics",
)
# the benchmark run directory's own reader: its layout, file-name slugs and cached results
RUN_DIR_READERS = {
    ("ragbound.bench.rundir", "RunDir"),
    ("ragbound.bench.rundir", "slug"),
    ("ragbound.bench.results", "current_results"),
}
ENTRY_POINTS = ("ragbound.cli", "ragbound.display", "ragbound.demo", "ragbound.report")


def ragbound_imports(path: Path) -> Iterator[tuple[str, str, int]]:
    """(module, name, line) of every ``from ragbound... import name``, wherever it appears."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ragbound"):
            for alias in node.names:
                yield node.module or "", alias.name, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("ragbound"):
                    yield alias.name, "", node.lineno


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_report_imports_only_result_models_from_the_features() -> None:
    offenders = []
    for path in sorted(REPORT.glob("*.py")):
        for module, name, line in ragbound_imports(path):
            where = f"{path.name}:{line} {module}.{name}"
            if name.startswith("_"):
                offenders.append(f"{where}: a private name")
            elif module.startswith(FOUNDATION) or (module, name) in RUN_DIR_READERS:
                continue
            elif not _is_model(module, name):
                offenders.append(f"{where}: not a result model")
    assert offenders == []


def test_only_the_entry_points_import_report() -> None:
    offenders = [
        f"{module_name(path)}:{line}"
        for path in sorted((SRC / "ragbound").rglob("*.py"))
        if not module_name(path).startswith(ENTRY_POINTS)
        for module, _, line in ragbound_imports(path)
        if module.startswith("ragbound.report")
    ]
    assert offenders == []


def _is_model(module: str, name: str) -> bool:
    value = getattr(importlib.import_module(module), name, None) if name else None
    return isinstance(value, type) and issubclass(value, BaseModel)
