"""``ragbound bench``: the leave-one-out abstention benchmark, one module per stage group.

- ``data``: ``facts``, ``qa``, ``import``, ``filter`` (documents -> diverse QA pairs)
- ``run``: ``run`` (leave-one-out experiments from a config)
- ``evaluate``: ``evaluate``, ``label``, ``agreement`` (evaluator LLMs and human labels)
- ``results``: ``results`` (rates with confidence intervals)
"""

from __future__ import annotations

import importlib

import typer

bench_app = typer.Typer(
    no_args_is_help=True,
    help="Leave-one-out abstention benchmark (KnowOrNot): does the LLM know when it does not know?",
)

STAGE_MODULES = ("data", "run", "evaluate", "results")


def register_stages() -> None:
    """Import each stage module that exists; each adds its commands to ``bench_app``."""
    for name in STAGE_MODULES:
        try:
            importlib.import_module(f"ragbound.cli_bench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"ragbound.cli_bench.{name}":
                raise


register_stages()
