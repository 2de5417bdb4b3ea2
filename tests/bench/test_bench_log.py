"""JsonlLog: append, read back, a torn last line is dropped, a corrupt middle line is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragbound.bench import JsonlLog, Label, short_id
from ragbound.errors import ArtifactError


def _label(n: int) -> Label:
    return Label(input_id=f"i{n}", annotator="ann", task="abstention", value="yes", created_at="t")


def test_records_round_trip_and_a_torn_tail_is_dropped(tmp_path: Path) -> None:
    log = JsonlLog(tmp_path / "labels.jsonl", Label)
    assert log.read() == []
    log.append([_label(1), _label(2)])
    with log.path.open("ab") as handle:
        handle.write(b'{"input_id": "i3", "annot')  # a crash mid-write
    assert [r.input_id for r in log.read()] == ["i1", "i2"]
    log.append([_label(3)])  # the rerun rewrites the lost record after the good ones
    assert [r.input_id for r in log.read()] == ["i1", "i2", "i3"]


def test_a_corrupt_complete_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    path.write_text('{"nope": 1}\n', encoding="utf-8")
    with pytest.raises(ArtifactError, match=r"labels.jsonl:1 is corrupt"):
        JsonlLog(path, Label).read()


def test_short_ids_are_stable_and_separate_parts() -> None:
    assert short_id("qa", "a", "bc") == short_id("qa", "a", "bc")
    assert short_id("qa", "a", "bc") != short_id("qa", "ab", "c")
    assert short_id("qa", "x").startswith("qa-") and len(short_id("qa", "x")) == 15
