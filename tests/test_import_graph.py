"""The modules of ``src/ragbound`` import one another without a cycle.

The graph is read from the source with ``ast`` (nothing is imported). Every import of a package
module counts: at module level, inside functions, and under ``if TYPE_CHECKING:`` (an import that
never runs still means two modules that cannot be understood apart). A package's ``__init__`` is
its own node: ``from ragbound.knowledge import KnowledgeBase`` is an edge to
``ragbound.knowledge``, ``from ragbound.knowledge import base`` an edge to
``ragbound.knowledge.base``. The layering it enforces is in docs/architecture.md.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "ragbound"

# Edges allowed to close a cycle, each with why it is still there. Empty: a new cycle fails.
ALLOWED: dict[tuple[str, str], str] = {}


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (``a/__init__.py`` is ``a``)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules that ``name`` (its source at ``path``) imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                # `import a.b.c` binds `a` but loads a.b.c: the edge is to the module named
                target = alias.name
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target:
                    found.add(target)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in known:
                    found.add(submodule)
                elif base in known:
                    found.add(base)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = modules()
    known = set(paths)
    return {name: imports_of(name, path, known) for name, path in paths.items()}


def shortest_path(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    before: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [node]
            while before[path[-1]] is not None:
                path.append(before[path[-1]])  # type: ignore[arg-type]
            return path[::-1]
        for child in sorted(graph.get(node, ())):
            if child not in before:
                before[child] = node
                queue.append(child)
    return None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle through every edge that closes one (so every such edge is named),
    each rotated to start at its smallest module, without repeats."""
    found: set[tuple[str, ...]] = set()
    for source in sorted(graph):
        for target in sorted(graph[source]):
            back = shortest_path(graph, target, source)
            if back is None:
                continue
            loop = [source, *back[:-1]]
            first = loop.index(min(loop))
            found.add(tuple(loop[first:] + loop[:first]))
    return [list(loop) for loop in sorted(found)]


def without_allowed(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {
        source: {target for target in targets if (source, target) not in ALLOWED}
        for source, targets in graph.items()
    }


def describe(loop: list[str]) -> str:
    return " -> ".join([*loop, loop[0]])


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    package = tmp_path / "ragbound"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .leaf import Value\n")
    (package / "sub" / "leaf.py").write_text("")
    (package / "other.py").write_text("")
    (package / "top.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import ragbound.sub.leaf\n"
        "if TYPE_CHECKING:\n"
        "    from .sub import Value\n"
        "def late():\n"
        "    from ragbound import other\n"
    )
    known = {"ragbound", "ragbound.sub", "ragbound.sub.leaf", "ragbound.other", "ragbound.top"}
    assert imports_of("ragbound.top", package / "top.py", known) == {
        "ragbound.sub.leaf",
        "ragbound.sub",
        "ragbound.other",
    }
    init = package / "sub" / "__init__.py"
    assert imports_of("ragbound.sub", init, known) == {"ragbound.sub.leaf"}
    graph = {"a": {"b"}, "b": {"c", "a"}, "c": {"a"}, "d": {"a"}}
    assert [describe(loop) for loop in cycles(graph)] == ["a -> b -> a", "a -> b -> c -> a"]


def test_no_import_cycle_counting_type_checking_and_function_imports() -> None:
    graph = import_graph()
    stale = [edge for edge in ALLOWED if edge[1] not in graph.get(edge[0], set())]
    assert stale == [], f"allowed edges no longer imported: {stale}"
    found = [describe(loop) for loop in cycles(without_allowed(graph))]
    assert found == [], "import cycles:\n" + "\n".join(found)
