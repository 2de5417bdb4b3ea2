"""Option validators, one per kind, used as typer callbacks where an option enters.

Each raises ``typer.BadParameter``; click prefixes the option's name, so the user reads
``Invalid value for '--alpha': must be between 0 and 1 (exclusive), got 2``.
Optional options pass ``None`` through; repeated options are checked item by item.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
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

    return callback


def _finite(value: float) -> None:
    if not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number, got {value}")


def _open_unit(value: float) -> None:
    _finite(value)
    if not 0.0 < value < 1.0:
        raise typer.BadParameter(f"must be between 0 and 1 (exclusive), got {value:g}")


def _closed_unit(value: float) -> None:
    _finite(value)
    if not 0.0 <= value <= 1.0:
        raise typer.BadParameter(f"must be between 0 and 1, got {value:g}")


def _positive(value: float) -> None:
    _finite(value)
    if value <= 0:
        raise typer.BadParameter(f"must be greater than 0, got {value:g}")


def _non_negative(value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise typer.BadParameter(f"must be a finite number >= 0, got {value}")


def _at_least(least: int) -> Callable[[int], None]:
    def check(value: int) -> None:
        if value < least:
            raise typer.BadParameter(f"must be at least {least}, got {value}")

    return check


def _seed(value: int) -> None:
    if not 0 <= value < SEED_LIMIT:
        raise typer.BadParameter(f"must be in 0..{SEED_LIMIT - 1}, got {value}")


def _port(value: int) -> None:
    if not 0 <= value <= 65535:
        raise typer.BadParameter(f"must be a TCP port in 0..65535 (0: any free), got {value}")


def _existing_file(value: Path) -> None:
    if not value.exists():
        raise typer.BadParameter(f"no such file: {value}")
    if not value.is_file():
        raise typer.BadParameter(f"not a file: {value}")


def _output_file(value: Path) -> None:
    if value.is_dir():
        raise typer.BadParameter(f"{value} is a folder; give the path of a file to write")


def _folder(value: Path) -> None:
    if value.exists() and not value.is_dir():
        raise typer.BadParameter(f"{value} is a file; give a folder (it is created if missing)")


def _http_url(value: str) -> None:
    if not value.startswith(("http://", "https://")) or len(value.split("://", 1)[1]) == 0:
        raise typer.BadParameter(f"must be an http:// or https:// URL; got {value!r}")


def _non_empty(value: str) -> None:
    if not value.strip():
        raise typer.BadParameter("must not be empty")


probability = _each(_open_unit)
"""Significance and confidence levels: strictly between 0 and 1."""
rate = _each(_closed_unit)
"""Rates and shares: 0 to 1 inclusive."""
positive_number = _each(_positive)
"""Temperatures, steps: finite and > 0."""
non_negative_number = _each(_non_negative)
"""Intervals that may be zero (off): finite and >= 0."""
finite_number = _each(_finite)
"""Thresholds: any finite number."""
positive_int = _each(_at_least(1))
"""Counts of things to make or show: k, n, samples, runs, concurrency, chunk size."""
non_negative_int = _each(_at_least(0))
"""Counts that may be zero: evidence, overlap."""
seed = _each(_seed)
port = _each(_port)
existing_file = _each(_existing_file)
"""Input files: must exist and not be a directory."""
output_file = _each(_output_file)
"""Files to write: not an existing folder."""
folder = _each(_folder)
"""Folders to write into (runs, plots, knowledge bases): not an existing file."""
non_empty = _each(_non_empty)
"""Names: not empty or blank."""
http_url = _each(_http_url)
"""Server addresses: http:// or https:// and a host."""


def at_least(least: int) -> Callable[[int | None], int | None]:
    """Integers with a floor other than 0 or 1 (e.g. a reply length cap)."""
    return _each(_at_least(least))  # type: ignore[return-value]


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


def window(value: str | None) -> str | None:
    """A shift window: at least 2 queries, or a positive duration (15m, 1h)."""
    if value is None:
        return None
    from ragbound.detect.monitor import WindowSpec
    from ragbound.errors import InputError

    try:
        spec = WindowSpec.parse(value)
    except InputError:
        raise typer.BadParameter(
            f"must be a query count (50) or a duration (90s, 15m, 1h, 1d), got {value!r}"
        ) from None
    if spec.size is not None and spec.size < 2:
        raise typer.BadParameter(f"a window needs at least 2 queries, got {value!r}")
    return value


def reranker(value: Path | None) -> Path | None:
    """A local cross-encoder folder: config.json of a one-logit *ForSequenceClassification."""
    if value is None:
        return None
    from ragbound.detect.rerank import check_reranker_folder
    from ragbound.errors import InputError

    try:
        check_reranker_folder(value)
    except InputError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


def granularity(value: str | None) -> str | None:
    """Search units: chunk, sentence, window, or a comma-separated list of them."""
    if value is None:
        return None
    from ragbound.corpus.units import parse_granularity
    from ragbound.errors import InputError

    try:
        parse_granularity(value)
    except InputError as exc:
        raise typer.BadParameter(str(exc).removeprefix("granularity: ")) from None
    return value


def temperature(value: str | None) -> str | None:
    """The energy temperature: ``auto`` or a finite number > 0."""
    if value is None or value == "auto":
        return value
    try:
        number = float(value)
    except ValueError:
        raise typer.BadParameter(f"must be 'auto' or a number > 0, got {value!r}") from None
    _positive(number)
    return value


def period(value: str | None) -> str | None:
    """A period of log time for the ``period`` correction (1d, 6h)."""
    if value is None:
        return None
    from ragbound.detect.monitor import parse_period
    from ragbound.errors import InputError

    try:
        parse_period(value)
    except InputError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


def _above_one(value: float) -> None:
    _finite(value)
    if value <= 1:
        raise typer.BadParameter(f"must be greater than 1, got {value:g}")


average_run_length = _each(_above_one)
"""Windows expected between false alarms (arl correction): finite and > 1."""


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


def _postgres_url(value: str) -> None:
    from ragbound.knowledge.postgres_tables import split_store_url

    try:
        split_store_url(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _sql_name(what: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        from ragbound.knowledge.postgres_tables import check_identifier

        try:
            check_identifier(value, what)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None

    return check


def _column_filter(value: str) -> None:
    """KEY=VALUE; whether KEY names a column or payload key is the store's to check."""
    key, sep, _ = value.partition("=")
    if not sep or not key.strip():
        raise typer.BadParameter(
            f"filter {value!r} must be COLUMN=VALUE or KEY=VALUE (for example collection_id=abc)"
        )


def _attach_url(value: str) -> None:
    """A URL of a store ragbound attaches to, checked by its backing (``check_url``)."""
    from ragbound.knowledge.registry import attaching

    try:
        attaching(value).check_url(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


# a postgresql:// URL without a password (it is recorded in the manifest)
postgres_url = _each(_postgres_url)
# a URL of a store ragbound attaches to (postgresql://, qdrant://, ...)
attach_url = _each(_attach_url)
# a plain SQL table name (NAME or SCHEMA.NAME) or column name, quoted by ragbound
table_name = _each(_sql_name("table"))
column_name = _each(_sql_name("column"))
# COLUMN=VALUE or KEY=VALUE, an equality filter without SQL
column_filter = _each(_column_filter)


def _ef_search(value: int) -> None:
    from ragbound.knowledge.postgres_tables import MAX_EF_SEARCH

    if not 1 <= value <= MAX_EF_SEARCH:
        raise typer.BadParameter(f"must be in 1..{MAX_EF_SEARCH}, got {value}")


# pgvector's hnsw.ef_search: candidates kept per query
ef_search = _each(_ef_search)


def _in_range(low: int, high: int) -> Callable[[int], None]:
    def check(value: int) -> None:
        if not low <= value <= high:
            raise typer.BadParameter(f"must be in {low}..{high}, got {value}")

    return check


def _hnsw_limit(name: str) -> Callable[[int], None]:
    """A local HNSW parameter's range, from ragbound.stores.hnsw (imported when checked)."""

    def check(value: int) -> None:
        from ragbound.stores import hnsw

        low, high = {"m": (2, hnsw.MAX_M), "rescore": (0, hnsw.MAX_RESCORE)}[name]
        _in_range(low, high)(value)

    return check


# a local HNSW graph's links per node
hnsw_m = _each(_hnsw_limit("m"))
# exact re-scoring factor: k x c candidates (0 = off)
rescore = _each(_hnsw_limit("rescore"))
