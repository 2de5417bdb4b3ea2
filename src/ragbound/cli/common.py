"""What every command group shares: queries, the cached LLM, JSON output, console.

The options they share are declared in ``ragbound.cli.options``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import textwrap
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ragbound.errors import InputError
from ragbound.labels import BIDI_CONTROLS

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console

    from ragbound.conversations.rewrite import Rewriter
    from ragbound.llm import LLM

# Help text is Markdown: --help reflows its paragraphs, and docs/cli.md shows it as written.
HELP_MARKUP = "markdown"

# what the commands print fits this many columns (a path longer than a line stays whole)
WIDTH = 80


def gather_queries(
    queries: list[str] | None, queries_file: Path | None, field: str | None = None
) -> list[str]:
    """Queries given as arguments, then those of ``--queries FILE``; at least one.

    An argument that is not UTF-8 is an InputError naming it (see :func:`utf8_argument`).
    """
    texts = [utf8_argument(text, f"query argument {i}") for i, text in enumerate(queries or [], 1)]
    if queries_file is not None:
        from ragbound.corpus import load_queries

        texts += load_queries(queries_file, field=field)
    if not texts:
        raise InputError("give queries as arguments or with --queries FILE")
    return texts


def utf8_argument(value: str, what: str) -> str:
    """``value``, a command-line argument, when it is UTF-8 text.

    Python hands an argument's bytes that are not UTF-8 over as lone surrogates (U+DC80 to
    U+DCFF, PEP 383), which no tokenizer and no UTF-8 file accepts: InputError ``what
    'caf\\xe9': not UTF-8 (byte 0xe9 at character 4)`` naming the first.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = os.fsencode(value[exc.start])[0]  # the byte the shell passed
        shown_value = os.fsencode(value).decode("utf-8", "backslashreplace")
        raise InputError(
            f"{what} '{shown_value}': not UTF-8 (byte 0x{byte:02x} at character "
            f"{exc.start + 1}); give UTF-8 text"
        ) from None
    return value


# What a terminal must not receive raw: C0 and C1 controls and DEL (escape sequences, bells,
# carriage returns and line ends that split or overwrite a line), line and paragraph
# separators, bidirectional controls (text shown in another order) and lone surrogates.
_HIDDEN = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff" + "".join(sorted(BIDI_CONTROLS)) + "]"
)


def visible(text: str) -> str:
    """``text`` with every character a terminal would act on, or show as something else, as
    its Python escape (``\\x1b``, ``\\n``, ``\\x9b``, ``\\u202e``, ``\\udcff``); other
    Unicode, accents and scripts included, is kept.

    Every text the commands print that came from a user or a corpus (queries, document ids
    and sources, chunk and tripwire texts, topics, ids, paths) goes through it (``--json``
    output is JSON, which escapes these already).

    >>> visible("red\\x1b[31m\\nline é")
    'red\\\\x1b[31m\\\\nline é'
    """
    return _HIDDEN.sub(_escape_char, text)


def _escape_char(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def shown(text: str) -> str:
    """``text`` from a user or a corpus, ready to be put in rich markup: :func:`visible`,
    and its square brackets escaped (``[bold]`` in a query is text, not a style)."""
    from rich.markup import escape

    return escape(visible(text))


def cached_llm(spec: str) -> LLM:
    """The model of ``spec`` behind the on-disk response cache (reruns and resumes are free)."""
    from ragbound.llm import CachedLLM, ResponseCache, make_llm

    return CachedLLM(make_llm(spec), ResponseCache())


def rewriter_for(reading: str, llm: str | None) -> Rewriter | None:
    """The LLM of the rewrite reading (None for the others; --llm is refused with them)."""
    from ragbound.conversations.reading import REWRITE

    if reading != REWRITE:
        if llm is not None:
            raise InputError(f"--llm is for the rewrite reading, not {reading}")
        return None
    from ragbound.conversations.rewrite import Rewriter

    return Rewriter(cached_llm(llm or "local"))


def notice(message: str) -> None:
    """A note on stderr (stdout stays for results and --json): a lock wait, a stale calibration.

    Each line is :func:`visible` (the line ends are the message's own: wrap user text after
    :func:`visible`, which makes its line ends visible too)."""
    sys.stderr.write("\n".join(visible(line) for line in message.split("\n")) + "\n")
    sys.stderr.flush()


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
                notice(wrap(visible(f"warning: {warning.message}")))


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
    """Print ``text`` (rich markup: put user text in with :func:`shown`) wrapped by
    :func:`wrap`, not again by the terminal's width; control characters made visible."""
    console().print(wrap(visible(text)), soft_wrap=True)


def show(text: str) -> None:
    """Print ``text`` (rich markup: put user text in with :func:`shown`) on one line as it is
    (a line the caller fitted to the width), control characters made visible."""
    console().print(visible(text), soft_wrap=True)


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
    """Report progress, unless --json: a bar on a terminal, a line every 30 s in a log
    (:mod:`ragbound.progress`)."""
    from ragbound.progress import progress_wanted

    return progress_wanted(quiet=json_out)


def write_plots(run_data, folder: Path) -> None:
    """Save the run's figures as PNG files in ``folder`` and say so on stderr."""
    from ragbound.report.html import images
    from ragbound.report.plots import save_pngs

    paths = save_pngs(images(run_data), folder)
    notice(f"wrote {len(paths)} plot(s) to {folder}")
