"""The service's gate, swapped whole when its stored tripwires change (:class:`LiveGate`)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from ragbound.errors import ArtifactError, InputError
from ragbound.gate import Gate
from ragbound.tripwires import LiveTripwires, TripwireChange, TripwireTest, TripwireWatch

SLOW_READ_FACTOR = 10  # a slow read of the tripwire backing waits this many times its length
UNREAD = object()  # no version of the tripwire backing was read


class LiveGate:
    """The gate decisions use, rebuilt around the stored tripwires when they change: the
    folder's ``tripwires.json`` (one ``stat`` per batch) or the tripwire backing's version
    (read off the decision thread by :meth:`watch`). One rebuild runs at a time and decisions
    never wait for it: the new gate is swapped in whole. ``stopping``: set when the service
    closes (the watch ends, and its warnings stop).
    """

    def __init__(self, gate: Gate | None, stopping: threading.Event):
        self.gate = gate
        self._stopping = stopping
        self._watch: TripwireWatch | None = None
        self._stamp: tuple[int, int] | None = None  # the folder's tripwires.json
        self._version: Hashable = UNREAD  # the backing's, as last read
        self._rebuilding = threading.Lock()

    def loaded(self) -> Gate:
        """The gate (RuntimeError before one is loaded)."""
        if self.gate is None:
            raise RuntimeError("the gate is not loaded")
        return self.gate

    def start(self, gate: Gate) -> Gate:
        """Use ``gate`` and watch its tripwires from now on; kept in a backing, they are read
        again after the versions, so a change made while it loaded (by another worker or
        replica) is not missed."""
        self._watch = TripwireWatch(gate.guard.kb)
        if self._watch.backing is not None:
            gate = self._swap(gate)
        self.gate = gate
        return gate

    def current(self, version: Hashable = UNREAD) -> Gate:
        """The gate, rebuilt first when the stored tripwires changed under it: the folder's
        ``tripwires.json`` or ``version``, the backing's as :meth:`watch` read it. A rebuild
        that fails keeps the tripwires it has (a warning); one already running elsewhere
        swaps itself in."""
        gate = self.loaded()
        stamp = self._watch.local() if self._watch is not None else None
        moved = version is not UNREAD and version != self._version
        if (stamp != self._stamp or moved) and self._rebuilding.acquire(blocking=False):
            try:
                return self._swap(gate, version)
            except (InputError, ArtifactError) as exc:  # keep deciding with the set we have
                sys.stderr.write(f"warning: the changed tripwires were not loaded: {exc}\n")
                self._stamp = stamp
                self._version = version if moved else self._version
            finally:
                self._rebuilding.release()
        return gate

    def change(self, apply: Callable[[LiveTripwires], TripwireChange]) -> TripwireChange:
        """Apply a change to the stored set, then build a new gate around it and swap it in,
        on the caller's thread: decisions go on with the old set meanwhile, none sees a
        half-built guard. Changes run one at a time."""
        with self._rebuilding:
            gate = self.loaded()
            change = apply(LiveTripwires.open(gate.guard.kb))
            self._swap(gate)
        return change

    def watch(self, run_on_worker: Callable[[Callable[[], Any]], Any]) -> None:
        """Until stopping: read the backing's version every poll interval, and when it moved
        have ``run_on_worker`` (the decision thread, between batches) load the change."""
        assert self._watch is not None
        delay = self._watch.interval
        while not self._stopping.wait(delay):
            started = time.monotonic()
            version = self.read_version()
            # a collection so big that reading its tripwires is slow is not read back to back
            delay = max(self._watch.interval, SLOW_READ_FACTOR * (time.monotonic() - started))
            if version is UNREAD or version == self._version:
                continue
            with contextlib.suppress(RuntimeError):  # the decision thread is shutting down
                run_on_worker(lambda seen=version: self.current(seen))

    def read_version(self) -> Hashable:
        """The tripwire backing's version; UNREAD (and a warning) when it cannot be read."""
        try:
            return self._watch.version() if self._watch is not None else None
        except (InputError, ArtifactError) as exc:  # e.g. the collection's server is down
            if not self._stopping.is_set():
                sys.stderr.write(f"warning: the tripwires were not checked for changes: {exc}\n")
            return UNREAD

    def _swap(self, gate: Gate, version: Hashable = UNREAD) -> Gate:
        """A new gate with the committed tripwires (same rule), swapped in whole. The
        versions are taken before the set is read: a change meanwhile is loaded next time."""
        kb = gate.guard.kb
        stamp = self._watch.local() if self._watch is not None else None
        version = self.read_version() if version is UNREAD else version
        guard = TripwireTest.saved(kb, gate.tripwires.rule if gate.tripwires is not None else None)
        if guard is not None:
            guard.floor()  # a derived floor compares every pair of tripwires: not at a decision
        fresh = gate.with_tripwires(guard)
        self._stamp, self._version = stamp, version
        self.gate = fresh
        return fresh
