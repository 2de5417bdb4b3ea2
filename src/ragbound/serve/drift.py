"""The shift monitor inside the service, fed the statistic's scores of the decisions.

Each batch's scores go straight to :meth:`ShiftMonitor.feed_scores`, so the monitor works
whatever the log keeps of the query. Its state is saved beside the log when a window completes,
every ``SAVE_EVERY_S`` and at shutdown; after a crash the lines logged since the last save are
replayed from their ``score``, so no window is lost or counted twice. A save the disk refuses
is a warning, never a failed request: a restart replays the log.
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
    """Windows of ``window`` decisions, KS-tested against the calibration queries; results in
    ``metrics`` and ``recent``. ``log`` None: the state lives in memory only. ``state_path``'s
    writer lock is held until :meth:`close` (ArtifactError when another process holds it).
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
        self._unsaved = False  # the last save failed (said once)
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
        self._replay(state)
        self._save(state)
        return state

    def catch_up(self) -> int:
        """Feed the whole lines other processes appended to the log's series since the
        state's place (the workers of a service); how many."""
        with self._lock:
            count = self._replay(self.state)
            self._save_now_and_then()
        return count

    def _replay(self, state: MonitorState) -> int:
        assert self.log is not None, "a monitor without a log has nothing to read"
        found = read_scores(self.log.path, (state.file, state.offset), state.line + 1)
        if found:
            self._feed(state, [line for line, _ in found], found[-1][1])
        return len(found)

    def feed(self, logged: Sequence[LoggedLine], place: tuple[str, int] | None = None) -> None:
        """Add a batch's decisions (in log order); ``place``: where the log ends after them
        (:attr:`QueryLog.place`)."""
        with self._lock:
            self._feed(self.state, logged, place)
            self._save_now_and_then()

    def _save_now_and_then(self) -> None:
        if self.state_path and time.monotonic() - self._saved_at >= SAVE_EVERY_S:
            self._save(self.state)

    def _feed(
        self, state: MonitorState, logged: Sequence[LoggedLine], place: tuple[str, int] | None
    ) -> None:
        if not logged:
            return
        # numbered on from the state: the log's line numbers restart in each rotated file
        lines = state.line + 1 + np.arange(len(logged))
        results = self.monitor.feed_scores(
            state,
            lines,
            np.array([item.time for item in logged]),
            np.array([item.score for item in logged]),
        )
        state.line, state.last_time = int(lines[-1]), logged[-1].time
        if place is not None:  # before any save: the state covers exactly these lines
            state.file, state.offset = place
        for result in results:
            self.metrics.set("ragbound_monitor_last_p_value", result.p_value)
            self.metrics.inc("ragbound_monitor_windows_total")
            self.metrics.inc("ragbound_monitor_alarms_total", float(result.alarm))
        self.recent = (self.recent + results)[-RECENT_WINDOWS:]
        if results and self.state_path:
            self._save(state)

    def _save(self, state: MonitorState) -> None:
        if self.state_path is None:
            return
        self._saved_at = time.monotonic()  # a failed save is tried again as a due one
        try:
            save_state(self.state_path, state)
        except OSError as exc:  # a full disk, say: the log holds what the state would
            if not self._unsaved:
                sys.stderr.write(
                    f"warning: the shift monitor's state {self.state_path} was not saved "
                    f"({exc.strerror or exc}); a restart replays the log since the last save\n"
                )
            self._unsaved = True
            return
        self._unsaved = False

    def close(self) -> None:
        """Save the state and release its lock."""
        with self._lock, self._held:
            self._save(self.state)
