"""Where the service writes its decisions (:class:`LogWriter`): the query log, durably, or
nowhere (numbered in memory); a failed write makes the service not ready until one succeeds."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Sequence

from ragbound.gate import Decision
from ragbound.locking import writer_lock
from ragbound.serve.metrics import Registry
from ragbound.serve.querylog import LoggedLine, QueryLog, QueryLogError
from ragbound.serve.settings import ServeSettings

PROBE_EVERY_S = 1.0  # after a failed log write, /readyz probes the disk at most this often


class LogWriter:
    """The service's decisions written to ``settings.log`` (or numbered, without a log).

    The query log is opened, and its single-writer lock taken, here (a worker opens it shared:
    its supervisor holds the lock). ``error`` says why the last write failed (None: it did
    not); meanwhile ``ragbound_ready`` is 0 in ``metrics``.
    """

    def __init__(self, settings: ServeSettings, metrics: Registry):
        self.metrics = metrics
        self.error: str | None = None
        self.log: QueryLog | None = None
        self._held = contextlib.ExitStack()
        self._probed_at = -PROBE_EVERY_S
        self._lines = 0  # decisions so far when there is no log
        if settings.log is not None and settings.worker is not None:
            self.log = QueryLog(
                settings.log, settings.log_queries, shared=True, rotation=settings.rotation
            )
        elif settings.log is not None:
            with contextlib.ExitStack() as held:  # the lock is released if the log is refused
                held.enter_context(writer_lock(settings.log, what="query log", timeout=0))
                self.log = QueryLog(settings.log, settings.log_queries, rotation=settings.rotation)
                self._held = held.pop_all()

    def write(self, decisions: Sequence[Decision], ready: bool) -> list[LoggedLine]:
        """Append ``decisions`` durably (QueryLogError when the write fails: none of the batch
        is answered); without a log, number them. ``ready``: the service's readiness, shown
        again once a write succeeds after a failure."""
        if self.log is None:
            now = time.time()
            first, self._lines = self._lines + 1, self._lines + len(decisions)
            return [LoggedLine(first + i, now, d.test.score) for i, d in enumerate(decisions)]
        try:
            logged = self.log.append(decisions)
        except QueryLogError as exc:
            self._failed(exc)
            raise
        self._written(ready)
        return logged

    def writable(self, ready: bool) -> bool:
        """Whether the log takes writes (``/readyz``): after a failed write, whether a probe
        beside it succeeds (at most one every ``PROBE_EVERY_S`` seconds), so that a service
        no request reaches while it is not ready becomes ready again."""
        if self.log is None or self.error is None:
            return True
        now = time.monotonic()
        if now - self._probed_at < PROBE_EVERY_S:
            return False
        self._probed_at = now
        try:
            self.log.probe()
        except QueryLogError:
            return False
        self._written(ready)
        return True

    def close(self) -> None:
        """Close the log and release its lock."""
        if self.log is not None:
            self.log.close()
        self._held.close()

    def _failed(self, exc: QueryLogError) -> None:
        """Not ready until a write succeeds; said once on stderr (the first failure)."""
        if self.error is None:
            sys.stderr.write(f"error: {exc}: answering 503 until a write succeeds\n")
        self.error = f"cannot write the query log ({exc.reason})"
        self.metrics.set("ragbound_ready", 0)

    def _written(self, ready: bool) -> None:
        if self.error is not None:
            self.error = None
            self.metrics.set("ragbound_ready", int(ready))
            sys.stderr.write("warning: the query log is written again\n")
