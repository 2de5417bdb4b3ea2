"""Streaming shift monitor over a query log: one KS test per window, resumable.

The log is JSONL (a timestamp and a query per line, in time order), read incrementally from a
byte offset kept in a state file with the window counter and the open window's scores, so a
restarted monitor continues where it stopped. A line without a final newline is left for the
next run (the writer may be mid-line). Each full window's statistic values (higher = more
out-of-knowledge) are compared with the calibration queries' by the two-sample KS test; the
windows and the false-alarm ``correction`` schemes are described in docs/shift.md, their
guarantees in :mod:`ragbound.stats.spending`.
"""

from __future__ import annotations

import datetime as dt
import heapq
import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from ragbound.artifacts import sha256_text, write_json
from ragbound.corpus import validate_query
from ragbound.detect.guard import Guard
from ragbound.detect.shift import reference_scores
from ragbound.errors import ArtifactError, InputError, where
from ragbound.faults import crash_point
from ragbound.locking import writer_lock
from ragbound.logseries import file_id, remaining, series
from ragbound.progress import progress_bar
from ragbound.records import case_hint, json_line, standard_json
from ragbound.results import WindowResult
from ragbound.stats import ks_two_sample

if TYPE_CHECKING:
    from ragbound.engines import Search
from ragbound.stats.spending import (
    SCHEMES,
    arl_level,
    period_key,
    window_level,
    windows_per_period,
)

STATE_FORMAT = "ragbound-monitor-state/1"
SCORE_BATCH = 256
Correction = Literal["spending", "period", "arl", "none"]
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class WindowSpec:
    """A window of ``size`` queries, or of ``seconds`` of log time (exactly one is set)."""

    size: int | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, text: str | int) -> WindowSpec:
        """``50`` (queries) or ``90s``, ``15m``, ``1h``, ``1d`` (log time)."""
        spec = cls._parse(text)
        if spec is None:
            raise InputError(
                f"window must be a query count (50) or a duration (15m, 1h), got {text!r}"
            )
        return spec

    @classmethod
    def _parse(cls, text: str | int) -> WindowSpec | None:
        value = str(text).strip().lower()
        try:
            if value and value[-1] in _UNITS:
                seconds = float(value[:-1]) * _UNITS[value[-1]]
                if seconds > 0 and math.isfinite(seconds):
                    return cls(seconds=seconds)
            elif int(value) >= 1:
                return cls(size=int(value))
        except ValueError:
            pass
        return None

    def describe(self) -> str:
        return f"{self.size} queries" if self.size else f"{self.seconds:g} s"


class MonitorState(BaseModel):
    """Where a monitor stopped: resume point and the scored queries of the open window."""

    format: str = STATE_FORMAT
    log: str
    kb_fingerprint: str
    settings: dict[str, str | float | int | None]
    offset: int = 0
    # the file ``offset`` is in (ragbound.logseries.file_id: the place survives a rotation;
    # None: the log itself)
    file: str | None = None
    line: int = 0
    last_time: float | None = None
    windows: int = 0
    window_start: float | None = None
    buffer: list[tuple[int, float, float]] = Field(
        default_factory=list, description="(line, epoch seconds, score) of the open window"
    )
    period_key: int | None = Field(
        default=None, description="the current period of the period correction"
    )
    period_tested: int = Field(default=0, description="windows tested in the current period")


Place = tuple[str, int]
"""Where a reader is in a log's series: the file's identity and the byte offset after a line."""


@dataclass(frozen=True)
class LogLine:
    line: int
    time: float
    query: str


def parse_time(value: object, location: str) -> float:
    """Epoch seconds from a number or an ISO 8601 string (naive times are taken as UTC)."""
    if isinstance(value, bool):
        raise InputError(f"{location}: the timestamp must be ISO 8601 or epoch seconds")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an int too large for a float
            seconds = math.inf
    elif isinstance(value, str):
        try:
            stamp = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            try:
                seconds = float(value)
            except ValueError:
                raise InputError(
                    f"{location}: {value!r} is not an ISO 8601 time or epoch seconds"
                ) from None
        else:
            if stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=dt.UTC)
            try:
                seconds = stamp.timestamp()
            except (OverflowError, ValueError):  # a time zone that leaves years 1..9999
                seconds = math.inf
    else:
        raise InputError(f"{location}: the timestamp must be ISO 8601 or epoch seconds")
    if not math.isfinite(seconds):
        raise InputError(f"{location}: the timestamp {value!r} is not finite")
    try:
        iso(seconds)
    except (OverflowError, ValueError, OSError):
        raise InputError(
            f"{location}: the timestamp {value!r} is out of range (years 1 to 9999)"
        ) from None
    return seconds


def iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="seconds")


SEARCHED = "searched"
"""The field of a logged conversation turn holding the text its test searched."""


def read_log(
    path: Path,
    *,
    offset: int = 0,
    first_line: int = 1,
    time_field: str = "time",
    query_field: str = "query",
) -> Iterator[tuple[LogLine, int]]:
    """(record, byte offset after its line) for each complete line from ``offset`` on."""
    number = first_line - 1
    with path.open("rb") as handle:
        handle.seek(offset)
        for raw in handle:
            if not raw.endswith(b"\n"):
                return  # the writer may still be on this line: leave it for the next run
            number += 1
            text = _decode(raw, path, number, offset).strip()
            offset += len(raw)
            if text:
                yield _record(text, path, number, time_field, query_field), offset


def _decode(raw: bytes, path: Path, number: int, offset: int) -> str:
    """A log line as text; InputError naming the line and byte when it is not UTF-8 (worded
    as :func:`ragbound.records.read_text` words it)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{where(path, number)}: not UTF-8 text (invalid byte 0x{raw[exc.start]:02x} at "
            f"byte offset {offset + exc.start}); re-encode the file as UTF-8"
        ) from None


def _record(text: str, path: Path, number: int, time_field: str, query_field: str) -> LogLine:
    location = where(path, number)
    item = json_line(text, str(path), number)  # the one reader's JSON rules (depth, surrogates)
    if not isinstance(item, dict):
        raise InputError(
            f"{location}: expected a JSON object with {time_field!r} and {query_field!r}"
        )
    for field in (time_field, query_field):
        if field not in item:
            raise InputError(
                f"{where(path, number, field)}: missing (the line has {sorted(item)})"
                + case_hint((field,), item)
            )
    field, value = logged_query(item, query_field)
    query = validate_query(value, location=where(path, number, field))
    return LogLine(number, parse_time(item[time_field], where(path, number, time_field)), query)


def logged_query(item: dict[str, Any], query_field: str = "query") -> tuple[str, Any]:
    """The field of a log line whose text is scored, and its value (None when absent): for a
    conversation's turn logged by ``ragbound serve`` (:mod:`ragbound.serve.querylog`), the text
    its test searched (``conversation.searched``) when the query is read from ``query``, so a
    replay scores what the service scored; else ``query_field``."""
    chat = item.get("conversation")
    if query_field == "query" and isinstance(chat, dict) and SEARCHED in chat:
        return f"conversation.{SEARCHED}", chat[SEARCHED]
    return query_field, item.get(query_field)


class ShiftMonitor:
    """KS test of each window of a query stream against the calibration queries.

    ``correction`` sets each window's level (docs/shift.md): ``period`` needs
    ``period`` (``"1d"``), ``arl`` needs ``arl`` (windows per false alarm, and ignores
    ``alpha``). ``search`` gives the top-k similarities of each batch of ``score_batch`` log
    lines (default: the guard's own, in this process; see :mod:`ragbound.engines` for Ray).

    Example:
        >>> monitor = ShiftMonitor(Guard.load("kb/"), WindowSpec(size=50))  # doctest: +SKIP
        >>> for window in monitor.follow("queries.log.jsonl", "state.json"):  # doctest: +SKIP
        ...     print(window.end, window.p_value, window.alarm)
    """

    def __init__(
        self,
        guard: Guard,
        window: WindowSpec,
        *,
        step: int | float | None = None,
        alpha: float = 0.05,
        correction: Correction = "spending",
        period: str | None = None,
        arl: float | None = None,
        statistic: str | None = None,
        time_field: str = "time",
        query_field: str = "query",
        search: Search | None = None,
        score_batch: int = SCORE_BATCH,
    ) -> None:
        if correction not in SCHEMES:
            raise InputError(f"unknown correction {correction!r}; expected one of {list(SCHEMES)}")
        if not 0.0 < alpha < 1.0:
            raise InputError(f"alpha must be in (0, 1), got {alpha}")
        self.guard = guard
        self.window = window
        self.step = _check_step(window, step)
        self.alpha = alpha
        self.correction = correction
        self.period_seconds = _check_period(correction, period)
        self.arl = _check_arl(correction, arl)
        # time windows start `step` apart, so a period holds a known number of them
        self.period_windows = (
            windows_per_period(self.period_seconds, float(self.step))
            if self.period_seconds is not None and window.seconds is not None
            else None
        )
        self.statistic = guard.config.updated(statistic=statistic).statistic
        self.reference = reference_scores(guard, statistic)
        self.time_field = time_field
        self.query_field = query_field
        self.search = search
        self.score_batch = score_batch

    def settings(self) -> dict[str, str | float | int | None]:
        """What a state file must match to be resumed by this monitor."""
        return {
            "window_size": self.window.size,
            "window_seconds": self.window.seconds,
            "step": self.step,
            "alpha": self.alpha,
            "correction": self.correction,
            "period_seconds": self.period_seconds,
            "arl": self.arl,
            "statistic": self.statistic,
            "time_field": self.time_field,
            "query_field": self.query_field,
        }

    def window_alpha(self, index: int, index_in_period: int | None = None) -> float:
        """The level of window ``index`` (0-based over the stream) after the correction;
        ``index_in_period`` is its rank in its period (``period`` correction only)."""
        return window_level(
            self.correction,
            self.alpha,
            index,
            index_in_period=index_in_period,
            windows_per_period=self.period_windows,
            arl=self.arl,
        )

    def _next_alpha(self, state: MonitorState, start_time: float) -> float:
        """Level of the next window to test (starting at ``start_time``); moves the period on."""
        if self.period_seconds is None:
            return self.window_alpha(state.windows)
        key = period_key(start_time, self.period_seconds)
        if key != state.period_key:
            state.period_key, state.period_tested = key, 0
        state.period_tested += 1
        return self.window_alpha(state.windows, state.period_tested - 1)

    # ---------------------------------------------------------------- windows
    def feed_scores(
        self, state: MonitorState, lines: np.ndarray, times: np.ndarray, scores: np.ndarray
    ) -> list[WindowResult]:
        """Add scored queries (in time order) to the open window; test every window that
        fills. Updates ``state`` in place; the statistics step alone, for benchmarks too."""
        results = []
        for line, time, score in zip(lines.tolist(), times.tolist(), scores.tolist(), strict=True):
            if self.window.seconds is not None:
                results += self._close_time_windows(state, time)
            state.buffer.append((line, time, score))
            if self.window.size is not None and len(state.buffer) >= self.window.size:
                results.append(self._test(state, state.buffer[: self.window.size]))
                del state.buffer[: int(self.step)]
        return results

    def _close_time_windows(self, state: MonitorState, time: float) -> list[WindowResult]:
        seconds, step = float(self.window.seconds or 0), float(self.step)
        if state.window_start is None:
            state.window_start = time
        results = []
        while time >= state.window_start + seconds:
            end = state.window_start + seconds
            inside = [item for item in state.buffer if item[1] < end]
            if len(inside) >= 2:  # a KS test on 0 or 1 query says nothing
                results.append(self._test(state, inside))
            state.window_start += step
            state.buffer = [item for item in state.buffer if item[1] >= state.window_start]
            if not state.buffer and time >= state.window_start + seconds:
                state.window_start += step * math.floor((time - state.window_start) / step)
        return results

    def _test(self, state: MonitorState, items: list[tuple[int, float, float]]) -> WindowResult:
        # a time window belongs to the period of its nominal start (starts are `step` apart)
        start = state.window_start if self.window.seconds is not None else None
        alpha = self._next_alpha(state, items[0][1] if start is None else start)
        scores = np.fromiter((item[2] for item in items), dtype=np.float64, count=len(items))
        result = ks_two_sample(self.reference, scores, alpha=alpha)
        window = WindowResult(
            window=state.windows,
            start=iso(items[0][1]),
            end=iso(items[-1][1]),
            first_line=items[0][0],
            last_line=items[-1][0],
            n=len(items),
            statistic=result.statistic,
            p_value=result.p_value,
            alpha=alpha,
            alarm=result.shifted,
            critical_value=result.critical_value if math.isfinite(result.critical_value) else None,
            score_statistic=self.statistic,
        )
        state.windows += 1
        return window

    # ------------------------------------------------------------------- logs
    def new_state(self, log: Path) -> MonitorState:
        """A state at the start of ``log``'s series (its oldest rotated file, if any)."""
        files = series(log)
        return MonitorState(
            log=str(log.resolve()),
            kb_fingerprint=self.guard.kb.fingerprint,
            settings=self.settings(),
            file=file_id(files[0]) if files else None,
        )

    def follow(
        self,
        log: str | Path,
        state_path: str | Path | None = None,
        *,
        progress: bool = False,
        restart: bool = False,
        on_wait: Callable[[str], None] | None = None,
    ) -> Iterator[WindowResult]:
        """Test every window that completes in ``log`` since the last run, saving the state.

        With ``state_path``, the state is loaded when it exists (and must match this monitor
        and log; ``restart`` forgets it) and saved after each batch of queries and at the
        end, so a crash can repeat a window's report but never loses one. One monitor at a
        time per state file: the state's writer lock is held while the generator runs (a
        second one waits, calling ``on_wait`` once, then is refused).
        """
        log = Path(log)
        if not log.is_file():
            raise InputError(f"{log}: no such log file")
        if state_path is None:
            yield from self._follow(log, None, progress)
            return
        state_path = Path(state_path)
        with writer_lock(state_path, what="monitor state", on_wait=on_wait):
            if restart:
                state_path.unlink(missing_ok=True)
            yield from self._follow(log, state_path, progress)

    def _follow(self, log: Path, state_path: Path | None, progress: bool) -> Iterator[WindowResult]:
        state = self.resume(log, state_path)
        todo = remaining(log, state.file, state.offset)
        # bytes read so far = where a file's bytes begin in the unread stream + offset in it
        begins, unread = {}, 0
        for file, start in todo:
            begins[file_id(file)] = unread - start
            unread += max(0, file.stat().st_size - start)
        done = 0
        with progress_bar(unread, "monitoring (bytes)", progress) as advance:
            for batch in _batches(self._records(todo, state), self.score_batch):
                records = [record for record, _ in batch]
                scores = self._score([record.query for record in records])
                lines = np.array([record.line for record in records])
                times = np.array([record.time for record in records])
                windows = self.feed_scores(state, lines, times, scores)
                (state.file, state.offset), state.line = batch[-1][1], records[-1].line
                advance(begins[state.file] + state.offset - done)
                done = begins[state.file] + state.offset
                state.last_time = float(times[-1])
                yield from windows
                if state_path:
                    save_state(state_path, state)
        if state_path:
            save_state(state_path, state)

    def follow_merged(self, logs: Sequence[str | Path]) -> Iterator[WindowResult]:
        """Test every window of several logs (one per replica of a service, each with its
        rotated files) merged in time order, from their start: a state follows one log, so
        each call reads them all again. Lines are numbered in the merged order."""
        state = self.new_state(Path(logs[0]))
        streams = []
        for log in map(Path, logs):
            if not log.is_file():
                raise InputError(f"{log}: no such log file")
            todo = [(file, 0) for file in series(log)]
            streams.append(self._records(todo, self.new_state(log)))
        merged = heapq.merge(*streams, key=lambda item: item[0].time)
        for batch in _batches(merged, self.score_batch):
            records = [record for record, _ in batch]
            lines = state.line + 1 + np.arange(len(records))
            times = np.array([record.time for record in records])
            scores = self._score([record.query for record in records])
            yield from self.feed_scores(state, lines, times, scores)
            state.line, state.last_time = int(lines[-1]), float(times[-1])

    def _records(
        self, todo: list[tuple[Path, int]], state: MonitorState
    ) -> Iterator[tuple[LogLine, Place]]:
        """The records from the state's place on, across rotated files, numbered on."""
        previous, line = state.last_time, state.line
        for log, start in todo:
            place = file_id(log)
            for record, offset in read_log(
                log,
                offset=start,
                first_line=line + 1,
                time_field=self.time_field,
                query_field=self.query_field,
            ):
                if previous is not None and record.time < previous:
                    raise InputError(
                        f"{where(log, record.line, self.time_field)}: timestamps out of order "
                        f"({iso(record.time)} is before the previous {iso(previous)}); sort "
                        "the log"
                    )
                previous, line = record.time, record.line
                yield record, (place, offset)

    def _score(self, queries: list[str]) -> np.ndarray:
        return self.guard.score_with_search(queries, self.search, statistic=self.statistic).scores

    def resume(self, log: str | Path, state_path: str | Path | None = None) -> MonitorState:
        """The state to continue monitoring ``log`` from, for :meth:`feed_scores`.

        The state saved at ``state_path`` (by :func:`save_state`) when there is one, checked
        against this monitor: InputError when it belongs to another log, knowledge base,
        calibration or settings, or the log is shorter than the offset it reached (replaced);
        ArtifactError when the file is damaged. Otherwise (no ``state_path``, nothing saved
        there yet) a new state at the start of the log.

        Temporary files that a save interrupted by a crash left beside ``state_path`` are
        deleted first, so call it holding the state's writer lock
        (``ragbound.locking.writer_lock(state_path, what="monitor state")``), as
        :meth:`follow` and the service do, and keep it while saving the state.
        """
        log = Path(log)
        if state_path is None:
            return self.new_state(log)
        state_path = Path(state_path)
        _remove_temporary(state_path)
        if not state_path.exists():
            return self.new_state(log)
        state = load_state(state_path)
        expected = self.new_state(log)
        if state.log != expected.log:
            raise InputError(f"{state_path} belongs to the log {state.log}, not {expected.log}")
        if state.kb_fingerprint != expected.kb_fingerprint:
            raise InputError(f"{state_path} was made with another knowledge base or calibration")
        if state.settings != expected.settings:
            raise InputError(
                f"{state_path} was made with other settings ({state.settings}); "
                "use the same ones or a new state file"
            )
        remaining(log, state.file, state.offset)  # InputError when replaced or gone
        return state


def _check_step(window: WindowSpec, step: int | float | None) -> int | float:
    if step is None:
        return window.size if window.size is not None else float(window.seconds or 0)
    if window.size is not None:
        if isinstance(step, bool) or int(step) != step or not 1 <= step <= window.size:
            raise InputError(
                f"step must be a whole number of queries in 1..{window.size}, got {step}"
            )
        return int(step)
    if not 0 < step <= float(window.seconds or 0):
        raise InputError(f"step must be in (0, {window.seconds:g}] seconds, got {step}")
    return float(step)


def parse_period(text: str) -> float:
    """Seconds of a period of the ``period`` correction: ``1d``, ``6h``, ``30m``."""
    spec = WindowSpec._parse(text)
    if spec is None or spec.seconds is None:
        raise InputError(
            f"period must be a duration of log time (1d, 6h), got {text!r}; "
            "for a budget per number of windows use correction 'arl'"
        )
    return spec.seconds


def _check_period(correction: str, period: str | None) -> float | None:
    if correction != "period":
        if period is not None:
            raise InputError(f"period is used only with correction 'period', not {correction!r}")
        return None
    if period is None:
        raise InputError("correction 'period' needs a period of log time (1d, 6h)")
    return parse_period(period)


def _check_arl(correction: str, arl: float | None) -> float | None:
    if correction != "arl":
        if arl is not None:
            raise InputError(f"arl is used only with correction 'arl', not {correction!r}")
        return None
    if arl is None:
        raise InputError("correction 'arl' needs arl: the windows expected per false alarm")
    try:
        arl_level(arl)
    except (TypeError, ValueError):
        raise InputError(f"arl must be a finite number of windows > 1, got {arl!r}") from None
    return float(arl)


def _batches(
    items: Iterable[tuple[LogLine, Place]], size: int
) -> Iterator[list[tuple[LogLine, Place]]]:
    batch: list[tuple[LogLine, Place]] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def save_state(path: Path, state: MonitorState) -> None:
    """Write the state atomically with a checksum of its content.

    The text goes to a temporary file beside ``path``, then replaces it: a crash mid-save
    leaves the previous state whole, and at most that temporary file, which the next
    :meth:`ShiftMonitor.resume` deletes.
    """
    # canonical JSON (sorted keys): the text the checksum covers
    payload = json.dumps(state.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    crash_point("monitor.save:before-write")
    write_json(path, {"checksum": sha256_text(payload), "state": json.loads(payload)})
    crash_point("monitor.save:written")


def _remove_temporary(path: Path) -> None:
    """Delete temporary files an interrupted save of ``path`` left (call with its lock held)."""
    if not path.parent.is_dir():
        return
    for stale in path.parent.iterdir():
        if stale.name.startswith(f".{path.name}.") and stale.name.endswith(".tmp"):
            stale.unlink(missing_ok=True)


def load_state(path: Path) -> MonitorState:
    """Read a state file; a damaged or edited one is refused, never trusted."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        state = MonitorState.model_validate(data["state"])
    except (
        OSError,
        UnicodeDecodeError,
        json.JSONDecodeError,
        KeyError,
        TypeError,
        ValidationError,
    ) as exc:
        raise ArtifactError(
            f"{path}: the monitor state is corrupt ({type(exc).__name__}); delete it to start over"
        ) from None
    # the checksum covers the state as written, so fields added later may be missing from it
    written = json.dumps(data["state"], sort_keys=True, separators=(",", ":"))
    if data.get("checksum") != sha256_text(written):
        raise ArtifactError(
            f"{path}: the monitor state does not match its checksum (damaged or edited); "
            "delete it to start over"
        )
    if state.format != STATE_FORMAT:
        raise ArtifactError(f"{path}: unknown monitor state format {state.format!r}")
    return state


def is_log(path: Path, time_field: str = "time") -> bool:
    """True when ``path`` is JSONL whose first non-blank line is an object with ``time_field``."""
    if path.suffix.lower() != ".jsonl" or not path.is_file():
        return False
    with path.open("rb") as handle:
        for raw in handle:
            if raw.strip():
                try:
                    item = standard_json(raw.decode("utf-8"))
                except ValueError:  # not UTF-8, not JSON, nested too deep: not a log
                    return False
                return isinstance(item, dict) and time_field in item
    return False
