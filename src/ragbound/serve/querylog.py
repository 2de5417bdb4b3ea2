"""The query log: one JSON line per decision, on disk before the request is answered.

A line holds ``time`` (UTC, never earlier than the line before), ``query`` (text,
``sha256:<hex>`` or absent, per ``log_queries``), ``action``, ``cause``, ``p_value``, ``score``
(higher = more out of knowledge), ``statistic``, the fired ``triggers`` and ``trigger_ids``,
``chunk_ids``, ``calibration_id`` and, where they apply, ``answerability`` and
``conversation`` (its ``searched`` text kept as the query is); docs/service.md lists them.

A batch is one ``write``, fsync-ed before any of its requests is answered. Opening cuts a torn
last line (its request was never answered); a failed write raises :class:`QueryLogError` and
leaves the file as the last whole batch left it. Only a log this module wrote is opened
(:func:`check_query_log`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ragbound.detect.answerability import AnswerabilityVerdict
from ragbound.detect.monitor import SEARCHED
from ragbound.errors import InputError, RagboundError, where
from ragbound.faults import io_fault
from ragbound.gate import Decision, fired_topics
from ragbound.logseries import file_id, next_rotated, remaining
from ragbound.serve.batcher import BatchFailure
from ragbound.serve.settings import LogQueries, Rotation
from ragbound.serve.shown import fired_ids

_TAIL_SCAN = 1 << 16
_FIRST_LINE_MAX = 1 << 20  # far longer than any decision line (queries are capped)
ROW_START = b'{"time": "'  # how every line begins: json.dumps of a row whose first key is time
ROW_FIELDS = ("time", "action", "score")
PROBE_BYTES = 4096  # what a probe writes: a page, as a batch of a few decisions takes


class QueryLogError(RagboundError, BatchFailure):
    """The query log could not be written; ``reason``: the system's words (``No space left
    on device``), which say nothing of the file (the message names it too)."""

    def __init__(self, path: Path, exc: OSError):
        self.reason = exc.strerror or str(exc)
        super().__init__(f"cannot write the query log {path} ({self.reason})")


@dataclass(frozen=True)
class LoggedLine:
    """Where a decision landed: its 1-based line number, epoch time and score."""

    line: int
    time: float
    score: float


class QueryLog:
    """Appends decisions to a JSONL file durably; one writer thread at a time (a lock).

    ``shared``: the workers of one service append together, each batch under an exclusive
    ``flock``, so lines stay whole and in time order; a worker does not know the line numbers
    (its :class:`LoggedLine` have ``line`` 0: the supervisor's monitor reads the file).
    """

    def __init__(
        self,
        path: Path,
        mode: LogQueries = "full",
        *,
        shared: bool = False,
        rotation: Rotation | None = None,
    ):
        self.path = Path(path)
        self.mode = mode
        self.shared = shared
        self.rotation = rotation or Rotation()
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        check_query_log(self.path)
        # the workers' lock is a file of its own: the log's descriptor changes at a rotation
        self._append_lock = (
            _open(self.path.with_name(f".{self.path.name}.append")) if shared else None
        )
        self._fd = _open(self.path)
        if shared:
            self.size, self.lines, self._last_time = 0, 0, 0.0
        else:
            self.size = _cut_torn_tail(self._fd)
            self.lines, self._last_time = _count_lines(self.path)
        self._day = _first_day(self._fd)
        self._failed = False  # the last append failed: the next one repairs first
        _fsync_dir(self.path.parent)

    @property
    def place(self) -> tuple[str, int]:
        """Where the last line written ends: the active file's identity and its size."""
        return file_id(self._fd), self.size

    def append(self, decisions: Sequence[Decision]) -> list[LoggedLine]:
        """Write one line per decision, flush and fsync; return where each landed.
        QueryLogError when the system refuses (nothing of the batch is left in the file)."""
        with self._lock:
            try:
                with self._file_lock():
                    logged = self._append(decisions)
            except OSError as exc:
                self._failed = True
                raise QueryLogError(self.path, exc) from None
            self._failed = False
            return logged

    def probe(self) -> None:
        """Write ``PROBE_BYTES`` to a file beside the log, fsync and remove it: QueryLogError
        while the disk takes no writes. Nothing is appended to the log."""
        path = self.path.with_name(f".{self.path.name}.probe")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
            try:
                _write_durably(fd, b"\n" * PROBE_BYTES)
            finally:
                os.close(fd)
                path.unlink(missing_ok=True)
        except OSError as exc:
            raise QueryLogError(self.path, exc) from None

    def _append(self, decisions: Sequence[Decision]) -> list[LoggedLine]:
        if self.shared:  # where the other workers left the end (whole, see _whole_end)
            self._follow_rotation()
            self.size = _whole_end(self._fd)
        elif self._failed:
            self._repair()
        # taken under the file's lock: no line is earlier than the one before it
        now = max(dt.datetime.now(dt.UTC).timestamp(), self._last_time)
        step = 0 if self.shared else 1  # a shared log's line numbers are not known here
        rows = [self._row(decision, now) for decision in decisions]
        # a lone surrogate (a topic or chunk id a store gave, requests refuse them) is
        # written as its JSON escape "\udxxx": the line stays UTF-8 and JSON, never a lost batch
        data = "".join(rows).encode("utf-8", "backslashreplace")
        self._rotate_if_due(now, len(data))
        logged = [
            LoggedLine(self.lines + step * (i + 1), now, decision.test.score)
            for i, decision in enumerate(decisions)
        ]
        try:
            _write_durably(self._fd, data)
        except OSError:  # e.g. a full disk: cut what got written, never leave half a line
            os.ftruncate(self._fd, self.size)
            raise
        self.lines += step * len(rows)
        self.size += len(data)
        self._last_time = now
        self._day = self._day or _day(now)
        return logged

    def _repair(self) -> None:
        """After a failed append to a log of one writer: finish a rotation that renamed the
        file but could not open the new one, and cut what the failed write left."""
        self._follow_rotation()
        os.ftruncate(self._fd, self.size)

    def _rotate_if_due(self, now: float, adding: int) -> None:
        """Start a new file before a batch that would pass the size limit, or on a new UTC
        day: the batch is written whole into the new file (nothing lost at the instant)."""
        rotation = self.rotation
        if self.size == 0:
            return
        full = rotation.max_bytes is not None and self.size + adding > rotation.max_bytes
        new_day = rotation.daily and self._day is not None and self._day != _day(now)
        if not (full or new_day):
            return
        os.rename(self.path, next_rotated(self.path))  # readers keep their place by identity
        self._reopen()

    def _follow_rotation(self) -> None:
        """Reopen the log when another worker rotated it since this one last wrote."""
        try:
            current = file_id(self.path)
        except FileNotFoundError:
            current = None
        if current != file_id(self._fd):
            self._reopen()

    def _reopen(self) -> None:
        fd = _open_fd(self.path)
        _fsync_dir(self.path.parent)
        os.close(self._fd)
        self._fd, self.size, self.lines = fd, os.fstat(fd).st_size, 0
        self._day = _first_day(fd)

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        """The workers' exclusive lock while a shared log is written (nothing otherwise)."""
        if self._append_lock is None:
            yield
            return
        fcntl.flock(self._append_lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._append_lock, fcntl.LOCK_UN)

    def _row(self, decision: Decision, now: float) -> str:
        row: dict[str, object] = {
            "time": dt.datetime.fromtimestamp(now, dt.UTC).isoformat(timespec="microseconds")
        }
        shown = shown_query(decision.query, self.mode)
        if shown is not None:
            row["query"] = shown
        row |= {
            "action": decision.action,
            "cause": decision.cause,
            "p_value": decision.test.p_value,
            "score": decision.test.score,
            "statistic": decision.test.statistic,
            "triggers": fired_topics(decision),
            "trigger_ids": fired_ids(decision),
            "chunk_ids": [chunk.chunk_id for chunk in decision.neighbours],
            "calibration_id": decision.calibration_id,
        }
        if decision.answerability is not None:
            row["answerability"] = answerability_fields(decision.answerability)
        if decision.conversation is not None:
            row["conversation"] = self._conversation(decision)
        return json.dumps(row, ensure_ascii=False) + "\n"

    def _conversation(self, decision: Decision) -> dict[str, object]:
        """A conversation's fields of its row; the text searched only when it is not the
        turn decided (the query), and shown as the query is."""
        assert decision.conversation is not None
        fields: dict[str, object] = decision.conversation.model_dump(exclude_none=True)
        searched = decision.test.query
        shown = shown_query(searched, self.mode) if searched != decision.query else None
        if shown is not None:
            fields[SEARCHED] = shown
        return fields

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)
            if self._append_lock is not None:
                os.close(self._append_lock)


def answerability_fields(verdict: AnswerabilityVerdict) -> dict[str, object]:
    """The answerability test as a log line keeps it, as the boundary test's is kept
    (statistic, score, p-value); not its evidence, which names the question's words."""
    return {"statistic": verdict.statistic, "score": verdict.score, "p_value": verdict.p_value}


def shown_query(query: str, mode: LogQueries) -> str | None:
    """What is kept of a query: itself (``full``), its SHA-256 (``hash``) or nothing."""
    if mode == "full":
        return query
    if mode == "hash":
        return "sha256:" + hashlib.sha256(query.encode()).hexdigest()
    return None


def check_query_log(path: Path) -> None:
    """Refuse a file this module did not write: InputError ``FILE: not a decision log ...``
    unless ``path`` is absent or empty, or its first line is a decision (``time``, ``action``,
    ``score``) and a last line without its newline is only the start of one (a write cut
    short). Reads the file's first and last bytes only."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(_FIRST_LINE_MAX)
            tail = os.pread(handle.fileno(), min(size, _TAIL_SCAN), max(0, size - _TAIL_SCAN))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"{path}: cannot read the query log ({exc.strerror})") from None
    problem = _head_problem(head, size) or _torn_tail_problem(tail, size)
    if problem:
        raise InputError(
            f"{path}: not a decision log written by ragbound serve ({problem}); --log appends "
            "to a log of the service's own: give a path that does not exist yet, or one "
            "ragbound serve wrote"
        )


def _head_problem(head: bytes, size: int) -> str | None:
    """What keeps the file's first line from being a decision (None: nothing)."""
    end = head.find(b"\n")
    if end < 0:  # no whole line: at most a first write cut short, checked as the tail
        return "line 1 is longer than any decision" if size > len(head) else None
    try:
        item = json.loads(head[:end])
    except ValueError:
        return "line 1 is not JSON"
    if not isinstance(item, dict):
        return "line 1 is not a JSON object"
    missing = [field for field in ROW_FIELDS if field not in item]
    if missing:
        return f"line 1 has no {' or '.join(repr(field) for field in missing)} field"
    return None


def _torn_tail_problem(tail: bytes, size: int) -> str | None:
    """What keeps the bytes after the last newline from being a decision line cut short."""
    end = tail.rfind(b"\n")
    torn = tail[end + 1 :]
    if end < 0 and size > len(tail):
        return "its last line is longer than any decision"
    if torn and not ROW_START.startswith(torn[: len(ROW_START)]):
        return "its last line is neither whole nor the start of a decision"
    return None


def read_scores(
    path: Path, place: tuple[str | None, int], first_line: int
) -> list[tuple[LoggedLine, tuple[str, int]]]:
    """(line, place after it) for each whole line of the log's series from ``place`` (a file
    identity, None for the log itself, and a byte offset), numbered from ``first_line``: how a
    monitor catches up without embedding again. InputError ``FILE:LINE: ...`` for a line that
    is not a decision, or when the file of ``place`` is gone or shorter."""
    found = []
    number = first_line - 1
    for file, offset in remaining(path, *place):
        identity = file_id(file)
        with file.open("rb") as handle:
            handle.seek(offset)
            for raw in handle:
                if not raw.endswith(b"\n"):
                    break
                number += 1
                offset += len(raw)
                found.append((_scored(raw, file, number), (identity, offset)))
    return found


def _scored(raw: bytes, path: Path, number: int) -> LoggedLine:
    try:
        return LoggedLine(number, _line_time(raw), float(json.loads(raw)["score"]))
    except (ValueError, KeyError, TypeError):
        raise InputError(f"{where(path, number)}: not a decision with its time and score") from None


def _cut_torn_tail(fd: int) -> int:
    """Truncate the file after its last newline; the new size."""
    size = os.fstat(fd).st_size
    end = size
    while end > 0:
        start = max(0, end - _TAIL_SCAN)
        chunk = os.pread(fd, end - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            keep = start + newline + 1
            break
        end = start
    else:
        keep = 0
    if keep != size:
        os.ftruncate(fd, keep)
        os.fsync(fd)
    return keep


def _open(path: Path) -> int:
    try:
        return _open_fd(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot open the query log ({exc.strerror})") from None


def _open_fd(path: Path) -> int:
    """The log file open for appending (created if missing); OSError when it cannot be."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o640)


def _day(seconds: float) -> int:
    """The UTC day of a time (days since the epoch)."""
    return int(seconds // 86_400)


def _first_day(fd: int) -> int | None:
    """The UTC day of a log file's first line (None: empty, or unreadable)."""
    head = os.pread(fd, _FIRST_LINE_MAX, 0)
    end = head.find(b"\n")
    if end < 0:
        return None
    try:
        return _day(_line_time(head[:end]))
    except (ValueError, KeyError, TypeError):
        return None


def _whole_end(fd: int) -> int:
    """The size of a shared log, first cutting a line a worker killed mid-write left torn (so
    the next lines do not follow half of one); one byte read when the end is whole."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    return _cut_torn_tail(fd)


def _count_lines(path: Path) -> tuple[int, float]:
    """Lines in the log and the time of the last one (0 when empty or unreadable)."""
    count, last = 0, b""
    with path.open("rb") as handle:
        for raw in handle:
            count += 1
            if raw.strip():
                last = raw
    try:
        return count, _line_time(last)
    except (ValueError, KeyError, TypeError):
        return count, 0.0


def _line_time(raw: bytes) -> float:
    """A log line's ``time`` as epoch seconds (ValueError, KeyError or TypeError without)."""
    return dt.datetime.fromisoformat(json.loads(raw)["time"]).timestamp()


def _write_durably(fd: int, data: bytes) -> None:
    """Write all of ``data`` and fsync (the fault points ``querylog.write`` and
    ``querylog.fsync`` stand before the system calls)."""
    io_fault("querylog.write")
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    io_fault("querylog.fsync")
    os.fsync(fd)


def _fsync_dir(folder: Path) -> None:
    """Make a newly created log's directory entry durable too."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
