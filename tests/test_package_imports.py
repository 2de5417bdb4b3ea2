"""Import hygiene of the package: a light ``import ragbound``, one-way layers (no cycle:
tests/test_import_graph.py).

Cycles show up only when a module is the first one imported, so every module is imported first
in a fresh interpreter (a child forked from one that has loaded only third-party packages).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "ragbound"
HEAVY = ("numpy", "scipy", "sklearn", "torch", "sentence_transformers", "matplotlib", "llama_cpp")

# Imports every module first in its own forked child; prints the modules that failed.
FIRST_IMPORT_EACH = """
import importlib, json, os, sys
for name in ("numpy", "scipy.stats", "sklearn.metrics", "pydantic", "rich", "typer", "httpx"):
    importlib.import_module(name)  # third-party only: shared by every child, saves time
failed = {}
for module in json.loads(sys.argv[1]):
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        try:
            importlib.import_module(module)
            message = ""
        except BaseException as exc:
            message = f"{type(exc).__name__}: {exc}"
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        message = pipe.read()
    os.waitpid(child, 0)
    if message:
        failed[module] = message
print(json.dumps(failed))
"""


def module_names() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def run_python(code: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="needs os.fork")
def test_every_module_imports_when_it_is_the_first_one() -> None:
    modules = [name for name in module_names() if not name.endswith("__main__")]
    failed = json.loads(run_python(FIRST_IMPORT_EACH, json.dumps(modules)).splitlines()[-1])
    assert failed == {}


def test_import_ragbound_loads_no_heavy_module() -> None:
    code = "import sys, ragbound; print([m for m in sys.argv[1:] if m in sys.modules])"
    assert run_python(code, *HEAVY).strip() == "[]"


def test_the_cli_starts_without_the_heavy_numeric_stack() -> None:
    # `ragbound --help` and option errors come before any model or test statistic is needed
    code = (
        "import sys; from ragbound.cli import app; "
        "print([m for m in sys.argv[1:] if m in sys.modules])"
    )
    heavy = ("scipy.stats", "sklearn", "torch", "sentence_transformers", "matplotlib")
    assert run_python(code, *heavy).strip() == "[]"


def test_the_knowledge_base_loads_no_backing_until_one_is_used() -> None:
    # the registry names the backings by dotted path: a local one loads only local code
    backings = [f"ragbound.knowledge.{name}" for name in ("local", "postgres", "chroma", "qdrant")]
    code = (
        "import sys, ragbound.knowledge as k; before = [m for m in sys.argv[1:] if m in "
        "sys.modules]; k.BACKINGS['exact']; print(before, [m for m in sys.argv[1:] if m in "
        "sys.modules])"
    )
    assert run_python(code, *backings).strip() == "[] ['ragbound.knowledge.local']"


def test_stats_names_load_on_first_use() -> None:
    import ragbound.stats as stats

    assert all(getattr(stats, name) is not None for name in stats.__all__)
    with pytest.raises(AttributeError):
        stats.no_such_name  # noqa: B018
    code = (
        "import sys; from ragbound.stats import STATISTICS; "
        "print(STATISTICS[0], 'scipy.stats' in sys.modules)"
    )
    assert run_python(code).split() == ["mss", "False"]


def test_conversations_names_load_on_first_use() -> None:
    import ragbound.conversations as conversations

    assert all(getattr(conversations, name) is not None for name in conversations.__all__)
    code = (
        "import sys; from ragbound.conversations import conversation; "
        "print(sorted(m for m in sys.modules if m.startswith('ragbound.conversations.')))"
    )
    assert run_python(code).strip() == "['ragbound.conversations.model']"


def test_no_module_imports_from_the_package_root() -> None:
    """``from ragbound import x`` inside the package runs ``ragbound/__init__`` mid-import: the
    cycle ``knowledge`` had. Shared names live in their own module (``ragbound._version``)."""
    offenders = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module == "ragbound" and node.level == 0
    ]
    assert offenders == []


def test_the_version_has_one_source() -> None:
    from ragbound import __version__
    from ragbound._version import __version__ as source

    assert __version__ is source
    pyproject = (SRC.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert 'version = {attr = "ragbound._version.__version__"}' in pyproject


def _package_of(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def test_no_module_imports_a_private_name_from_another_package() -> None:
    # private (underscored) names and modules are for their own package and its subpackages
    offences = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        importer = _package_of(".".join(parts), False)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ragbound")
            ):
                continue
            module = node.module or ""
            private_parts = [p for p in module.split(".") if p.startswith("_") and p != "__init__"]
            owner = module.rpartition(".")[0] if private_parts else module
            for alias in node.names:
                private = private_parts or (
                    alias.name.startswith("_") and alias.name != "__version__"
                )
                if private and not (importer + ".").startswith(owner + "."):
                    offences.append(f"{'.'.join(parts)}: from {module} import {alias.name}")
    assert offences == []
