"""The modules of ``src/ragbound`` import one another without a cycle.

The graph is read from the source with ``ast`` (nothing is imported). Every import of a package
module counts: at module level, inside functions, and under ``if TYPE_CHECKING:`` (an import that
never runs still means two modules that cannot be understood apart). A package's ``__init__`` is
its own node: ``from ragbound.knowledge import KnowledgeBase`` is an edge to
``ragbound.knowledge``, ``from ragbound.knowledge import base`` an edge to
``ragbound.knowledge.base``. The layering it enforces is in docs/architecture.md.

An import also depends on what a package's ``__init__`` runs when it is imported, a node of its
own, ``PACKAGE (on import)``: the ``__init__``'s imports outside functions and outside
``if TYPE_CHECKING:``. Two kinds of import reach it:

- one that looks a submodule up in the package's namespace: ``from pkg import sub`` and
  ``import pkg.sub [as sub]`` (Python reads ``sub`` as an attribute of ``pkg`` first, so the
  line gets whatever ``pkg/__init__`` bound to that name, the submodule only when it bound none);
- one that makes the package's ``__init__`` run: any import of ``pkg.sub`` from a module outside
  ``pkg``. From a module inside ``pkg`` it is no edge: ``pkg/__init__`` is running already (a
  module's packages are always imported before it), and ``from pkg.sub import name`` reads only
  ``pkg.sub``.

So ``from ragbound.cli import validate`` in a command module is an edge to
``ragbound.cli (on import)``, a cycle when ``cli/__init__`` imports that command. A lazy face
(``ragbound._lazy``, PEP 562) runs none of the submodules it re-exports: they load when one of
its names is read, ``from pkg import Name``, an edge to the package's own node with every import
its ``__init__`` has. Its ``on import`` node has only its eager imports, so looking a submodule up
in a lazy face, or importing one of its submodules, is no cycle.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "ragbound"

# Edges allowed to close a cycle, each with why it is still there. Empty: a new cycle fails.
ALLOWED: dict[tuple[str, str], str] = {}
TYPE_CHECKING = {"TYPE_CHECKING", "typing.TYPE_CHECKING"}


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (``a/__init__.py`` is ``a``)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def on_import(package: str) -> str:
    """The node of what importing ``package`` runs: its ``__init__``'s eager imports."""
    return f"{package} (on import)"


def packages_above(name: str) -> list[str]:
    """The packages that hold ``name``, outermost first (``a.b.c``: ``a``, ``a.b``)."""
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def eager_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """The imports that run when the module runs: not in a function, not under TYPE_CHECKING."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending = list(ast.iter_child_nodes(tree))
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and ast.unparse(node.test) in TYPE_CHECKING:
            pending.extend(node.orelse)
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            pending.extend(ast.iter_child_nodes(node))
    return found


def every_import(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]


def imported_by(
    node: ast.Import | ast.ImportFrom, name: str, package: str, known: set[str]
) -> set[str]:
    """The nodes one import statement of module ``name`` (in ``package``) depends on."""
    found: set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            # `import a.b.c` loads a.b.c and finds it as an attribute of a.b, and b of a
            target = alias.name
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target:
                found |= {target, *(on_import(p) for p in packages_above(target) if p in known)}
        return found
    base = node.module or ""
    if node.level:
        anchor = package.split(".")
        anchor = anchor[: len(anchor) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        if submodule in known:  # looked up in base's namespace first
            found |= {submodule, on_import(base)}
        elif base in known:
            found.add(base)
    # importing a.b.x runs a/__init__ and a/b/__init__, unless they hold this module (running)
    running = {name, *packages_above(name)}
    return found | {on_import(p) for p in packages_above(base) if p in known and p not in running}


def imports_of(name: str, path: Path, known: set[str], eager: bool = False) -> set[str]:
    """The nodes that ``name`` (its source at ``path``) imports: anywhere in it, or only the
    imports that run when it is imported (``eager``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: set[str] = set()
    for node in eager_imports(tree) if eager else every_import(tree):
        found |= imported_by(node, name, package, known)
    return found - {name, on_import(name)}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    paths = modules(package)
    known = set(paths)
    graph = {name: imports_of(name, path, known) for name, path in paths.items()}
    for name, path in paths.items():
        if path.name == "__init__.py":
            graph[on_import(name)] = imports_of(name, path, known, eager=True)
    return graph


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
        "ragbound (on import)",
        "ragbound.sub (on import)",
    }
    init = package / "sub" / "__init__.py"
    assert imports_of("ragbound.sub", init, known) == {"ragbound.sub.leaf"}
    graph = {"a": {"b"}, "b": {"c", "a"}, "c": {"a"}, "d": {"a"}}
    assert [describe(loop) for loop in cycles(graph)] == ["a -> b -> a", "a -> b -> c -> a"]


def write_modules(root: Path, sources: dict[str, str]) -> None:
    for name, source in sources.items():
        path = root / f"{name.replace('.', '/')}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)


def test_a_submodule_looked_up_in_a_package_that_imports_it_is_a_cycle(tmp_path: Path) -> None:
    write_modules(
        tmp_path,
        {
            "ragbound/__init__": "",
            # an eager face: importing the package runs `heavy`, which reads the face
            "ragbound/eager/__init__": "from ragbound.eager.heavy import Heavy\n",
            "ragbound/eager/heavy": "from ragbound.eager import names\n",
            "ragbound/eager/names": "",
            "ragbound/eager/sibling": "from ragbound.eager.names import X\n",
            # a lazy face: its re-exports are imported under TYPE_CHECKING or on first use only
            "ragbound/lazy/__init__": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from ragbound.lazy.heavy import Heavy\n"
                "def __getattr__(name):\n"
                "    from ragbound.lazy import heavy\n"
            ),
            "ragbound/lazy/heavy": "import ragbound.lazy.names as names\n",
            "ragbound/lazy/names": "",
            "ragbound/outside": "from ragbound.lazy.names import X\n",
        },
    )
    graph = import_graph(tmp_path / "ragbound")
    assert graph["ragbound.eager.sibling"] == {"ragbound.eager.names"}  # its package is running
    assert graph["ragbound.outside"] == {"ragbound.lazy.names", "ragbound.lazy (on import)"}
    assert graph["ragbound.lazy.heavy"] == {
        "ragbound.lazy.names",
        "ragbound.lazy (on import)",
        "ragbound (on import)",
    }
    assert graph["ragbound.lazy"] == {"ragbound.lazy.heavy"}
    assert graph["ragbound.lazy (on import)"] == set()
    assert [describe(loop) for loop in cycles(graph)] == [
        "ragbound.eager (on import) -> ragbound.eager.heavy -> ragbound.eager (on import)"
    ]


def test_no_import_cycle_counting_type_checking_function_and_package_imports() -> None:
    graph = import_graph()
    stale = [edge for edge in ALLOWED if edge[1] not in graph.get(edge[0], set())]
    assert stale == [], f"allowed edges no longer imported: {stale}"
    found = [describe(loop) for loop in cycles(without_allowed(graph))]
    assert found == [], "import cycles:\n" + "\n".join(found)


# The modules of ragbound.cli a command may import, and those that assemble the app from the
# commands; every other module of it is a command (or a group's), and imports no other: what
# two commands share lives in the first set or in the library.
CLI_SHARED = {"ragbound.cli", "ragbound.cli.common", "ragbound.cli.options"}
CLI_SHARED |= {"ragbound.cli.validate", "ragbound.cli.failures"}
CLI_ASSEMBLERS = {"ragbound.cli.entry", "ragbound.cli.bench", "ragbound.cli.__main__"}
CLI_ASSEMBLERS.add("ragbound.cli.docs")


def test_no_command_module_imports_another() -> None:
    graph = import_graph()
    cli = {name for name in graph if name.startswith("ragbound.cli.") and " " not in name}
    commands = cli - CLI_SHARED - CLI_ASSEMBLERS
    assert {"ragbound.cli.serve", "ragbound.cli.detect", "ragbound.cli.bench.run"} <= commands
    found = {name: sorted(graph[name] & commands) for name in sorted(commands)}
    assert {name: others for name, others in found.items() if others} == {}
