"""The state behind the routes: the gate (swapped whole on a tripwire change), the batcher,
the query log, the shift monitor and the metrics. The routes in ``app`` stay thin."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Hashable, Sequence

from ragbound.conversations.model import Query
from ragbound.conversations.turns import Embedded
from ragbound.detect.canary import CanaryCheck
from ragbound.embedders import set_cpu_threads
from ragbound.embedders.sentence import limit_math_threads, release_freed_memory
from ragbound.errors import ArtifactError, IncompatibleArtifactError, InputError
from ragbound.faults import crash_point
from ragbound.gate import Decision, Gate, fired_topics
from ragbound.knowledge.query import QueryTexts
from ragbound.locking import writer_lock
from ragbound.results import WindowResult
from ragbound.serve.batcher import Batcher
from ragbound.serve.dashboard import DashboardState, Stats, merged_stats, timeline
from ragbound.serve.drift import ServiceMonitor
from ragbound.serve.fit import FitWatch
from ragbound.serve.metrics import Registry, merged, service_registry
from ragbound.serve.querylog import LoggedLine, QueryLog, QueryLogError
from ragbound.serve.settings import ServeSettings
from ragbound.serve.shared import MONITOR, PUBLISH_EVERY_S, publish, published
from ragbound.tripwires import (
    LiveTripwires,
    TripwireChange,
    TripwireTest,
    TripwireWatch,
)

GateSource = Gate | Callable[[], Gate]
WARM_UP_QUERY = "warm-up query"
TRIM_EVERY = 2_000  # queries between returns of freed heap pages to the OS
SLOW_READ_FACTOR = 10  # a slow read of the tripwire backing waits this many times its length
PROBE_EVERY_S = 1.0  # after a failed log write, /readyz probes the disk at most this often
UNREAD = object()  # no version of the tripwire backing was read


class Service:
    """One knowledge base's gate behind HTTP.

    ``gate``: a loaded :class:`Gate`, or a function that loads one (called on a thread at
    start, so ``/healthz`` answers while the model loads). The query log is opened, and its
    single-writer lock taken, here: two services never append to one log, and a file the
    service did not write is refused (InputError).
    """

    def __init__(self, gate: GateSource, settings: ServeSettings):
        self.settings = settings
        self.metrics: Registry = service_registry()
        self.dashboard = DashboardState(settings.log_queries)
        self.fit = FitWatch(self.metrics)
        self.gate: Gate | None = gate if isinstance(gate, Gate) else None
        self._loader = None if isinstance(gate, Gate) else gate
        self.ready = False
        self.error: str | None = None
        # why the query log's last write failed (None: it did not), as callers may read it
        self.log_error: str | None = None
        self._probed_at = -PROBE_EVERY_S
        self.monitor: ServiceMonitor | None = None
        self.canary: CanaryCheck | None = None
        self._stopping = threading.Event()
        self._lines = 0  # decisions so far when there is no log
        self._since_trim = 0
        self._watch: TripwireWatch | None = None
        self._tripwire_stamp: tuple[int, int] | None = None  # the folder's tripwires.json
        self._tripwire_version: Hashable = UNREAD  # the backing's, as last read
        self._rebuilding = threading.Lock()  # one gate rebuild at a time; decisions never wait
        self._held = contextlib.ExitStack()
        self.log: QueryLog | None = None
        if settings.log is not None and settings.worker is not None:
            # the supervisor holds the log's writer lock and cut its torn tail before forking
            self.log = QueryLog(
                settings.log, settings.log_queries, shared=True, rotation=settings.rotation
            )
        elif settings.log is not None:
            with contextlib.ExitStack() as held:  # the lock is released if the log is refused
                held.enter_context(writer_lock(settings.log, what="query log", timeout=0))
                self.log = QueryLog(settings.log, settings.log_queries, rotation=settings.rotation)
                self._held = held.pop_all()
        self.batcher = Batcher(self.decide_batch, settings.batching, prepare=self.embed_batch)

    # ----------------------------------------------------------------- lifecycle
    def load(self) -> None:
        """Load the gate if needed, load the model by deciding one query, start the monitor;
        any failure is kept in ``error`` for ``/readyz``."""
        try:
            if self.settings.threads is not None:
                set_cpu_threads(self.settings.threads)
            gate = self.gate if self.gate is not None else self._loader()  # type: ignore[misc]
            self._use_alpha(gate)
            if gate.tripwires is not None:
                # the calibrated floor's reference questions searched before ready, embedded
                # here where the calibration kept no vectors (text search, older folders)
                gate.tripwires.floor()
            limit_math_threads()  # the libraries the gate loaded
            gate.decide(WARM_UP_QUERY)  # not logged: loads the model before the first request
            check = self.check_canaries(gate)
            if not check.ok and not self.settings.force:
                raise IncompatibleArtifactError(check.message())
            if not check.ok:
                sys.stderr.write(f"warning: serving anyway (--force): {check.message()}\n")
            # with workers, the supervisor monitors the shared log: each decision counted once
            self.monitor = None if self.settings.worker else self._start_monitor(gate)
            self._watch = TripwireWatch(gate.guard.kb)
            if self._watch.backing is not None:
                # read again, after the versions: a change made since the gate was loaded (by
                # another worker or replica, while this one warmed up) is not missed
                gate = self._swap(gate)
            self.gate = gate
            self.ready = True
            self.metrics.set("ragbound_ready", 1)
            self.metrics.set("ragbound_calibration_approximate", int(gate.guard.approximate))
            self._start(self._watch_tripwires, "ragbound-tripwires")
            if self.settings.canary_minutes > 0:
                self._start(self._watch_canaries, "ragbound-canary")
            if self.settings.worker is not None:
                self._start(self._publish_now_and_then, "ragbound-publish")
        except Exception as exc:  # reported by /readyz; the process stays up for /healthz
            self.error = f"{type(exc).__name__}: {exc}"
            sys.stderr.write(f"error: the service is not ready: {exc}\n")

    def _use_alpha(self, gate: Gate) -> None:
        """Decide at the settings' alpha (None: the calibration's); a warning on stderr,
        from one process, when the calibration is too small for the level to mean what it
        says (:mod:`ragbound.detect.resolution`)."""
        gate.guard.use_alpha(self.settings.alpha)
        if self.settings.worker is not None and self.settings.worker.name != "0":
            return
        message = gate.guard.calibration_resolution().message()
        if message is not None:
            sys.stderr.write(f"warning: {message}\n")

    def _start(self, target: Callable[[], None], name: str) -> None:
        threading.Thread(target=target, name=name, daemon=True).start()

    def _watch_tripwires(self) -> None:
        """Load tripwires changed elsewhere (a worker, ``ragbound tripwire``, a replica on
        another host writing to the shared collection) even without traffic, within the
        backing's poll interval (:class:`TripwireWatch`): read here, loaded on the decision
        thread between batches, only when the version moved."""
        assert self._watch is not None
        delay = self._watch.interval
        while not self._stopping.wait(delay):
            started = time.monotonic()
            version = self._read_version()
            # a collection so big that reading its tripwires is slow is not read back to back
            delay = max(self._watch.interval, SLOW_READ_FACTOR * (time.monotonic() - started))
            if version is UNREAD or version == self._tripwire_version:
                continue
            with contextlib.suppress(RuntimeError):  # the decision thread is shutting down
                self.batcher.run_on_worker_now(lambda seen=version: self._current_gate(seen))

    def _read_version(self) -> Hashable:
        """The tripwire backing's version; UNREAD (and a warning) when it cannot be read."""
        try:
            return self._watch.version() if self._watch is not None else None
        except (InputError, ArtifactError) as exc:  # e.g. the collection's server is down
            if not self._stopping.is_set():
                sys.stderr.write(f"warning: the tripwires were not checked for changes: {exc}\n")
            return UNREAD

    # ----------------------------------------------------------------- workers
    def _publish_now_and_then(self) -> None:
        while not self._stopping.wait(PUBLISH_EVERY_S):
            self.publish()

    def publish(self) -> None:
        """Show this worker's metrics and dashboard data to the others."""
        role = self.settings.worker
        if role is not None:
            payload = {"metrics": self.metrics.snapshot(), "stats": self._own_stats().model_dump()}
            publish(role.shared, role.name, payload)

    def metrics_text(self) -> str:
        """``/metrics``: this process's, or with workers the whole service's."""
        role = self.settings.worker
        if role is None:
            return self.metrics.render()
        self.publish()
        found = published(role.shared)
        return merged({name: item["metrics"] for name, item in found.items()}).render()

    # ----------------------------------------------------------------- canaries
    def check_canaries(self, gate: Gate) -> CanaryCheck:
        """Search the calibration's canaries again (five queries) and export the move."""
        check = gate.guard.check_canaries()
        self.canary = check
        self.metrics.set("ragbound_canary_largest_move", check.largest_move)
        return check

    def _watch_canaries(self) -> None:
        """Every ``canary_minutes``, until closed: :meth:`recheck_canaries`."""
        while not self._stopping.wait(self.settings.canary_minutes * 60):
            self.recheck_canaries()

    def recheck_canaries(self) -> None:
        """Search the canaries on the decision thread (between batches, never beside one);
        a move past the tolerance makes the service not ready, and ready again once back."""
        gate = self.gate
        if gate is None:
            return
        try:
            check = self.batcher.run_on_worker_now(lambda: self.check_canaries(gate)).result()
        except Exception as exc:  # e.g. the endpoint is down: requests report it themselves
            if not self._stopping.is_set():
                sys.stderr.write(f"warning: the canaries were not searched: {exc}\n")
            return
        if not isinstance(check, CanaryCheck) or check.ok == self.ready:
            return
        if self.settings.force:  # reported in /readyz and /metrics, never made not ready
            if not check.ok:
                sys.stderr.write(f"warning: serving anyway (--force): {check.message()}\n")
            return
        self.ready = check.ok
        self.error = None if check.ok else f"IncompatibleArtifactError: {check.message()}"
        self.metrics.set("ragbound_ready", int(check.ok))
        if not check.ok:
            sys.stderr.write(f"error: the service is not ready: {check.message()}\n")

    def _start_monitor(self, gate: Gate) -> ServiceMonitor | None:
        try:
            return ServiceMonitor(
                gate.guard,
                self.settings.monitor_window,
                self.metrics,
                self.log,
                self.settings.state_path(),
            )
        # e.g. a calibration too small for a shift test, or a `ragbound shift` run holding the
        # state: the service decides without a monitor rather than not at all
        except (InputError, ArtifactError) as exc:
            sys.stderr.write(f"warning: no shift monitor: {exc}\n")
            return None

    def close(self) -> None:
        self._stopping.set()
        if self.monitor is not None:
            self.monitor.close()
        if self.log is not None:
            self.log.close()
        self._held.close()

    # ----------------------------------------------------------------- decisions
    def embed_batch(self, queries: list[Query]) -> Embedded:
        """Embed a batch of queries and conversations: the batcher's embedding thread runs
        this, beside the decision of the batch before (a tripwire change swaps the gate, never
        its knowledge base)."""
        gate = self.gate
        if gate is None:
            raise RuntimeError("the gate is not loaded")
        plain = all(isinstance(q, str) for q in queries)
        return gate.embed(QueryTexts(queries) if plain else queries)  # the route validated them

    def decide_batch(self, prepared: Embedded) -> list[Decision]:
        """Decide, log durably, feed the monitor and count: the batcher's decision thread
        runs this, on a batch :meth:`embed_batch` embedded."""
        gate = self._current_gate()  # one reference per batch: a change swaps it whole
        decisions = gate.decide_embedded(prepared)
        queries = prepared.texts
        self.metrics.observe("ragbound_batch_queries", len(queries))
        logged = self._log(decisions)
        crash_point("serve.decide:logged")  # durable in the log, not answered yet
        if self.monitor is not None:
            self.monitor.feed(logged, self.log.place if self.log is not None else None)
        self._count(decisions)
        self.fit.record(decisions)
        self.dashboard.record(decisions)
        self._trim_now_and_then(len(queries))
        return decisions

    def _trim_now_and_then(self, decided: int) -> None:
        """Batches of varying size fragment glibc's heap, and a long-running service would
        grow by hundreds of MB without it; a trim every TRIM_EVERY queries keeps it flat."""
        self._since_trim += decided
        if self._since_trim >= TRIM_EVERY:
            self._since_trim = 0
            release_freed_memory()

    def stats(self) -> Stats:
        """The dashboard's data (``GET /v1/stats``): with workers, the whole service's."""
        role = self.settings.worker
        if role is None:
            return self._own_stats()
        self.publish()
        found = published(role.shared)
        parts = [Stats(**item["stats"]) for item in found.values() if "stats" in item]
        watched = found.get(MONITOR, {}).get("windows")
        monitor = None
        if watched is not None:
            windows = [WindowResult(**w) for w in watched]
            monitor = timeline(windows, self.settings.monitor_window)
        return merged_stats(parts, monitor)

    def _own_stats(self) -> Stats:
        monitor = self.monitor
        windows = list(monitor.recent) if monitor is not None else None
        gate = self.gate
        return self.dashboard.snapshot(
            self.ready,
            windows,
            self.settings.monitor_window,
            fit=self.fit.snapshot(),
            questions=None if gate is None else gate.guard.questions,
        )

    def _log(self, decisions: Sequence[Decision]) -> list[LoggedLine]:
        if self.log is not None:
            try:
                logged = self.log.append(decisions)
            except QueryLogError as exc:  # the batch fails: none of it is answered
                self._log_failed(exc)
                raise
            self._log_written()
            return logged
        now = time.time()
        first, self._lines = self._lines + 1, self._lines + len(decisions)
        return [LoggedLine(first + i, now, d.test.score) for i, d in enumerate(decisions)]

    def _log_failed(self, exc: QueryLogError) -> None:
        """Not ready until a write succeeds; said once on stderr (the first failure)."""
        if self.log_error is None:
            sys.stderr.write(f"error: {exc}: answering 503 until a write succeeds\n")
        self.log_error = f"cannot write the query log ({exc.reason})"
        self.metrics.set("ragbound_ready", 0)

    def _log_written(self) -> None:
        if self.log_error is not None:
            self.log_error = None
            self.metrics.set("ragbound_ready", int(self.ready))
            sys.stderr.write("warning: the query log is written again\n")

    def log_writable(self) -> bool:
        """Whether the query log takes writes (``/readyz``): after a failed write, whether a
        probe beside it succeeds (at most one every ``PROBE_EVERY_S`` seconds), so that a
        service no request reaches while it is not ready becomes ready again."""
        if self.log is None or self.log_error is None:
            return True
        now = time.monotonic()
        if now - self._probed_at < PROBE_EVERY_S:
            return False
        self._probed_at = now
        try:
            self.log.probe()
        except QueryLogError:
            return False
        self._log_written()
        return True

    def _count(self, decisions: Sequence[Decision]) -> None:
        for decision in decisions:
            self.metrics.inc("ragbound_decisions_total", action=decision.action)
            self.metrics.inc("ragbound_decisions_by_cause_total", cause=decision.cause)
            self.metrics.observe("ragbound_p_value", decision.test.p_value)
            if decision.answerability is not None:
                p_value = decision.answerability.p_value
                self.metrics.observe("ragbound_answerability_p_value", p_value)
            for topic in fired_topics(decision):
                self.metrics.inc("ragbound_tripwire_hits_total", topic=topic)

    # ----------------------------------------------------------------- tripwires
    def change_tripwires(self, apply: Callable[[LiveTripwires], TripwireChange]) -> TripwireChange:
        """Apply a change to the stored set, then build a new gate around it and swap it in.

        Runs on the caller's thread, off the decision path: decisions go on with the old set
        while the new tripwires are embedded and their guard built, batches decided after the
        swap use the new set, and none sees a half-built guard. Changes run one at a time.
        """
        with self._rebuilding:
            gate = self.gate
            if gate is None:
                raise RuntimeError("the gate is not loaded")
            change = apply(LiveTripwires.open(gate.guard.kb))
            self._swap(gate)
        return change

    def _current_gate(self, version: Hashable = UNREAD) -> Gate:
        """The gate, rebuilt first when the stored tripwires changed under it: the folder's
        ``tripwires.json`` (one ``stat`` per batch: ``ragbound tripwire add`` or another
        worker on this host) or ``version``, the backing's as the watcher read it (a replica on
        another host)."""
        gate = self.gate
        if gate is None:
            raise RuntimeError("the gate is not loaded")
        stamp = self._watch.local() if self._watch is not None else None
        moved = version is not UNREAD and version != self._tripwire_version
        if (stamp != self._tripwire_stamp or moved) and self._rebuilding.acquire(blocking=False):
            try:  # not acquired: a change is being built off this thread and swaps in itself
                return self._swap(gate, version)
            except (InputError, ArtifactError) as exc:  # keep deciding with the set we have
                sys.stderr.write(f"warning: the changed tripwires were not loaded: {exc}\n")
                self._tripwire_stamp = stamp
                self._tripwire_version = version if moved else self._tripwire_version
            finally:
                self._rebuilding.release()
        return gate

    def _swap(self, gate: Gate, version: Hashable = UNREAD) -> Gate:
        """A new gate with the committed tripwires (same rule), swapped in whole. The
        versions are taken before the set is read: a change meanwhile is loaded next time."""
        kb = gate.guard.kb
        stamp = self._watch.local() if self._watch is not None else None
        version = self._read_version() if version is UNREAD else version
        guard = TripwireTest.saved(kb, gate.tripwires.rule if gate.tripwires is not None else None)
        if guard is not None:
            guard.floor()  # a derived floor compares every pair of tripwires: not at a decision
        fresh = gate.with_tripwires(guard)
        self._tripwire_stamp, self._tripwire_version = stamp, version
        self.gate = fresh
        return fresh


def start_loading(service: Service) -> threading.Thread:
    """Load on a daemon thread; the event loop keeps answering ``/healthz`` meanwhile."""
    thread = threading.Thread(target=service.load, name="ragbound-load", daemon=True)
    thread.start()
    return thread
