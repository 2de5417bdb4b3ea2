"""A CLI that starts fast: what ``--help`` and a one-query ``check`` import (issue 30).

Each command runs in a fresh interpreter with ``-X importtime`` and the test reads which
modules it imported. No wall-clock assertion (machines are noisy): the time is in
docs/benchmarks.md ("A CLI that starts fast", the last run of a probe since removed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ragbound
from ragbound.embedders.registry import RUNTIME_ENV

SAMPLE = Path(ragbound.__file__).parent / "sample_corpus"
# Loaded by no --help: the models' runtimes, the numeric stack, the HTTP client, pydantic.
NOT_ON_HELP = (
    "torch",
    "sentence_transformers",
    "transformers",
    "onnxruntime",
    "scipy",
    "sklearn",
    "matplotlib",
    "httpx",
    "numpy",
    "pydantic",
)
TORCH = ("torch", "sentence_transformers", "transformers")


def imported(*args: str, env: dict[str, str] | None = None) -> set[str]:
    """The top-level packages ``python -m ragbound.cli ARGS`` imports (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ragbound.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "ragbound" in names  # the output was read: importtime lines were there
    return names


def test_root_help_imports_no_heavy_module():
    assert set(NOT_ON_HELP) & imported("--help") == set()


@pytest.mark.parametrize(
    "command",
    [("decide",), ("calibrate",), ("index",), ("serve",), ("tripwire", "tune"), ("bench", "run")],
    ids=" ".join,
)
def test_command_help_imports_no_heavy_module(command):
    # typer (0.29) itself coerces a command's parameters with pydantic TypeAdapters, built
    # when the command is resolved: pydantic is typer's here, not ragbound's.
    heavy = set(NOT_ON_HELP) - {"pydantic"}
    assert heavy & imported(*command, "--help") == set()


def test_cli_import_loads_no_heavy_module():
    code = "import sys; from ragbound.cli import app; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = {name.split(".")[0] for name in done.stdout.split()}
    assert "ragbound" in loaded
    assert set(NOT_ON_HELP) & loaded == set()


@pytest.fixture(scope="module")
def sample_kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample corpus indexed and calibrated through the CLI (default embedder runtime)."""
    kb = tmp_path_factory.mktemp("startup") / "kb"
    queries = SAMPLE / "in_knowledge.txt"
    for args in (
        ("index", str(SAMPLE / "docs"), "--out", str(kb)),
        ("calibrate", str(kb), "--queries", str(queries)),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "ragbound.cli", *args],
            capture_output=True,
            text=True,
            env=_default_runtime(),
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    return kb


def _default_runtime() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name != RUNTIME_ENV}


def test_decide_does_not_import_torch(sample_kb):
    names = imported(
        "decide", str(sample_kb), "Who won the 1998 world cup?", env=_default_runtime()
    )
    assert set(TORCH) & names == set()
    # nor what this calibration (mss) does not need: scipy (energy, entropy), the HTTP client
    assert {"scipy", "sklearn", "matplotlib", "httpx"} & names == set()
