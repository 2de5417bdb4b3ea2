"""``main()``: which failures become one ``error:`` line, and which keep their traceback."""

from __future__ import annotations

import errno
import sys

import pytest
import typer
from pydantic import ValidationError

import ragbound.cli.entry
from ragbound.cli.failures import describe, one_line
from ragbound.errors import InputError
from ragbound.tripwires.guard import TripwireRule
from tests.cli.runner import run


def _raised(make) -> BaseException:
    try:
        make()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing raised")


def test_a_pydantic_error_names_the_field_and_the_problem():
    exc = _raised(lambda: TripwireRule(k=0))
    assert isinstance(exc, ValidationError)
    message = describe(exc)
    assert message is not None and "\n" not in message
    assert "k: " in message and "greater than or equal to 1" in message and "(got 0)" in message


def test_an_os_error_names_the_path_and_the_reason(tmp_path):
    exc = _raised(lambda: (tmp_path / "absent" / "x.txt").read_text())
    assert describe(exc) == f"{tmp_path / 'absent' / 'x.txt'}: No such file or directory"
    both = OSError(errno.EXDEV, "Invalid cross-device link", "a", None, "b")
    assert describe(both) == "a -> b: Invalid cross-device link"


def test_undecodable_text_names_the_file_read(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"caf\xe9\n")
    message = describe(_raised(lambda: path.read_text(encoding="utf-8")))
    assert message is not None
    assert message.startswith(f"{path}: not UTF-8 text (byte 0xe9 at offset 3")


def test_value_errors_and_ragbound_errors_are_their_message():
    assert describe(ValueError("alpha must be in (0, 1)")) == "alpha must be in (0, 1)"
    assert describe(InputError("bad.jsonl:2: not valid JSON")) == "bad.jsonl:2: not valid JSON"


def test_other_exceptions_are_bugs():
    for exc in (RuntimeError("boom"), KeyError("k"), TypeError("t"), ZeroDivisionError()):
        assert describe(exc) is None


def test_one_line_collapses_a_message():
    assert one_line("first line\n  second\tline ") == "first line second line"


def _app_raising(exc: BaseException) -> typer.Typer:
    """A real typer app with one command that raises ``exc``."""
    app = typer.Typer()

    @app.command()
    def fail() -> None:
        raise exc

    @app.command()
    def other() -> None:  # two commands: argv names the one to run
        pass

    return app


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), typer.Abort()])
def test_ctrl_c_is_interrupted_with_code_130(monkeypatch, capsys, exc):
    monkeypatch.setattr(ragbound.cli.entry, "app", _app_raising(exc))
    code, _, err = run(monkeypatch, capsys, "fail")
    assert code == 130 and err == "interrupted\n"


def test_a_bug_keeps_its_traceback(monkeypatch, capsys):
    monkeypatch.setattr(ragbound.cli.entry, "app", _app_raising(RuntimeError("a bug")))
    monkeypatch.setattr(sys, "argv", ["ragbound", "fail"])
    with pytest.raises(RuntimeError, match="a bug"):
        ragbound.cli.entry.main()


def test_a_command_exit_code_passes_through(monkeypatch, capsys):
    monkeypatch.setattr(ragbound.cli.entry, "app", _app_raising(typer.Exit(3)))
    code, _, err = run(monkeypatch, capsys, "fail")
    assert code == 3 and err == ""


@pytest.mark.parametrize(
    ("argv", "message", "usage"),
    [
        (["calibrate"], "Missing argument", "usage: ragbound calibrate [OPTIONS]"),
        (["decide", "kb", "--k", "2"], "No such option: --k", "usage: ragbound decide [OPTIONS]"),
        (["nosuch"], "No such command 'nosuch'", "usage: ragbound [OPTIONS] COMMAND"),
        (["tripwire", "add"], "Missing argument", "usage: ragbound tripwire add [OPTIONS]"),
    ],
)
def test_a_usage_error_is_one_line_with_the_usage(monkeypatch, capsys, argv, message, usage):
    code, out, err = run(monkeypatch, capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert message in err and usage in err and "--help')" in err
