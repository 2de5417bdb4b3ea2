"""What installing ragbound costs (issue 40): ``python -m benchmarks.run install``.

Three sets, each installed into a new venv from this checkout's ``HEAD`` (``git archive``),
once with pip's cache an empty folder (**cold**: everything downloaded, ``llama-cpp-python``
built) and once more with the cache the cold run filled (**warm**):

- ``core``: ``pip install .`` and the bundled MiniLM without its dependencies (the Makefile's
  ``MINILM``), as ``pipx`` or a Dockerfile would install ragbound;
- ``image``: the core and the ``serve`` extra, what deploy/Dockerfile installs (no Docker daemon
  runs here: the image's packages are measured in a venv built the same way);
- ``demo``: the core with the ``serve`` and ``report`` extras, what ``make demo`` installs;
- ``all``: CPU torch first, then every extra (the Makefile's ``EXTRAS``), what ``make test``
  installs.

For each: the install time and the venv's size. From the ``all`` venv, what each extra adds on
top of the core (the distributions it pulls that the core does not, sizes from their RECORD
files). In the core venv: the wall time and peak RSS of a one-query ``ragbound decide`` (and of
importing :mod:`ragbound.gate`). Last, in this venv: the bundled MiniLM's graph built from its
weights against the torch-exported one, one-query ``Gate.decide`` p50 and batch-of-32
throughput, interleaved round by round.

``BENCH_INSTALL_SETS`` picks sets (default ``core,image,demo,all``); ``BENCH_INSTALL_GRAPH=0`` skips
the graph comparison. Raw numbers go to bench_out/install.json.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.datasets import REPO
from benchmarks.doc import markdown_table, write_section

TITLE = "Install size and time, and the graph built without torch"
SECTION = "install"
OUT = REPO / "bench_out" / "install.json"
SETS = ("core", "image", "demo", "all")
QUESTION = "Who won the 1998 world cup?"
ROUNDS = 5
GRAPH_ROUNDS = 300
BATCH = 32


def makefile_value(name: str) -> str:
    """``NAME := value`` from the Makefile."""
    found = re.search(rf"^{name} := (.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    if not found:
        raise SystemExit(f"no {name} := line in the Makefile")
    return found.group(1).strip()


def install_steps(name: str, source: Path) -> list[list[str]]:
    """The pip arguments that install set ``name`` from ``source`` (one list per pip call)."""
    minilm = ["--no-deps", makefile_value("MINILM")]
    if name == "core":
        return [[str(source)], minilm]
    if name in ("image", "demo"):
        extras = "serve" if name == "image" else makefile_value("DEMO_EXTRAS")
        return [[f"{source}[{extras}]"], minilm]
    torch = ["--extra-index-url", makefile_value("TORCH_INDEX"), makefile_value("TORCH")]
    return [torch, [f"{source}[{makefile_value('EXTRAS')}]"], minilm]


def folder_mb(folder: Path) -> float:
    """The bytes of the files under ``folder`` (links not followed), in MB."""
    total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    return total / 1e6


def install(name: str, source: Path, root: Path, cache: Path, label: str) -> dict:
    """A new venv under ``root`` with set ``name``; seconds and MB."""
    venv = root / f"{name}-{label}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = os.environ | {
        "PIP_CACHE_DIR": str(cache),
        "CMAKE_ARGS": makefile_value("LLAMA_CMAKE_ARGS"),
    }
    pip = [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check"]
    start = time.monotonic()
    for args in install_steps(name, source):
        print(f"  {name} ({label}): pip install {' '.join(args)}", flush=True)
        subprocess.run([*pip, *args], check=True, env=env, cwd=root)
    return {
        "seconds": round(time.monotonic() - start, 1),
        "mb": round(folder_mb(venv)),
        "venv": str(venv),
    }


EXTRA_COSTS = r"""
import json, re, sys
from importlib import metadata
from packaging.requirements import Requirement

def key(name): return re.sub(r"[-_.]+", "-", name).lower()
dists = {key(d.metadata["Name"]): d for d in metadata.distributions()}
def size(d): return sum(f.size or 0 for f in (d.files or []))
def closure(reqs):
    # each requirement in todo has passed its marker (its parent's extras) already
    seen, todo = set(), list(reqs)
    while todo:
        req = todo.pop()
        name = key(req.name)
        if name in seen or name not in dists:
            continue
        seen.add(name)
        todo += [r for r in map(Requirement, dists[name].requires or [])
                 if not r.marker or r.marker.evaluate({"extra": ""})
                 or any(r.marker.evaluate({"extra": e}) for e in req.extras)]
    return seen
ragbound = dists["ragbound"]
reqs = [Requirement(r) for r in ragbound.requires or []]
core = closure([r for r in reqs if not r.marker]) | {"ragbound", key(sys.argv[1])}
out = {"core": round(sum(size(dists[n]) for n in core) / 1e6)}
for extra in ragbound.metadata.get_all("Provides-Extra") or []:
    pulled = closure([r for r in reqs if r.marker and r.marker.evaluate({"extra": extra})])
    out[extra] = round(sum(size(dists[n]) for n in pulled - core) / 1e6)
print(json.dumps(out))
"""


def extra_costs() -> dict[str, int]:
    """MB each extra adds to the core, read in this venv (``make install``'s: every extra)."""
    minilm = makefile_value("MINILM").split("==")[0]
    done = subprocess.run(
        [sys.executable, "-c", EXTRA_COSTS, minilm],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


# the child's peak RSS, read by a small parent: a child forked from this process (big after
# the graph part) would count this process's pages in its own ru_maxrss until it execs
PEAK = (
    "import resource, subprocess, sys, time; start = time.monotonic(); "
    "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
    "print(time.monotonic() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)"
)


def timed_process(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one run of ``argv``."""
    done = subprocess.run(
        [sys.executable, "-c", PEAK, *argv], env=env, cwd=cwd, capture_output=True, text=True
    )
    seconds, kilobytes, code = done.stdout.split()
    if int(code) != 0:
        raise SystemExit(f"{argv} exited {code}")
    return float(seconds), int(kilobytes) / 1024


def decide_cost(venv: Path, work: Path) -> dict:
    """A one-query ``ragbound decide`` in ``venv`` (median over rounds), and ``import
    ragbound.gate``; the sample corpus indexed and calibrated first."""
    bin_ = venv / "bin"
    env = os.environ | {"RAGBOUND_CACHE": str(work / "cache")}
    env.pop("PYTHONPATH", None)
    where = "from ragbound.demo import sample_corpus; print(sample_corpus())"
    sample = Path(
        subprocess.run(
            [str(bin_ / "python"), "-c", where], capture_output=True, text=True, check=True, env=env
        ).stdout.strip()
    )
    kb = work / "kb"
    subprocess.run(
        [str(bin_ / "ragbound"), "index", str(sample / "docs"), "--out", str(kb)],
        check=True,
        env=env,
        capture_output=True,
    )
    subprocess.run(
        [
            str(bin_ / "ragbound"),
            "calibrate",
            str(kb),
            "--queries",
            str(sample / "in_knowledge.txt"),
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    decide = [str(bin_ / "ragbound"), "decide", str(kb), QUESTION]
    imports = [str(bin_ / "python"), "-c", "import ragbound.gate"]
    runs = {"decide": [], "import": []}
    for _ in range(ROUNDS):
        runs["decide"].append(timed_process(decide, env, work))
        runs["import"].append(timed_process(imports, env, work))
    return {
        name: {
            "seconds": round(statistics.median(s for s, _ in rows), 3),
            "rss_mb": round(statistics.median(r for _, r in rows)),
        }
        for name, rows in runs.items()
    }


def source_tree(root: Path) -> Path:
    """This checkout's HEAD, unpacked under ``root`` (no build/ left in the checkout)."""
    tree = root / "ragbound"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", "HEAD"], cwd=REPO, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def install_part(names: list[str], results: dict) -> dict:
    """Cold and warm installs of each set, the extras' costs and the core's check, into
    ``results`` (saved after each set: a run stopped later keeps what it measured)."""
    results.setdefault("sets", {})
    with tempfile.TemporaryDirectory(prefix="bench-install-") as tmp:
        root = Path(tmp)
        source = source_tree(root)
        for name in names:
            cache = root / f"cache-{name}"
            cold = install(name, source, root, cache, "cold")
            warm = install(name, source, root, cache, "warm")
            results["sets"][name] = {"cold": cold, "warm": warm}
            if name == "core":
                results["core_decide"] = decide_cost(Path(warm["venv"]), root / "work-core")
            save(results)
    return results


def save(results: dict) -> None:
    """bench_out/install.json."""
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2), encoding="utf-8")


def graph_part() -> dict:
    """The built graph against the torch export: one-query ``Gate.decide`` p50 (ms) and
    batch-of-32 throughput (texts/s), interleaved, in this process."""
    from ragbound.demo import sample_corpus
    from ragbound.detect import Guard
    from ragbound.embedders.onnx_export import export_graph, exported_model
    from ragbound.embedders.onnx_runner import OnnxRunner
    from ragbound.gate import Gate
    from ragbound.knowledge import KnowledgeBase

    sample = sample_corpus()
    questions = (sample / "in_knowledge.txt").read_text(encoding="utf-8").splitlines()
    texts = questions[:BATCH]
    with tempfile.TemporaryDirectory(prefix="bench-graph-") as tmp:
        kb_dir = Path(tmp) / "kb"
        kb = KnowledgeBase.build([sample / "docs"], embedder="minilm")
        kb.save(kb_dir)
        Guard.calibrate(KnowledgeBase.load(kb_dir), questions).save()
        gate = Gate.load(kb_dir)
        embedder = gate.guard.kb.embedder
        built = exported_model(embedder.folder, embedder.layout)
        exported = Path(tmp) / "torch.onnx"
        export_graph(embedder.folder, exported)
        runners = {
            "weights": OnnxRunner(built, embedder.folder, embedder.layout),
            "torch": OnnxRunner(exported, embedder.folder, embedder.layout),
        }
        decide: dict[str, list[float]] = {name: [] for name in runners}
        batch: dict[str, list[float]] = {name: [] for name in runners}
        for round_ in range(GRAPH_ROUNDS):
            for name, runner in runners.items():
                embedder._runner = runner  # the gate's embedder on this graph
                start = time.perf_counter()
                gate.decide(QUESTION)
                decide[name].append(time.perf_counter() - start)
                if round_ % 10 == 0:
                    start = time.perf_counter()
                    runner.run(texts)
                    batch[name].append(time.perf_counter() - start)
    return {
        name: {
            "decide_p50_ms": round(statistics.median(decide[name]) * 1000, 2),
            "batch_texts_per_s": round(BATCH / statistics.median(batch[name]), 1),
        }
        for name in runners
    }


def install_markdown(results: dict) -> str:
    """The section's tables."""
    lines = [
        "Each set in a new venv from this checkout's HEAD, pip's cache empty (cold: every package "
        "downloaded, llama-cpp-python built) then filled by that run (warm). `image` is what "
        "deploy/Dockerfile installs (no Docker daemon here: measured in a venv built the same "
        "way), `demo` what `make demo` installs. MB: the bytes of the venv's files, bytecode "
        "included.",
        "",
    ]
    labels = {
        "core": "core (`pip install .` + MiniLM, no deps)",
        "image": "Docker image (core + `serve`)",
        "demo": "`make demo` (core + `serve` + `report`)",
        "all": "everything (`make test`: CPU torch + every extra)",
    }
    rows = [
        [
            labels[name],
            f"{s['cold']['mb']:,}",
            f"{s['cold']['seconds']:.0f}",
            f"{s['warm']['seconds']:.0f}",
        ]
        for name, s in results["sets"].items()
    ]
    lines += markdown_table(["set", "venv MB", "cold install s", "warm install s"], rows)
    if "extras" in results:
        extras = results["extras"]
        lines += [
            "",
            f"What each extra adds on top of the core ({extras['core']:,} MB counted this way), "
            "in MB: the distributions it pulls that the core does not, shared ones counted in "
            "each, from their RECORD files (bytecode not counted), read in `make install`'s venv:",
            "",
        ]
        rows = [[f"`{name}`", f"{mb:,}"] for name, mb in sorted(extras.items()) if name != "core"]
        lines += markdown_table(["extra", "MB"], rows)
    if "core_decide" in results:
        c = results["core_decide"]
        lines += [
            "",
            f"In the core venv (median of {ROUNDS} processes): `ragbound decide KB Q` "
            f"{c['decide']['seconds']:.2f} s, peak RSS {c['decide']['rss_mb']} MB; "
            f"`import ragbound.gate` {c['import']['seconds']:.2f} s, {c['import']['rss_mb']} MB.",
        ]
    if "graph" in results:
        g = results["graph"]
        lines += [
            "",
            f"The bundled MiniLM's graph built from its weights against the torch "
            f"export, {GRAPH_ROUNDS} interleaved rounds in one process:",
            "",
        ]
        rows = [
            [name, f"{g[name]['decide_p50_ms']:.2f}", f"{g[name]['batch_texts_per_s']:.0f}"]
            for name in ("weights", "torch")
        ]
        ratio = g["weights"]["decide_p50_ms"] / g["torch"]["decide_p50_ms"]
        lines += markdown_table(
            ["graph", "`Gate.decide` p50 ms", f"batch of {BATCH}, texts/s"], rows
        )
        lines += ["", f"Built / exported p50: {ratio:.2f}x."]
    return "\n".join(lines)


def main(argv: Sequence[str] = ()) -> None:
    """Run the part (``render``: the section again from bench_out/install.json)."""
    if list(argv) == ["render"]:
        results = json.loads(OUT.read_text(encoding="utf-8"))
    else:
        names = [n.strip() for n in os.environ.get("BENCH_INSTALL_SETS", ",".join(SETS)).split(",")]
        unknown = set(names) - set(SETS)
        if unknown:
            raise SystemExit(f"BENCH_INSTALL_SETS: unknown {sorted(unknown)}; use {SETS}")
        # a run of some sets keeps the others' numbers
        results: dict = json.loads(OUT.read_text(encoding="utf-8")) if OUT.is_file() else {}
        # in this process first: the installs then run in children only
        if os.environ.get("BENCH_INSTALL_GRAPH", "1") != "0":
            results["graph"] = graph_part()
        results["extras"] = extra_costs()
        install_part(names, results)
    body = install_markdown(results)
    print(body)
    write_section(SECTION, TITLE, body)
