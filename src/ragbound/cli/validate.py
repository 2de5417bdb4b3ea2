"""Option validators, one per kind, used as typer callbacks where an option enters.

Each raises ``typer.BadParameter``; click prefixes the option's name, so the user reads
``Invalid value for '--alpha': must be between 0 and 1 (exclusive), got 2``.
Optional options pass ``None`` through; repeated options are checked item by item.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import typer

T = TypeVar("T")

# a sliding window may move by no less than this share of its size (else: millions of windows)
MIN_STEP_SHARE = 1e-4
SEED_LIMIT = 2**32  # numpy's seed range


def _each(check: Callable[[T], None]) -> Callable[[T | list[T] | None], T | list[T] | None]:
    """A callback that skips None and applies ``check`` to one value or each of a list."""

    def callback(value: T | list[T] | None) -> T | list[T] | None:
        if value is None:
            return None
        for item in value if isinstance(value, list) else [value]:
            check(item)
        return value

    callback.__doc__ = check.__doc__
    return callback


@contextmanager
def _refused() -> Iterator[None]:
    """A library check's InputError (or other ValueError) in the block, as the option's error."""
    try:
        yield
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _in_range(low: int, high: int, value: int) -> None:
    if not low <= value <= high:
        raise typer.BadParameter(f"must be in {low}..{high}, got {value}")


@_each
def finite_number(value: float) -> None:
    """Thresholds: any finite number."""
    if not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number, got {value}")


@_each
def probability(value: float) -> None:
    """Significance and confidence levels: strictly between 0 and 1."""
    finite_number(value)
    if not 0.0 < value < 1.0:
        raise typer.BadParameter(f"must be between 0 and 1 (exclusive), got {value:g}")


@_each
def rate(value: float) -> None:
    """Rates and shares: 0 to 1 inclusive."""
    finite_number(value)
    if not 0.0 <= value <= 1.0:
        raise typer.BadParameter(f"must be between 0 and 1, got {value:g}")


@_each
def positive_number(value: float) -> None:
    """Temperatures, steps: finite and > 0."""
    finite_number(value)
    if value <= 0:
        raise typer.BadParameter(f"must be greater than 0, got {value:g}")


@_each
def non_negative_number(value: float) -> None:
    """Intervals that may be zero (off): finite and >= 0."""
    if not (math.isfinite(value) and value >= 0):
        raise typer.BadParameter(f"must be a finite number >= 0, got {value}")


@_each
def average_run_length(value: float) -> None:
    """Windows expected between false alarms (arl correction): finite and > 1."""
    finite_number(value)
    if value <= 1:
        raise typer.BadParameter(f"must be greater than 1, got {value:g}")


def at_least(least: int) -> Callable[[int | None], int | None]:
    """Integers of at least ``least``."""

    def check(value: int) -> None:
        if value < least:
            raise typer.BadParameter(f"must be at least {least}, got {value}")

    return _each(check)  # type: ignore[return-value]


positive_int = at_least(1)
"""Counts of things to make or show: k, n, samples, runs, concurrency, chunk size."""
non_negative_int = at_least(0)
"""Counts that may be zero: evidence, overlap."""


@_each
def seed(value: int) -> None:
    """Random seeds, in numpy's range."""
    _in_range(0, SEED_LIMIT - 1, value)


@_each
def port(value: int) -> None:
    """TCP ports (0: any free one)."""
    if not 0 <= value <= 65535:
        raise typer.BadParameter(f"must be a TCP port in 0..65535 (0: any free), got {value}")


@_each
def existing_file(value: Path) -> None:
    """Input files: must exist and not be a directory."""
    if not value.exists():
        raise typer.BadParameter(f"no such file: {value}")
    if not value.is_file():
        raise typer.BadParameter(f"not a file: {value}")


@_each
def output_file(value: Path) -> None:
    """Files to write: not an existing folder."""
    if value.is_dir():
        raise typer.BadParameter(f"{value} is a folder; give the path of a file to write")


@_each
def folder(value: Path) -> None:
    """Folders to write into (runs, plots, knowledge bases): not an existing file."""
    if value.exists() and not value.is_dir():
        raise typer.BadParameter(f"{value} is a file; give a folder (it is created if missing)")


@_each
def non_empty(value: str) -> None:
    """Names: not empty or blank."""
    if not value.strip():
        raise typer.BadParameter("must not be empty")


@_each
def http_url(value: str) -> None:
    """Server addresses: http:// or https:// and a host."""
    if not value.startswith(("http://", "https://")) or len(value.split("://", 1)[1]) == 0:
        raise typer.BadParameter(f"must be an http:// or https:// URL; got {value!r}")


_BYTE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9}
_BYTE_UNITS |= {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def byte_size(value: str | None) -> int | None:
    """A size in bytes: ``100000000``, ``100MB`` or ``1GiB`` (at least 1 byte)."""
    if value is None:
        return None
    found = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", value)
    unit = found.group(2).upper() if found else None
    if found is None or unit not in _BYTE_UNITS or int(found.group(1)) < 1:
        raise typer.BadParameter(f"must be a size such as 100000000, 100MB or 1GiB; got {value!r}")
    return int(found.group(1)) * _BYTE_UNITS[unit]


def choice(*allowed: str) -> Callable[[str | None], str | None]:
    """One of ``allowed`` (exact match)."""

    def check(value: str) -> None:
        if value not in allowed:
            raise typer.BadParameter(f"must be one of {', '.join(allowed)}; got {value!r}")

    return _each(check)  # type: ignore[return-value]


def statistic(value: str | None) -> str | None:
    """A test statistic name (mss, knn, ...), checked against the statistics ragbound has."""
    from ragbound.stats.names import STATISTICS

    return choice(*STATISTICS)(value)


def reading(value: str | None) -> str | None:
    """A reading of conversations (ragbound.conversations.reading, loaded only when given)."""
    if value is None:
        return None
    from ragbound.conversations.reading import READINGS

    return choice(*READINGS)(value)


def calibration_statistic(value: str | None) -> str | None:
    """A statistic to calibrate: one of ragbound's, combined, or auto (picked by power)."""
    from ragbound.detect.names import AUTO, COMBINED
    from ragbound.stats.names import STATISTICS

    return choice(*STATISTICS, COMBINED, AUTO)(value)


@_each
def window(value: str) -> None:
    """A shift window: at least 2 queries, or a positive duration (15m, 1h)."""
    from ragbound.detect.monitor import WindowSpec

    try:
        spec = WindowSpec.parse(value)
    except ValueError:
        raise typer.BadParameter(
            f"must be a query count (50) or a duration (90s, 15m, 1h, 1d), got {value!r}"
        ) from None
    if spec.size is not None and spec.size < 2:
        raise typer.BadParameter(f"a window needs at least 2 queries, got {value!r}")


@_each
def reranker(value: Path) -> None:
    """A local cross-encoder folder: config.json of a one-logit *ForSequenceClassification."""
    from ragbound.detect.rerank import check_reranker_folder

    with _refused():
        check_reranker_folder(value)


@_each
def granularity(value: str) -> None:
    """Search units: chunk, sentence, window, or a comma-separated list of them."""
    from ragbound.corpus.units import parse_granularity

    try:
        parse_granularity(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc).removeprefix("granularity: ")) from None


def temperature(value: str | None) -> str | None:
    """The energy temperature: ``auto`` or a finite number > 0."""
    if value is None or value == "auto":
        return value
    try:
        number = float(value)
    except ValueError:
        raise typer.BadParameter(f"must be 'auto' or a number > 0, got {value!r}") from None
    positive_number(number)
    return value


@_each
def period(value: str) -> None:
    """A period of log time for the ``period`` correction (1d, 6h)."""
    from ragbound.detect.monitor import parse_period

    with _refused():
        parse_period(value)


def check_step(step: float | None, window_size: float, unit: str) -> None:
    """Refuse a slide so small against its window that it would make millions of windows.

    ``window_size`` is in the step's ``unit`` (queries or seconds).
    """
    least = window_size * MIN_STEP_SHARE
    if step is not None and step < least:
        from ragbound.errors import InputError

        raise InputError(
            f"--step {step:g} is too small for a window of {window_size:g} {unit}: "
            f"use at least {least:g} (1/{round(1 / MIN_STEP_SHARE)} of the window)"
        )


@_each
def postgres_url(value: str) -> None:
    """A postgresql:// URL without a password (it is recorded in the manifest)."""
    from ragbound.knowledge.postgres_tables import split_store_url

    with _refused():
        split_store_url(value)


@_each
def attach_url(value: str) -> None:
    """A URL of a store ragbound attaches to (postgresql://, qdrant://, ...), checked by its
    backing (``check_url``)."""
    from ragbound.knowledge.registry import attaching

    with _refused():
        attaching(value).check_url(value)


def _sql_name(what: str) -> Callable[[str | None], str | None]:
    """A plain SQL ``what`` name (a table's may be SCHEMA.NAME), quoted by ragbound."""

    def check(value: str) -> None:
        from ragbound.knowledge.postgres_tables import check_identifier

        with _refused():
            check_identifier(value, what)

    return _each(check)  # type: ignore[return-value]


table_name = _sql_name("table")
column_name = _sql_name("column")


@_each
def column_filter(value: str) -> None:
    """COLUMN=VALUE or KEY=VALUE, an equality filter without SQL; whether KEY names a column
    or payload key is the store's to check."""
    key, sep, _ = value.partition("=")
    if not sep or not key.strip():
        raise typer.BadParameter(
            f"filter {value!r} must be COLUMN=VALUE or KEY=VALUE (for example collection_id=abc)"
        )


@_each
def ef_search(value: int) -> None:
    """pgvector's hnsw.ef_search: candidates kept per query."""
    from ragbound.knowledge.postgres_tables import MAX_EF_SEARCH

    _in_range(1, MAX_EF_SEARCH, value)


@_each
def hnsw_m(value: int) -> None:
    """A local HNSW graph's links per node."""
    from ragbound.stores.hnsw import MAX_M

    _in_range(2, MAX_M, value)


@_each
def rescore(value: int) -> None:
    """Exact re-scoring factor of a local HNSW graph: k x C candidates (0 = off)."""
    from ragbound.stores.hnsw import MAX_RESCORE

    _in_range(0, MAX_RESCORE, value)
