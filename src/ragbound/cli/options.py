"""The options and arguments more than one command takes, each declared once.

Options here carry their validators (``ragbound.cli.validate``), so a bad value is refused
where it enters, with the option's name, before any model or file is loaded. An option only
one command takes is declared in that command's signature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ragbound.cli import validate

LLM_HELP = "local, local:/path/model.gguf or openai:MODEL."
CONVERSATIONS_HELP = (
    'File of conversations, one a line: `{"messages": [...], "id": ...}` (OpenAI-style) or '
    'doc2dial\'s `{"id": ..., "turns": [{"role": "user", "text": ...}, {"role": "agent", '
    "...}]}`."
)
READING_HELP = (
    "How a conversation is read into the text searched: follow, follow-mean (follow's turns, "
    "one embedding a turn, their vectors' mean searched; not to calibrate on), recent, "
    "last, or rewrite (an LLM call per later turn, through --llm)."
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (one object per line).")]
KbArg = Annotated[Path, typer.Argument(help="Knowledge-base directory.")]
CalibratedKbArg = Annotated[Path, typer.Argument(help="Calibrated knowledge-base directory.")]
NewKbOpt = Annotated[
    Path,
    typer.Option("--out", help="Knowledge-base directory to create.", callback=validate.folder),
]
ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Use a calibration made against another knowledge base, or with another search "
        "(exact vs HNSW, another ef_search).",
    ),
]
StatisticOpt = Annotated[
    str | None,
    typer.Option(
        help="mss, knn, avgknn, entropy, energy, fisher or simes (default: calibration's).",
        callback=validate.statistic,
    ),
]
DecisionAlphaOpt = Annotated[
    float | None,
    typer.Option(
        help="The significance level of the decisions (out of knowledge when p <= alpha; "
        "both tests' when the answerability test shares it) [default: the calibration's]. "
        "A warning when the calibration is too small for it.",
        callback=validate.probability,
    ),
]

FieldOpt = Annotated[
    str | None,
    typer.Option(
        "--field",
        help="Query field of .jsonl/.json/.csv/.tsv records "
        "(default: the first of query, question, text, prompt).",
    ),
]
QueriesArg = Annotated[
    list[str] | None, typer.Argument(help="Queries (or --queries FILE, or both).")
]
QueriesFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--queries",
        help="File of queries: text (one per line), .jsonl, .json, .csv or .tsv.",
        callback=validate.existing_file,
    ),
]
ConversationsOpt = Annotated[
    Path | None,
    typer.Option("--conversations", help=CONVERSATIONS_HELP, callback=validate.existing_file),
]
ReadingOpt = Annotated[
    str | None,
    typer.Option(
        help=READING_HELP + " [default: the calibration's, else follow]",
        callback=validate.reading,
    ),
]
"""--reading where a calibration is read (decide, serve): its reading is the default."""
RewriteLlmOpt = Annotated[
    str | None,
    typer.Option(
        "--llm",
        help=f"With the rewrite reading: the LLM that rewrites a turn, {LLM_HELP} "
        "[default: local].",
    ),
]

EngineOpt = Annotated[
    str,
    typer.Option(
        help="Where queries are embedded and searched: local (this process) or ray "
        "(ray.data actors; pip install 'ragbound[ray]').",
        callback=validate.choice("local", "ray"),
    ),
]
AddressOpt = Annotated[
    str | None,
    typer.Option(
        help="With --engine ray: the cluster to join (auto: the one `ray start` began on this "
        "machine; HOST:PORT). Default: a Ray instance of --workers CPUs on this machine.",
        callback=validate.non_empty,
    ),
]
WorkersOpt = Annotated[
    int,
    typer.Option(
        help="With --engine ray: actors searching at once (one CPU each).",
        callback=validate.positive_int,
    ),
]

RunOpt = Annotated[
    Path | None,
    typer.Option(
        "--run",
        help="Record the results in this run folder (for report).",
        callback=validate.folder,
    ),
]
PlotOpt = Annotated[
    Path | None,
    typer.Option("--plot", help="Write PNG plots to this folder.", callback=validate.folder),
]
LlmOpt = Annotated[str, typer.Option("--llm", help=LLM_HELP)]
ConcurrencyOpt = Annotated[
    int, typer.Option(help="LLM calls in flight.", callback=validate.positive_int)
]
SeedOpt = Annotated[int, typer.Option(help="Random seed.", callback=validate.seed)]
