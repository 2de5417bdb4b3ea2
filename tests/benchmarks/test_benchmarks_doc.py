"""docs/benchmarks.md sections: each benchmark part replaces only its own (benchmarks/doc.py)."""

from __future__ import annotations

import datetime as dt
import os
import platform
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import doc
from benchmarks.doc import (
    BENCH_DOC,
    machine_description,
    markdown_table,
    measured_or_saved,
    write_section,
)
from benchmarks.run import SECTIONS


@pytest.fixture(autouse=True)
def _no_render_stamp_left() -> Iterator[None]:
    # a render's stamp is process state: no test leaves it to the next
    yield
    doc._RENDERED.clear()


DAY_1, DAY_2 = dt.date(2026, 1, 2), dt.date(2026, 3, 4)


def write(path: Path, name: str, body: str, today: dt.date = DAY_1) -> str:
    write_section(name, name.title(), body, path=path, today=today, machine="box")
    return path.read_text()


def test_the_file_is_created_with_a_header_and_the_dated_section(tmp_path: Path) -> None:
    path = tmp_path / "docs" / "benchmarks.md"
    text = write(path, "shift", "| a |\n|---|\n| 1 |")
    assert text.startswith("# Benchmarks\n")
    start, end = text.index("<!-- bench:shift -->"), text.index("<!-- /bench:shift -->")
    assert text[start:end].splitlines()[1:] == [
        "## Shift",
        "",
        "*Measured 2026-01-02 on box.*",
        "",
        "| a |",
        "|---|",
        "| 1 |",
    ]


def test_a_rerun_replaces_only_its_own_section_and_keeps_the_commentary(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.md"
    write(path, "quality", "old quality table")
    path.write_text(path.read_text() + "\nHand-written reading of the quality table.\n")
    write(path, "shift", "old shift table")
    text = write(path, "quality", "new quality table", today=DAY_2)
    assert "new quality table" in text and "old quality table" not in text
    assert "*Measured 2026-03-04 on box.*" in text  # the rerun section's date
    assert "old shift table" in text and "*Measured 2026-01-02 on box.*" in text
    assert "Hand-written reading of the quality table." in text
    assert text.index("bench:quality") < text.index("Hand-written") < text.index("bench:shift")
    assert text.count("<!-- bench:quality -->") == 1 and text.count("<!-- bench:shift -->") == 1


def test_a_section_with_one_marker_is_refused_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.md"
    path.write_text("# Benchmarks\n\n<!-- bench:shift -->\nhalf a section\n")
    with pytest.raises(ValueError, match="only one of its two markers"):
        write(path, "shift", "table")
    assert path.read_text().endswith("half a section\n")


@pytest.mark.parametrize("name", ["", "Shift", "a b", "x-->"])
def test_section_names_are_plain_identifiers(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="section name"):
        write(tmp_path / "b.md", name, "table")


def test_the_default_stamp_names_todays_date_and_the_machine(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.md"
    write_section("speed", "Speed", "table", path=path)
    text = path.read_text()
    assert f"*Measured {dt.date.today().isoformat()} on " in text
    described = machine_description()
    assert f"{os.cpu_count()} cores" in described and "GiB RAM" in described
    assert f"Python {platform.python_version()}" in described and "numpy " in described


def test_markdown_tables_have_a_separator_row() -> None:
    assert markdown_table(["a", "b"], [["1", "2"]]) == ["| a | b |", "|---|---|", "| 1 | 2 |"]


def test_the_committed_document_has_every_section_of_make_bench() -> None:
    text = BENCH_DOC.read_text()
    for name in [*SECTIONS, "abstention", "serve"]:
        assert text.count(f"<!-- bench:{name} -->") == 1, name
        assert text.count(f"<!-- /bench:{name} -->") == 1, name


def test_a_render_keeps_the_date_and_machine_it_was_measured_on(tmp_path: Path) -> None:
    raw, path = tmp_path / "part.json", tmp_path / "benchmarks.md"
    assert measured_or_saved([], raw, lambda: {"x": 1}, "part") == {"x": 1}
    stamp = tmp_path / "part.stamp.json"
    stamp.write_text('{"date": "2020-01-02", "machine": "an old box"}')
    assert measured_or_saved(["render"], raw, lambda: {"x": 2}, "part") == {"x": 1}
    write_section("part", "Part", "table", path=path)
    assert "*Measured 2020-01-02 on an old box.*" in path.read_text()
    measured_or_saved([], raw, lambda: {"x": 3}, "part")  # a measurement stamps today again
    write_section("part", "Part", "table", path=path)
    assert f"*Measured {dt.date.today().isoformat()} on " in path.read_text()


def test_a_render_without_a_stamp_file_takes_the_raw_file_date(tmp_path: Path) -> None:
    raw, path = tmp_path / "part.json", tmp_path / "benchmarks.md"
    raw.write_text('{"x": 1}')
    os.utime(raw, (0, dt.datetime(2021, 3, 4, 12).timestamp()))
    measured_or_saved(["render"], raw, lambda: {}, "part")
    write_section("part", "Part", "table", path=path)
    assert "*Measured 2021-03-04 on " in path.read_text()
