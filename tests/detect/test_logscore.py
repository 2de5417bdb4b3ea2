"""Scoring every query of a log: the same p-values as check, in file order, as JSONL or Parquet."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragbound.detect import Guard
from ragbound.detect.logscore import check_score_output, score_file, write_scores
from ragbound.engines import make_search
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE


@pytest.fixture(scope="module")
def guard(minilm_kb_dir: Path) -> Guard:
    return Guard(
        KnowledgeBase.load(minilm_kb_dir),
        Guard.calibrate(
            KnowledgeBase.load(minilm_kb_dir), IN_KNOWLEDGE + MORE_IN_KNOWLEDGE, k=4, alpha=0.1
        ).calibration,
    )


def write_log(path: Path, queries: list[str]) -> Path:
    lines = [json.dumps({"time": 1000 + i, "query": q}) for i, q in enumerate(queries)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_scores_match_check_in_file_order(guard: Guard, tmp_path: Path) -> None:
    queries = [IN_KNOWLEDGE[0], *OUT_OF_KNOWLEDGE[:3], IN_KNOWLEDGE[4]]
    log = write_log(tmp_path / "log.jsonl", queries)
    table = score_file(guard, log, make_search(guard))
    verdicts = guard.check_many(queries)
    assert table.query == queries
    assert table.line.tolist() == [1, 2, 3, 4, 5]
    assert table.time == [1000, 1001, 1002, 1003, 1004]
    np.testing.assert_allclose(table.p_value, [v.p_value for v in verdicts])
    np.testing.assert_allclose(table.score, [v.score for v in verdicts], rtol=1e-6)
    assert table.out_of_knowledge.tolist() == [v.out_of_knowledge for v in verdicts]
    assert table.out_of_knowledge[1:4].all() and not table.out_of_knowledge[0]


def test_a_plain_query_file_has_no_times(guard: Guard, tmp_path: Path) -> None:
    path = tmp_path / "queries.txt"
    path.write_text("\n".join(OUT_OF_KNOWLEDGE[:2]) + "\n", encoding="utf-8")
    table = score_file(guard, path, make_search(guard), statistic="avgknn", alpha=0.2)
    assert table.time == [None, None] and table.statistic == "avgknn" and table.alpha == 0.2


def test_jsonl_and_parquet_hold_the_same_rows(guard: Guard, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    log = write_log(tmp_path / "log.jsonl", [IN_KNOWLEDGE[1], OUT_OF_KNOWLEDGE[3]])
    table = score_file(guard, log, make_search(guard))
    write_scores(table, tmp_path / "scores.jsonl")
    write_scores(table, tmp_path / "scores.parquet")
    rows = [json.loads(line) for line in (tmp_path / "scores.jsonl").read_text().splitlines()]
    assert rows == table.rows()
    parquet = pq.read_table(tmp_path / "scores.parquet")
    assert parquet.column("p_value").to_pylist() == [row["p_value"] for row in rows]
    assert parquet.column("time").to_pylist() == ["1000", "1001"]
    assert parquet.schema.metadata[b"ragbound.statistic"] == table.statistic.encode()


def test_only_jsonl_and_parquet_are_written(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"\.jsonl or \.parquet"):
        check_score_output(tmp_path / "scores.csv")


def test_an_address_needs_the_ray_engine(guard: Guard) -> None:
    with pytest.raises(InputError, match="--address needs --engine ray"):
        make_search(guard, "local", address="auto")
