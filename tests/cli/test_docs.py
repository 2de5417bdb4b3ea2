"""docs/cli.md is rendered from the commands: it must list every command and be current."""

from __future__ import annotations

from pathlib import Path

import typer

from ragbound.cli import app
from ragbound.cli.docs import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_every_command_and_option_is_in_the_reference():
    text = render()
    root = typer.main.get_command(app)
    for group in ("tripwire", "bench"):
        for name, command in root.commands[group].commands.items():
            assert f"## `ragbound {group} {name}`" in text
            for param in command.params:
                for opt in getattr(param, "opts", []):
                    if opt.startswith("--") and opt != "--help":
                        assert f"`{opt}" in text, (group, name, opt)
    assert "## `ragbound calibrate`" in text and "`--alpha NUMBER`" in text


def test_docs_cli_md_is_current():
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/cli.md is stale: run `python -m ragbound.cli.docs > docs/cli.md`"
    )
