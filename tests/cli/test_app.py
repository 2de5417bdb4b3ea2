"""The ``ragbound`` app as a whole."""

from tests.cli.runner import run


def test_help_lists_commands(monkeypatch, capsys):
    code, out, _ = run(monkeypatch, capsys, "--help")
    assert code == 0
    for command in ("index", "add", "calibrate", "decide", "evaluate"):
        assert command in out


def test_version_prints_the_package_version(monkeypatch, capsys):
    from ragbound import __version__

    code, out, _ = run(monkeypatch, capsys, "--version")
    assert code == 0
    assert out.strip() == f"ragbound {__version__}"
