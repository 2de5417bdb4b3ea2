"""The ``ragbound`` app as a whole."""

from tests.cli.runner import run


def test_help_lists_commands(monkeypatch, capsys):
    code, out, _ = run(monkeypatch, capsys, "--help")
    assert code == 0
    for command in ("index", "add", "calibrate", "check", "evaluate"):
        assert command in out
