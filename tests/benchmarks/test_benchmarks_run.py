"""benchmarks/run.py's table of parts: every invocation the Makefile and the docs name resolves
to a part, arguments go only to the parts that take them, and ``--list`` prints them all."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.run import DEFAULT, PARTS, main, resolve

ROOT = Path(__file__).resolve().parents[2]
NAMED = re.compile(r"benchmarks\.run ((?:[a-z][a-z0-9-]*\|)*[a-z][a-z0-9-]*)")


def named_parts() -> set[str]:
    """Every ``benchmarks.run NAME`` (or ``NAME|NAME``) in the Makefile, docs/ and benchmarks/."""
    files = [ROOT / "Makefile", *(ROOT / "docs").glob("*.md"), *(ROOT / "benchmarks").glob("*.py")]
    names = set()
    for path in files:
        for match in NAMED.finditer(path.read_text(encoding="utf-8")):
            names.update(match.group(1).split("|"))
    return names


def test_every_named_part_resolves() -> None:
    names = named_parts()
    assert {"serve", "zoo", "conversations", "shift", "attached"} <= names
    for name in names:
        assert resolve([name])[0] == name


def test_no_part_named_is_make_bench_and_arguments_go_only_where_taken() -> None:
    assert resolve([]) == (DEFAULT, PARTS[DEFAULT], [])
    assert resolve(["serve", "--requests", "10"])[2] == ["--requests", "10"]
    for name in ("zoo", "conversations"):
        assert resolve([name, "render"])[2] == ["render"]
    with pytest.raises(SystemExit, match="takes no arguments"):
        resolve(["near", "extra"])
    with pytest.raises(SystemExit, match="no part 'nosuch'"):
        resolve(["nosuch"])


def test_list_prints_every_part_with_what_it_needs(capsys) -> None:
    main(["--list"])
    lines = capsys.readouterr().out.splitlines()
    for name, part in PARTS.items():
        (line,) = [line for line in lines if line.split(" ")[0] == name]
        assert f"[{part.needs}" in line and part.about in line
