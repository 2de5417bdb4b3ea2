"""``ragbound bench run``: leave-one-out experiments from a TOML/YAML config."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ragbound.cli import validate
from ragbound.cli.common import console, emit_json, progress
from ragbound.cli.options import JsonOpt


def run(
    config: Annotated[
        Path,
        typer.Argument(help="Run config (.toml, .yaml or .yml).", callback=validate.existing_file),
    ],
    limit: Annotated[
        int | None,
        typer.Option(
            help="Ask a seeded sample of N questions per knowledge set.",
            callback=validate.positive_int,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Run directory (default: the config's out).", callback=validate.folder
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Ask each target model every question with its own pair left out; a rerun resumes.

    The config (TOML or YAML) names the knowledge sets (QA or filtered sets), target models,
    strategies (direct, long_context, rag, hyde) and system prompts. For each question the
    context is built from the other pairs of its set only. Every model x strategy x prompt
    is asked every question. An unknown setting, model, strategy or prompt is an error
    before any call.

    The run directory holds run.json, inputs.jsonl and outputs.jsonl; each output is
    appended as its call finishes, so a rerun skips what is answered and asks again what
    failed. --json prints run_dir, items, done, skipped (answered before), failed,
    input_failures and timings in seconds.
    """
    from ragbound.bench.config import load_config
    from ragbound.bench.experiment import run_experiment

    settings = load_config(config, limit=limit, out=out.resolve() if out else None)
    summary = run_experiment(settings, progress=progress(json_out))
    if json_out:
        emit_json(summary)
        return
    llm_share = 1.0 - summary.overhead_share if summary.wall_seconds > 0 else 0.0
    blocked = (
        f"; {summary.input_failures} HyDE/question-writing replies failed (see run.json)"
        if summary.input_failures
        else ""
    )
    console().print(
        f"{summary.items} items: {summary.done} done, {summary.skipped} resumed, "
        f"{summary.failed} failed{' (rerun to retry them)' if summary.failed else ''}{blocked}\n"
        f"wall {summary.wall_seconds:.1f} s, LLM {summary.llm_seconds:.1f} s "
        f"({llm_share:.0%} of wall; setup {summary.setup_seconds:.1f} s) -> {summary.run_dir}"
    )


def register(group: typer.Typer) -> None:
    """Add run to the bench group."""
    group.command("run")(run)
