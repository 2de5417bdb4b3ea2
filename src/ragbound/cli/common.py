"""What every command group shares: options, queries, the cached LLM, JSON output, console.

Options here carry their validators (``ragbound.cli.validate``), so a bad value is refused
where it enters, with the option's name, before any model or file is loaded.
"""

from __future__ import annotations

import functools
import json
import signal
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from ragbound._lazy import deprecation_note
from ragbound.cli import validate
from ragbound.errors import InputError

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console

    from ragbound.llm import LLM

# Help text is Markdown: --help reflows its paragraphs, and docs/cli.md shows it as written.
HELP_MARKUP = "markdown"
LLM_HELP = "local, local:/path/model.gguf or openai:MODEL."

T = TypeVar("T")

# what the commands print fits this many columns (a path longer than a line stays whole)
WIDTH = 80

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (one object per line).")]
KbArg = Annotated[Path, typer.Argument(help="Knowledge-base directory.")]
StatisticOpt = Annotated[
    str | None,
    typer.Option(
        help="mss, knn, avgknn, entropy, energy, fisher or simes (default: calibration's).",
        callback=validate.statistic,
    ),
]
CalibratedAlphaOpt = Annotated[
    float | None,
    typer.Option(
        help="Significance level (default: calibration's).", callback=validate.probability
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
ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Use a calibration made against another knowledge base, or with another search "
        "(exact vs HNSW, another ef_search).",
    ),
]
LlmOpt = Annotated[str, typer.Option("--llm", help=LLM_HELP)]
ConcurrencyOpt = Annotated[
    int, typer.Option(help="LLM calls in flight.", callback=validate.positive_int)
]
SeedOpt = Annotated[int, typer.Option(help="Random seed.", callback=validate.seed)]


def gather_queries(
    queries: list[str] | None, queries_file: Path | None, field: str | None = None
) -> list[str]:
    """Queries given as arguments, then those of ``--queries FILE``; at least one."""
    texts = list(queries or [])
    if queries_file is not None:
        from ragbound.corpus import load_queries

        texts += load_queries(queries_file, field=field)
    if not texts:
        raise InputError("give queries as arguments or with --queries FILE")
    return texts


def cached_llm(spec: str) -> LLM:
    """The model of ``spec`` behind the on-disk response cache (reruns and resumes are free)."""
    from ragbound.llm import CachedLLM, ResponseCache, make_llm

    return CachedLLM(make_llm(spec), ResponseCache())


def notice(message: str) -> None:
    """A note on stderr (stdout stays for results and --json): a lock wait, a stale calibration."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def deprecated_option(old: str, old_value: T | None, new: str, new_value: T | None) -> T | None:
    """The value of option ``new``, or of its old spelling ``old`` (a note on stderr); both
    given is an error."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise InputError(f"give {new} only ({old} is its old spelling)")
    notice(f"note: {deprecation_note(old, new)}")
    return old_value


def deprecated_command(command: Callable[..., None], old: str, new: str) -> Callable[..., None]:
    """``command`` under its old name ``old``: the same options, and a note on stderr that
    ``new`` is its name now (register it hidden)."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        notice(f"note: {deprecation_note(f'ragbound {old}', f'ragbound {new}')}")
        command(*args, **kwargs)

    return run


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM in the block is a Ctrl-C (KeyboardInterrupt): the command cleans up as after
    one, says ``interrupted`` and exits 130. The handler before is put back after."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@contextmanager
def warnings_shown() -> Iterator[None]:
    """Every UserWarning the block raises, as a wrapped ``warning:`` line on stderr after it
    (also when it fails: the warnings come before the error line)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        try:
            yield
        finally:
            for warning in caught:
                notice(wrap(f"warning: {warning.message}"))


def emit_json(obj: BaseModel | dict) -> None:
    """Write one JSON object as a line on stdout."""
    dump = getattr(obj, "model_dump_json", None)  # a pydantic model (pydantic not imported here)
    text = dump() if dump is not None else json.dumps(obj)
    sys.stdout.write(text + "\n")


def console() -> Console:
    """A rich console on stdout (imported lazily: rich is slow to import)."""
    from rich.console import Console

    return Console()


def wrap(text: str, width: int = WIDTH) -> str:
    """``text`` in lines of at most ``width`` characters, broken at spaces only (a path stays
    whole), the lines after the first indented by two."""
    return textwrap.fill(
        text, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
    )


def fit(text: str, width: int = WIDTH) -> str:
    """``text`` on one line of at most ``width`` characters (cut with '...')."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def say(text: str) -> None:
    """Print ``text`` (rich markup) wrapped by :func:`wrap`, not again by the terminal's width."""
    console().print(wrap(text), soft_wrap=True)


def utc_text(iso: str) -> str:
    """An ISO 8601 time as ``YYYY-MM-DD HH:MM:SS`` in UTC (cut to 19 characters when it does
    not parse)."""
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return iso[:19]
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def progress(json_out: bool) -> bool:
    """Show progress bars: on a terminal and not with --json."""
    from ragbound.progress import progress_wanted

    return progress_wanted(quiet=json_out)


def write_plots(run_data, folder: Path) -> None:
    """Save the run's figures as PNG files in ``folder`` and say so on stderr."""
    from ragbound.report.html import images
    from ragbound.report.plots import save_pngs

    paths = save_pngs(images(run_data), folder)
    sys.stderr.write(f"wrote {len(paths)} plot(s) to {folder}\n")
