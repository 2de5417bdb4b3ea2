"""The Makefile's install steps say what they do and how long each took (scripts/step)."""

from __future__ import annotations

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


def test_every_install_command_of_the_makefile_is_a_step() -> None:
    recipe = (ROOT / "Makefile").read_text().split("$(STAMP): pyproject.toml Makefile\n")[1]
    commands = [line.strip() for line in recipe.split("\n\n")[0].splitlines()]
    installs = [c for c in commands if "pip install" in c or "-m venv" in c]
    assert len(installs) == 4 and all("$(STEP)" in c for c in installs)
