"""``ragbound bench``: the leave-one-out abstention benchmark, one module per stage group.

- ``data``: ``facts``, ``qa``, ``import``, ``filter`` (documents -> diverse QA pairs)
- ``run``: ``run`` (leave-one-out experiments from a config)
- ``evaluate``: ``evaluate``, ``label``, ``agreement`` (evaluator LLMs and human labels)
- ``results``: ``results`` (rates with confidence intervals)
"""

from __future__ import annotations

import typer

from ragbound.cli.bench import data, evaluate, results, run
from ragbound.cli.common import HELP_MARKUP


def build() -> typer.Typer:
    """The ``ragbound bench`` group with the commands of every stage module."""
    group = typer.Typer(
        no_args_is_help=True,
        rich_markup_mode=HELP_MARKUP,
        help="Leave-one-out abstention benchmark (KnowOrNot): "
        "does the LLM know when it does not know?",
    )
    for stage in (data, run, evaluate, results):
        stage.register(group)
    return group
