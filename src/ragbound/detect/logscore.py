"""P-values for every query of a log or query file, written as JSONL or Parquet.

The search (embedding and top-k, the expensive part) is a :data:`~ragbound.engines.Search`,
so it runs in this process or on Ray; the statistic and the conformal p-value are computed here
from the similarities, the same way on either engine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragbound.artifacts import write_atomically, write_jsonl
from ragbound.corpus import load_query_records, validate_query
from ragbound.detect.guard import Guard
from ragbound.detect.monitor import logged_query, parse_time
from ragbound.engines import Search
from ragbound.errors import InputError
from ragbound.logseries import series
from ragbound.records import Record

SCORE_FORMATS = (".jsonl", ".parquet")


@dataclass(frozen=True)
class ScoreTable:
    """One row per query, in file order: ``line`` (1-based, in the input), ``time`` (the log's
    timestamp as written, or None), ``query`` (the text scored: for a conversation's turn in a
    service's log, the text its test searched), ``score`` (the statistic, higher = more out of
    knowledge), ``p_value`` (small = out of knowledge) and ``out_of_knowledge`` (p <= alpha)."""

    line: np.ndarray
    time: list[Any]
    query: list[str]
    score: np.ndarray
    p_value: np.ndarray
    out_of_knowledge: np.ndarray
    statistic: str
    alpha: float
    # the file of each row when several were scored (rotated files, replicas' logs)
    source: list[str] | None = None

    def rows(self) -> list[dict[str, Any]]:
        return [
            {
                **({"source": self.source[i]} if self.source else {}),
                "line": int(self.line[i]),
                "time": self.time[i],
                "query": self.query[i],
                "score": float(self.score[i]),
                "p_value": float(self.p_value[i]),
                "out_of_knowledge": bool(self.out_of_knowledge[i]),
            }
            for i in range(len(self.query))
        ]


def score_file(
    guard: Guard,
    path: str | Path | Sequence[str | Path],
    search: Search,
    *,
    field: str | None = None,
    time_field: str = "time",
    statistic: str | None = None,
    alpha: float | None = None,
) -> ScoreTable:
    """Score every query of ``path`` (a query log or any query file; a log's rotated files
    ``LOG.000001``, ... first) with the guard's calibration; ``search`` gives the top-k
    similarities (see :mod:`ragbound.engines`). Several paths (one log per replica of a
    service): their rows merged by time (file order when a row has no time), each row's
    ``source`` naming its file. A service's line for a conversation's turn is scored on the
    text the service searched (its ``conversation.searched``), so the p-values are the live
    ones."""
    paths = [path] if isinstance(path, str | Path) else list(path)
    files = [file for given in paths for file in series(Path(given)) or [Path(given)]]
    records = [
        (record, _searched(record, query, field), file)
        for file in files
        for record, query in load_query_records(file, field=field)
    ]
    if len(paths) > 1:
        records.sort(key=lambda item: _sort_time(item[0].fields.get(time_field)))
    queries = [query for _, query, _ in records]
    scored = guard.score_with_search(queries, search, statistic=statistic, alpha=alpha)
    return ScoreTable(
        line=np.array([record.line for record, _, _ in records]),
        time=[record.fields.get(time_field) for record, _, _ in records],
        source=[file.name for _, _, file in records] if len(files) > 1 else None,
        query=queries,
        score=scored.scores,
        p_value=scored.p_values,
        out_of_knowledge=scored.p_values <= scored.alpha,
        statistic=scored.statistic,
        alpha=scored.alpha,
    )


def _searched(record: Record, query: str, field: str | None) -> str:
    """The text to score for a record whose ``query`` is read: a logged conversation turn's
    text its test searched (:func:`~ragbound.detect.monitor.logged_query`), else the query."""
    read_from = field or "query"
    name, value = logged_query(record.fields, read_from)
    return query if name == read_from else validate_query(value, location=record.where(name))


def _sort_time(value: Any) -> float:
    """A row's time for merging logs (a row without one keeps its place at the start)."""
    try:
        return parse_time(value, "time")
    except InputError:
        return -math.inf


def check_score_output(path: Path) -> None:
    """InputError unless ``path`` ends in .jsonl or .parquet (and Parquet can be written)."""
    if path.suffix not in SCORE_FORMATS:
        raise InputError(f"{path}: write scores to a .jsonl or .parquet file")
    if path.suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise InputError(
                f"{path}: Parquet needs pyarrow: pip install pyarrow (or 'ragbound[ray]')"
            ) from None


def write_scores(table: ScoreTable, path: Path) -> None:
    """Write ``table`` as JSONL (one object per line) or Parquet, by ``path``'s extension,
    whole or not at all. Parquet keeps the statistic and alpha in the file's metadata."""
    check_score_output(path)
    if path.suffix == ".jsonl":
        write_jsonl(path, table.rows())
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    sources = {"source": pa.array(table.source, pa.string())} if table.source else {}
    columns = {
        **sources,
        "line": pa.array(table.line, pa.int64()),
        "time": pa.array([None if t is None else str(t) for t in table.time], pa.string()),
        "query": pa.array(table.query, pa.string()),
        "score": pa.array(table.score, pa.float64()),
        "p_value": pa.array(table.p_value, pa.float64()),
        "out_of_knowledge": pa.array(table.out_of_knowledge, pa.bool_()),
    }
    metadata = {"ragbound.statistic": table.statistic, "ragbound.alpha": str(table.alpha)}
    arrow = pa.table(columns).replace_schema_metadata(metadata)
    write_atomically(path, lambda handle: pq.write_table(arrow, handle))
