"""The shift monitor inside the service, fed the statistic's scores of the decisions.

The service does not re-read its log to monitor it: each batch's scores go straight to
:meth:`ShiftMonitor.feed_scores`, with the log's line numbers and times, so the monitor works
whatever the log keeps of the query (full, hash, none). Its state (log offset, window counter,
the open window's scores) is saved beside the log when a window completes, every few seconds
and at shutdown; after a crash the lines logged since the last save are replayed from their
``score`` field, so no window is lost or counted twice. The state file's writer lock is held
while the service runs (one monitor per state, as for ``ragbound shift --state``).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ragbound.detect.guard import Guard
from ragbound.detect.monitor import MonitorState, ShiftMonitor, WindowSpec, save_state
from ragbound.errors import ArtifactError, InputError
from ragbound.locking import writer_lock
from ragbound.results import WindowResult
from ragbound.serve.metrics import Registry
from ragbound.serve.querylog import LoggedLine, QueryLog, read_scores

SAVE_EVERY_S = 2.0
RECENT_WINDOWS = 500  # kept for the dashboard's timeline


class ServiceMonitor:
    """Windows of ``window`` decisions, KS-tested against the calibration queries.

    ``log``: the service's query log (None: the state lives in memory only). ``state_path``:
    where the state is saved (with a log); its writer lock is taken here and released by
    :meth:`close` (ArtifactError when another process holds it). Results go to ``metrics``
    and ``recent``.
    """

    def __init__(
        self,
        guard: Guard,
        window: int,
        metrics: Registry,
        log: QueryLog | None = None,
        state_path: Path | None = None,
    ):
        self.monitor = ShiftMonitor(guard, WindowSpec(size=window))
        self.metrics = metrics
        self.log = log
        self.state_path = state_path if log is not None else None
        self.recent: list[WindowResult] = []
        self._lock = threading.Lock()
        self._saved_at = time.monotonic()
        self._held = contextlib.ExitStack()
        if self.state_path is not None:
            lock = writer_lock(self.state_path, what="monitor state", timeout=0)
            self._held.enter_context(lock)
        try:
            self.state = self._resume()
        except BaseException:
            self._held.close()
            raise

    def _resume(self) -> MonitorState:
        if self.log is None:
            return self.monitor.new_state(Path("memory"))
        try:
            state = self.monitor.resume(self.log.path, self.state_path)
        except (InputError, ArtifactError) as exc:  # another calibration or damaged: start over
            sys.stderr.write(f"warning: {exc}; the shift monitor starts a new state\n")
            state = self.monitor.new_state(self.log.path)
        replay = read_scores(self.log.path, state.offset, state.line + 1)
        if replay:
            self._feed(state, [line for line, _ in replay], replay[-1][1])
        self._save(state)
        return state

    def feed(self, logged: Sequence[LoggedLine], log_size: int | None = None) -> None:
        """Add a batch's decisions (in log order); ``log_size``: the log's size after them."""
        with self._lock:
            self._feed(self.state, logged, log_size)
            if self.state_path and time.monotonic() - self._saved_at >= SAVE_EVERY_S:
                self._save(self.state)

    def _feed(
        self, state: MonitorState, logged: Sequence[LoggedLine], log_size: int | None
    ) -> None:
        if not logged:
            return
        results = self.monitor.feed_scores(
            state,
            np.array([item.line for item in logged]),
            np.array([item.time for item in logged]),
            np.array([item.score for item in logged]),
        )
        state.line, state.last_time = logged[-1].line, logged[-1].time
        if log_size is not None:  # before any save: the state covers exactly these lines
            state.offset = log_size
        for result in results:
            self.metrics.set("ragbound_monitor_last_p_value", result.p_value)
            self.metrics.inc("ragbound_monitor_windows_total")
            self.metrics.inc("ragbound_monitor_alarms_total", float(result.alarm))
        self.recent = (self.recent + results)[-RECENT_WINDOWS:]
        if results and self.state_path:
            self._save(state)

    def _save(self, state: MonitorState) -> None:
        if self.state_path is not None:
            save_state(self.state_path, state)
            self._saved_at = time.monotonic()

    def close(self) -> None:
        """Save the state and release its lock."""
        with self._lock, self._held:
            self._save(self.state)
