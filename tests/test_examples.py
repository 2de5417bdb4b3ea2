"""Every Python example in the README and the docs runs (issue 31).

Each ```python fenced block of README.md and docs/*.md (but the generated cli.md and
benchmarks.md) is executed in a fresh namespace, with the working directory a temporary folder
holding ``kb/``: the bundled sample corpus indexed with MiniLM, calibrated, with the bundled
tripwires (what the README's tour leaves behind). A block that saves ``kb/`` itself gets no
``kb/``; one that adds tripwires to it gets ``kb/`` without them. An HTML comment on the line
before a block steers it:

- ``<!-- example: continues -->``: the block continues the previous one (same namespace);
- ``<!-- example: needs REASON -->``: the block needs a server this suite does not start, and
  is skipped with that reason.
"""

from __future__ import annotations

import os
import re
import shutil
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
SHELL = examples(ROOT / "README.md", ("sh", "bash"))  # the tour: ragbound on the sample


@pytest.fixture(scope="module")
def sample_kb(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sample corpus as the README's tour leaves it: indexed, calibrated, and (``"full"``)
    with the bundled tripwires or (``"calibrated"``) without."""
    from ragbound import Guard, KnowledgeBase
    from ragbound.demo import sample_corpus
    from ragbound.tripwires import TripwireStore, read_tripwires

    root = sample_corpus()
    folder = tmp_path_factory.mktemp("examples")
    calibrated, full = folder / "calibrated", folder / "full"
    KnowledgeBase.build([root / "docs"], embedder="minilm").save(calibrated)
    questions = (root / "in_knowledge.txt").read_text(encoding="utf-8").splitlines()
    Guard.calibrate(KnowledgeBase.load(calibrated), questions).save()  # k = 32, alpha = 0.05
    shutil.copytree(calibrated, full)
    TripwireStore.open(KnowledgeBase.load(full)).add(read_tripwires(root / "tripwires.jsonl"))
    return {"calibrated": calibrated, "full": full}


def kb_for(example: Example) -> str | None:
    """Which ``kb/`` the example expects to find."""
    code = "".join(example.code)
    if '.save("kb/")' in code:
        return None
    return "calibrated" if "TripwireStore.open(kb).add(" in code else "full"


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


@pytest.mark.parametrize("example", SHELL, ids=[e.id for e in SHELL])
def test_the_readme_shell_example_runs(example: Example, tmp_path: Path) -> None:
    """Run from a clone's root (``src/`` linked in), ``ragbound`` being this checkout's CLI;
    each word of a ``# ...`` line after a command is a word it must print (``...`` cut; the
    README shortens the tables)."""
    if example.skip:
        pytest.skip(example.skip)
    (tmp_path / "src").symlink_to(ROOT / "src")
    cli = f'ragbound() {{ "{sys.executable}" -m ragbound.cli "$@"; }}\nset -e\n'
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200", "NO_COLOR": "1"}
    out = subprocess.run(
        ["bash", "-c", cli + "".join(example.code)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    printed = {word.strip(";,") for word in out.stdout.translate(BORDERS).split()}
    for code in example.code:
        for line in code.splitlines():
            if line.startswith("# "):
                expected = line[2:].removesuffix("...").split()
                missing = [word for word in expected if word.strip(";,") not in printed]
                assert not missing, f"{missing} not in the output:\n{out.stdout}"
