"""The ``ragbound`` command: ``app`` (every command, registered here) and ``main``, its entry
point. The package ``ragbound.cli`` re-exports the three names without importing this module
until one is read, so a command module can import from ``ragbound.cli`` without a cycle.
"""

from __future__ import annotations

import sys

import typer

from ragbound._version import __version__
from ragbound.cli import bench, detect, index, report, score, serve, shift, synth, tripwire
from ragbound.cli.common import HELP_MARKUP, visible
from ragbound.cli.failures import INTERRUPTED, USAGE, describe, interrupted, one_line

__all__ = ["app", "build_app", "main"]


def build_app() -> typer.Typer:
    """A ``ragbound`` app with every command and command group added."""
    root = typer.Typer(
        add_completion=False,
        no_args_is_help=True,
        rich_markup_mode=HELP_MARKUP,
        pretty_exceptions_enable=False,  # a bug shows a plain traceback, without locals
    )
    root.callback()(_root_options)
    for group in (index, detect, shift, score, report, synth, serve):
        group.register(root)
    root.add_typer(tripwire.build(), name="tripwire")
    root.add_typer(bench.build(), name="bench")
    return root


def _show_version(value: bool) -> None:
    """``--version``: print ``ragbound VERSION`` and exit before any command runs."""
    if value:
        sys.stdout.write(f"ragbound {__version__}\n")
        raise typer.Exit()


def _root_options(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_show_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """Know what your RAG system does not know: calibrated out-of-knowledge tests."""


app = build_app()


def main() -> None:
    """Entry point: every expected failure is one ``error:`` line on stderr, never a traceback.

    Exit codes: 0 done, 2 bad input or usage, 130 interrupted (Ctrl-C). A failure that is not
    expected (a bug) keeps its traceback.
    """
    try:
        code = app(prog_name="ragbound", standalone_mode=False)
    except (KeyboardInterrupt, typer.Abort):
        _fail("interrupted", INTERRUPTED, prefix="")
    except Exception as exc:
        if interrupted(exc):  # a library that turned Ctrl-C into its own error (an import)
            _fail("interrupted", INTERRUPTED, prefix="")
        if type(exc).__name__ == "NoArgsIsHelpError":  # a group without a command: its help
            sys.stdout.write(exc.format_message() + "\n")  # type: ignore[attr-defined]
            _fail(f"missing command (see '{exc.ctx.command_path} --help')", USAGE)  # type: ignore[attr-defined]
        message = describe(exc)
        if message is None:
            raise
        _fail(message, USAGE)
    if code == INTERRUPTED:  # typer turns Ctrl-C into this exit code when not standalone
        _fail("interrupted", INTERRUPTED, prefix="")
    if isinstance(code, int) and code != 0:
        raise SystemExit(code)


def _fail(message: str, code: int, prefix: str = "error: ") -> None:
    # a message may quote a file name or a record: its control characters are shown, not sent
    sys.stderr.write(f"{prefix}{visible(one_line(message))}\n")
    raise SystemExit(code) from None
