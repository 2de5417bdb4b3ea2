"""Without its framework an adapter says which extra to install; ragbound never needs one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ragbound

FRAMEWORKS = ("langchain", "langchain_core", "langgraph", "llama_index", "haystack")

# Runs in a fresh interpreter where the frameworks cannot be imported (as if not installed).
HIDE_FRAMEWORKS = f"""
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {FRAMEWORKS!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Hide())
"""


def run_without_frameworks(code: str) -> subprocess.CompletedProcess[str]:
    src = str(Path(ragbound.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", HIDE_FRAMEWORKS + code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("langchain", "langchain"),
        ("langchain_agent", "langchain"),
        ("langchain_store", "langchain"),
        ("llamaindex", "llamaindex"),
        ("llamaindex_retriever", "llamaindex"),
        ("haystack", "haystack"),
        ("haystack_retriever", "haystack"),
    ],
)
def test_an_adapter_without_its_framework_names_the_extra(module: str, extra: str) -> None:
    result = run_without_frameworks(f"import ragbound.adapters.{module}")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: this ragbound adapter needs")
    assert f"pip install 'ragbound[{extra}]'" in last


def test_ragbound_and_its_gate_import_without_any_framework() -> None:
    result = run_without_frameworks(
        "import ragbound, ragbound.adapters, ragbound.adapters._common\n"
        "from ragbound import Gate, Decision\n"
        f"assert not [m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r}]\n"
    )
    assert result.returncode == 0, result.stderr
