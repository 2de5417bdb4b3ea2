"""The state behind the routes: the gate (:class:`~ragbound.serve.live_gate.LiveGate`, swapped
whole on a tripwire change), the batcher, the query log
(:class:`~ragbound.serve.logwriter.LogWriter`), the shift monitor, the canaries and the
metrics. The routes in ``app`` stay thin."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence

from ragbound.conversations.model import Query
from ragbound.conversations.turns import Embedded
from ragbound.detect.canary import CanaryCheck
from ragbound.embedders import set_cpu_threads
from ragbound.embedders.sentence import limit_math_threads, release_freed_memory
from ragbound.errors import ArtifactError, IncompatibleArtifactError, InputError
from ragbound.faults import crash_point
from ragbound.gate import Decision, Gate, fired_topics
from ragbound.knowledge.query import QueryTexts
from ragbound.results import WindowResult
from ragbound.serve.batcher import Batcher
from ragbound.serve.dashboard import DashboardState, Stats, merged_stats, timeline
from ragbound.serve.drift import ServiceMonitor
from ragbound.serve.fit import FitWatch
from ragbound.serve.live_gate import LiveGate
from ragbound.serve.logwriter import LogWriter
from ragbound.serve.metrics import Registry, merged, service_registry
from ragbound.serve.settings import ServeSettings
from ragbound.serve.shared import MONITOR, PUBLISH_EVERY_S, publish, published

GateSource = Gate | Callable[[], Gate]
WARM_UP_QUERY = "warm-up query"
TRIM_EVERY = 2_000  # queries between returns of freed heap pages to the OS


class Service:
    """One knowledge base's gate behind HTTP. ``gate``: a loaded :class:`Gate`, or a function
    loading one (on a thread at start, so ``/healthz`` answers meanwhile). The query log is
    opened here (:class:`~ragbound.serve.logwriter.LogWriter`)."""

    def __init__(self, gate: GateSource, settings: ServeSettings):
        self.settings = settings
        self.metrics: Registry = service_registry()
        self.dashboard = DashboardState(settings.log_queries)
        self.fit = FitWatch(self.metrics)
        self._stopping = threading.Event()
        self.live = LiveGate(gate if isinstance(gate, Gate) else None, self._stopping)
        self._loader = None if isinstance(gate, Gate) else gate
        self.ready = False
        self.error: str | None = None
        self.monitor: ServiceMonitor | None = None
        self.canary: CanaryCheck | None = None
        self._since_trim = 0
        self.writer = LogWriter(settings, self.metrics)
        self.batcher = Batcher(self.decide_batch, settings.batching, prepare=self.embed_batch)

    @property
    def gate(self) -> Gate | None:
        """The gate decisions use now (None until loaded)."""
        return self.live.gate

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
            gate = self.live.start(gate)
            self.ready = True
            self.metrics.set("ragbound_ready", 1)
            self.metrics.set("ragbound_calibration_approximate", int(gate.guard.approximate))
            watch = self.live.watch
            self._start(lambda: watch(self.batcher.run_on_worker_now), "ragbound-tripwires")
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

    def start_loading(self) -> None:
        """:meth:`load` on a daemon thread; the event loop answers ``/healthz`` meanwhile."""
        self._start(self.load, "ragbound-load")

    def _start(self, target: Callable[[], None], name: str) -> None:
        threading.Thread(target=target, name=name, daemon=True).start()

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
                self.writer.log,
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
        self.writer.close()

    # ----------------------------------------------------------------- decisions
    def embed_batch(self, queries: list[Query]) -> Embedded:
        """Embed a batch of queries and conversations: the batcher's embedding thread runs
        this, beside the decision of the batch before (a tripwire change swaps the gate, never
        its knowledge base)."""
        gate = self.live.loaded()
        plain = all(isinstance(q, str) for q in queries)
        return gate.embed(QueryTexts(queries) if plain else queries)  # the route validated them

    def decide_batch(self, prepared: Embedded) -> list[Decision]:
        """Decide, log durably, feed the monitor and count: the batcher's decision thread
        runs this, on a batch :meth:`embed_batch` embedded."""
        gate = self.live.current()  # one reference per batch: a change swaps it whole
        decisions = gate.decide_embedded(prepared)
        queries = prepared.texts
        self.metrics.observe("ragbound_batch_queries", len(queries))
        logged = self.writer.write(decisions, self.ready)
        crash_point("serve.decide:logged")  # durable in the log, not answered yet
        if self.monitor is not None:
            log = self.writer.log
            self.monitor.feed(logged, log.place if log is not None else None)
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
