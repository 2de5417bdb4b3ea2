"""``ragbound serve --workers N``: N processes behind one port on one host.

The supervisor binds the port, takes the query log's writer lock and cuts its torn tail, then
forks the workers before loading anything (a fork after a model's threads started is not
safe). Each worker warms its model before accepting, then serves on the inherited sockets and
appends to the one log under a file lock. The supervisor alone reads the log for the shift
monitor, publishes its state (:mod:`ragbound.serve.shared`), restarts a worker that dies and
stops them all on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from ragbound.detect.guard import Guard
from ragbound.errors import ArtifactError, InputError, RagboundError
from ragbound.gate import Gate
from ragbound.locking import writer_lock
from ragbound.serve.drift import ServiceMonitor
from ragbound.serve.metrics import Registry, declare_monitor
from ragbound.serve.querylog import QueryLog
from ragbound.serve.service import WARM_UP_QUERY
from ragbound.serve.settings import ServeSettings, WorkerRole
from ragbound.serve.shared import MONITOR, PUBLISH_EVERY_S, publish

STOP_GRACE_S = 10.0
QUICK_DEATH_S = 5.0  # a worker that dies this soon after its start counts as failing to start
MAX_QUICK_DEATHS = 5  # in a row: the service stops instead of forking forever

Loader = Callable[[], Gate]


def serve_workers(
    load: Loader,
    load_monitored: Callable[[], Guard],
    settings: ServeSettings,
    sockets: list[socket.socket],
) -> None:
    """Run ``settings.workers`` workers on ``sockets`` until SIGTERM or Ctrl-C.

    ``load``: what each worker calls to open its gate; ``load_monitored``: the supervisor's
    guard for the shift monitor (opened without embedding anything)."""
    shared = Path(tempfile.mkdtemp(prefix="ragbound-serve-"))
    with contextlib.ExitStack() as held:
        held.callback(shutil.rmtree, shared, ignore_errors=True)
        log = None
        if settings.log is not None:
            held.enter_context(writer_lock(settings.log, what="query log", timeout=0))
            log = QueryLog(settings.log, settings.log_queries)  # cuts a torn tail
            held.callback(log.close)
        supervisor = Supervisor(load, settings, sockets, shared)
        supervisor.start()
        try:
            watch = LogWatch.start(load_monitored, settings, log, shared)
        except BaseException:
            supervisor.stop()
            raise
        if watch is not None:  # closed after the workers stopped: their last lines count
            held.callback(watch.close)
        held.callback(supervisor.stop)
        supervisor.run(watch)


class Supervisor:
    """Forks the workers, starts again one that dies, stops them all."""

    def __init__(
        self, load: Loader, settings: ServeSettings, sockets: list[socket.socket], shared: Path
    ):
        self.load = load
        self.settings = settings
        self.sockets = sockets
        self.shared = shared
        self.children: dict[int, int] = {}  # pid -> worker index
        self.born: dict[int, float] = {}  # worker index -> monotonic start
        self.quick_deaths = 0
        self.stopping = False

    def start(self) -> None:
        for index in range(self.settings.workers):
            self._fork(index)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._ask_to_stop)

    def _ask_to_stop(self, signum: int, frame: object) -> None:
        self.stopping = True

    def run(self, watch: LogWatch | None) -> None:
        """Until asked to stop: reap and restart workers, feed the monitor."""
        while not self.stopping:
            self._reap()
            if watch is not None:
                watch.catch_up()
            time.sleep(0.1 if watch is None else PUBLISH_EVERY_S / 2)

    def _fork(self, index: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the supervisor's code
            os._exit(self._work(index))
        self.children[pid] = index
        self.born[index] = time.monotonic()

    def _work(self, index: int) -> int:
        from ragbound.serve.app import create_app
        from ragbound.serve.listen import serve_on

        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            # loaded before accepting: a worker started again takes no request it would 503
            gate = self.load()
            gate.decide(WARM_UP_QUERY)
            role = WorkerRole(name=str(index), shared=self.shared)
            settings = dataclasses.replace(self.settings, worker=role)
            app = create_app(gate, settings)
            serve_on(app, self.sockets, settings.host, settings.port, settings.connections)
            return 0
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 1
        except RagboundError as exc:
            sys.stderr.write(f"error: worker {index}: {exc}\n")
            return 1
        except BaseException:
            traceback.print_exc()
            return 1

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            index = self.children.pop(pid)
            if self.stopping:
                continue
            self._count_death(index, status)
            sys.stderr.write(f"warning: worker {index} {_ended(status)}; starting it again\n")
            self._fork(index)

    def _count_death(self, index: int, status: int) -> None:
        quick = time.monotonic() - self.born[index] < QUICK_DEATH_S
        self.quick_deaths = self.quick_deaths + 1 if quick else 0
        if self.quick_deaths >= MAX_QUICK_DEATHS:
            self.stopping = True
            raise InputError(
                f"worker {index} {_ended(status)} {self.quick_deaths} times in a row within "
                f"{QUICK_DEATH_S:g} s of starting: the service stops (see the errors above)"
            )

    def stop(self) -> None:
        """SIGTERM every worker, wait for them, SIGKILL what is left after the grace."""
        self.stopping = True
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while self.children and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.05)
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            self.children.pop(pid, None)


class LogWatch:
    """The shift monitor of a service with workers: reads the lines they appended to the
    shared log since the last look, and publishes its metrics and windows."""

    def __init__(self, monitor: ServiceMonitor, registry: Registry, log: Path, shared: Path):
        self.monitor = monitor
        self.registry = registry
        self.log = log
        self.shared = shared

    @classmethod
    def start(
        cls,
        load_monitored: Callable[[], Guard],
        settings: ServeSettings,
        log: QueryLog | None,
        shared: Path,
    ) -> LogWatch | None:
        """The watch, or None (with a warning) when there is no log or no monitor can run."""
        if log is None:
            sys.stderr.write("warning: no shift monitor: with --workers it reads the --log\n")
            return None
        registry = declare_monitor(Registry())
        try:
            guard = load_monitored()
            state = settings.state_path()
            monitor = ServiceMonitor(guard, settings.monitor_window, registry, log, state)
        except (InputError, ArtifactError) as exc:
            sys.stderr.write(f"warning: no shift monitor: {exc}\n")
            return None
        watch = cls(monitor, registry, log.path, shared)
        watch.publish()
        return watch

    def catch_up(self) -> None:
        """Feed the monitor the whole lines appended since its last look."""
        if self.monitor.catch_up():
            self.publish()

    def publish(self) -> None:
        windows = [w.model_dump(mode="json") for w in self.monitor.recent]
        publish(self.shared, MONITOR, {"metrics": self.registry.snapshot(), "windows": windows})

    def close(self) -> None:
        with contextlib.suppress(InputError, OSError):
            self.catch_up()
        self.monitor.close()


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by signal {os.WTERMSIG(status)}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"
