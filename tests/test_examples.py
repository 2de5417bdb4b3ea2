"""Every Python and shell example in the README and the docs runs (issue 31).

Each ```sh or ```bash block runs in bash as from a clone's root (see
:func:`test_the_shell_example_runs`). Each ```python fenced block of README.md and docs/*.md (but the generated cli.md and
benchmarks.md) is executed in a fresh namespace, with the working directory a temporary folder
holding ``kb/``: the bundled sample corpus indexed with MiniLM, calibrated, with the bundled
tripwires (what the README's tour leaves behind). A block that saves ``kb/`` itself gets no
``kb/``; one that adds tripwires to it gets ``kb/`` without them. An HTML comment on the line
before a block steers it:

- ``<!-- example: continues -->``: the block continues the previous one (same namespace);
- ``<!-- example: needs REASON -->``: the block needs what this suite cannot run (a server it
  does not start, a Docker daemon, an install), and is skipped with that reason.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # the Haystack examples: offline

ROOT = Path(__file__).resolve().parents[1]
GENERATED = {"cli.md", "benchmarks.md"}
DOCS = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in GENERATED)
PAGES = [ROOT / "README.md", *DOCS]
FENCE = re.compile(r"^```(\w*)\s*$")
BORDERS = str.maketrans(dict.fromkeys("│┃", " "))
MARK = re.compile(r"^<!--\s*example:\s*(.*?)\s*-->$")


@dataclass
class Example:
    """One runnable example: a block and the blocks that continue it."""

    page: str
    line: int
    code: list[str] = field(default_factory=list)
    skip: str | None = None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def examples(page: Path, languages: tuple[str, ...] = ("python",)) -> list[Example]:
    """The page's blocks in ``languages``, continuing blocks joined to the one before."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Example] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening or not opening.group(1):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if opening.group(1) in languages:
            mark = MARK.match(lines[i - 1].strip()) if i else None
            note = mark.group(1) if mark else ""
            body = "\n".join(lines[i + 1 : end]) + "\n"
            if note == "continues":
                assert found, f"{page.name}:{i + 1} continues no earlier block"
                found[-1].code.append(body)
            else:
                skip = note.removeprefix("needs ").strip() if note.startswith("needs") else None
                assert not note or skip, f"{page.name}:{i + 1}: unknown mark {note!r}"
                found.append(Example(page.name, i + 1, [body], skip and f"needs {skip}"))
        i = end + 1
    return found


ALL = [example for page in PAGES for example in examples(page)]
SHELL = [example for page in PAGES for example in examples(page, ("sh", "bash"))]


@pytest.fixture(scope="module")
def sample_kb(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sample corpus as the README's tour leaves it: indexed, calibrated, and (``"full"``)
    with the bundled tripwires or (``"calibrated"``) without."""
    from ragbound import Guard, KnowledgeBase
    from ragbound.demo import sample_corpus
    from ragbound.tripwires import LiveTripwires, read_tripwires

    root = sample_corpus()
    folder = tmp_path_factory.mktemp("examples")
    calibrated, full = folder / "calibrated", folder / "full"
    KnowledgeBase.build([root / "docs"], embedder="minilm").save(calibrated)
    questions = (root / "in_knowledge.txt").read_text(encoding="utf-8").splitlines()
    Guard.calibrate(KnowledgeBase.load(calibrated), questions).save()  # k = 32, alpha = 0.05
    shutil.copytree(calibrated, full)
    LiveTripwires.open(KnowledgeBase.load(full)).add(read_tripwires(root / "tripwires.jsonl"))
    return {"calibrated": calibrated, "full": full}


def kb_for(example: Example) -> str | None:
    """Which ``kb/`` the example expects to find."""
    code = "".join(example.code)
    if '.save("kb/")' in code:
        return None
    return "calibrated" if "LiveTripwires.open(kb).add(" in code else "full"


@pytest.mark.parametrize("example", ALL, ids=[e.id for e in ALL])
def test_the_example_runs(
    example: Example,
    sample_kb: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if example.skip:
        pytest.skip(example.skip)
    if (kind := kb_for(example)) is not None:
        shutil.copytree(sample_kb[kind], tmp_path / "kb")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__example__"}
    for n, code in enumerate(example.code):
        exec(compile(code, f"{example.id}#{n}", "exec"), namespace)


def test_examples_are_found() -> None:
    """The collector sees the blocks (a changed fence style would silently run nothing)."""
    pages = {example.page for example in ALL}
    assert {"README.md", "index.md", "frameworks.md", "gate.md"} <= pages
    assert {"README.md", "service.md", "stores.md"} <= {example.page for example in SHELL}


def expected_words(code: str) -> list[list[str]]:
    """The words of each output line of a shell block: a ``# ...`` line right below a command
    (or below another output line); ``...`` cut, the docs shorten the tables. A ``#`` line at
    the top or after a blank line is a comment."""
    found: list[list[str]] = []
    below_command = False
    for line in code.splitlines():
        if line.startswith("# ") and below_command:
            found.append(line[2:].removesuffix("...").split())
        else:
            below_command = bool(line.strip()) and not line.lstrip().startswith("#")
    return found


@functools.cache
def own_network() -> list[str]:
    """A prefix that runs a command in a network namespace of its own with only loopback up,
    so a block serving on port 8000 meets no other process (empty when unsupported)."""
    up = ["unshare", "--map-root-user", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "-"]
    usable = shutil.which("unshare") and shutil.which("ip")
    if usable and subprocess.run([*up, "true"], capture_output=True).returncode == 0:
        return up
    return []


def path_with_ragbound(folder: Path) -> str:
    """``PATH`` with ``folder`` first, holding ``ragbound`` (this checkout's CLI) and
    ``python`` (this interpreter)."""
    folder.mkdir()
    for name, command in (("ragbound", "-m ragbound.cli "), ("python", "")):
        script = folder / name  # a script, not a link: a venv's python finds its venv by path
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" {command}"$@"\n')
        script.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.mark.parametrize("example", SHELL, ids=[e.id for e in SHELL])
def test_the_shell_example_runs(
    example: Example, sample_kb: dict[str, Path], tmp_path: Path
) -> None:
    """Run as from a clone's root (``src/`` linked in), ``ragbound`` on ``PATH`` being this
    checkout's CLI and ``kb/`` the sample's (unless the block writes ``--out kb``), in a
    network namespace of its own where there is one; each word of an output line (see
    :func:`expected_words`) must be printed. Whatever the block leaves running is killed."""
    if example.skip:
        pytest.skip(example.skip)
    work = tmp_path / "work"
    work.mkdir()
    (work / "src").symlink_to(ROOT / "src")
    script = "".join(example.code)
    if not re.search(r"--out kb\b", script):
        shutil.copytree(sample_kb["full"], work / "kb")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200", "NO_COLOR": "1"}
    env["PATH"] = path_with_ragbound(tmp_path / "bin")
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    # to files: a server the block leaves in the background would hold a pipe open
    with out.open("w") as stdout, err.open("w") as stderr:
        block = subprocess.Popen(
            [*own_network(), "bash", "-c", "set -e\n" + script],
            cwd=work,
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            block.wait(timeout=300)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(block.pid, signal.SIGKILL)
            block.wait()
    assert block.returncode == 0, err.read_text()[-2000:]
    printed = {word.strip(";,") for word in out.read_text().translate(BORDERS).split()}
    for expected in expected_words(script):
        missing = [word for word in expected if not _printed(word.strip(";,"), printed)]
        assert not missing, f"{missing} not in the output:\n{out.read_text()}"


def _printed(word: str, printed: set[str]) -> bool:
    """The word is printed; a p-value may be one calibration rank off (1/121 for the
    sample's calibration) on another CPU, where a near tie in similarity breaks the other way."""
    if word in printed:
        return True
    if not re.fullmatch(r"0\.\d{3,}", word):
        return False
    numbers = [float(p) for p in printed if re.fullmatch(r"0\.\d+", p)]
    return any(abs(float(word) - number) <= 0.009 for number in numbers)


def test_output_lines_are_the_comment_lines_below_a_command() -> None:
    block = "# a comment\nragbound decide kb/ q\n# p-value 0.6 ...\n# in knowledge\n\n# comment\n"
    assert expected_words(block) == [["p-value", "0.6"], ["in", "knowledge"]]
