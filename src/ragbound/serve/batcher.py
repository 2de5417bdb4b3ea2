"""Coalesce concurrent requests into batches, embedded on one thread and decided on another.

The loop takes every pending request at once, and waits up to ``max_wait_ms`` for more only
when the batch before held several requests and none is being decided, so a lone client never
pays the wait; a batch holds at most ``max_queries`` queries (a request is never split). One
batch is embedded (the embedder releases the GIL) while the one before it is decided: at most
two are in the pipeline. A batch that fails is retried request by request, so one bad request
cannot fail the others, unless the failure is the whole batch's (:class:`BatchFailure`, such
as a query log that cannot be written).

A request past its ``timeout`` fails with TimeoutError (503). One already past it when its
batch is formed is not decided, so the log holds only answered decisions; one that times out
while being embedded or decided (threads cannot be interrupted) is still decided and logged.
Each request's trace context goes with it to both threads (:func:`ragbound.tracing.joined`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import ragbound.tracing as tracing
from ragbound.conversations.model import Query
from ragbound.gate import Decision
from ragbound.serve.settings import Batching


class BatchFailure(Exception):
    """A failure of a whole batch, not of a request in it: the batcher fails every request
    of the batch with it, without trying them one by one."""


@dataclass
class _Pending:
    queries: list[Query]
    future: asyncio.Future[list[Decision]] = field(repr=False)
    deadline: float | None = None  # event-loop time; None: no timeout
    trace: object = None  # the caller's trace context (None: tracing is off)

    def wanted(self, now: float) -> bool:
        """Still to be decided: not answered yet (a timeout cancels it) and not past its
        deadline, which fails it (the loop may not have run the timeout's callback yet)."""
        if self.deadline is not None and now >= self.deadline:
            _fail(self, TimeoutError())
        return not self.future.done()


class Batcher:
    """``await submit(queries)`` -> their decisions: ``process(prepare(queries))`` for a batch.

    A query is a string or a :class:`~ragbound.conversations.model.Conversation`; a batch may mix
    them, in the order they were submitted. ``prepare`` (default: the queries as they are)
    runs on the embedding thread, ``process`` on the decision thread."""

    def __init__(
        self,
        process: Callable[[Any], list[Decision]],
        batching: Batching,
        prepare: Callable[[list[Query]], Any] = list,
    ):
        self.process = process
        self.prepare = prepare
        self.batching = batching
        self._queue: deque[_Pending] = deque()
        self._arrived: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._embedder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragbound-embed")
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragbound-decide")
        self._last_requests = 1

    async def start(self) -> None:
        self._arrived = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="ragbound-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        # the embedding thread hands batches to the decision thread: it is stopped first
        self._embedder.shutdown(wait=True)
        self._worker.shutdown(wait=True)
        await asyncio.gather(*self._in_flight, return_exceptions=True)

    async def submit(self, queries: list[Query], timeout: float | None = None) -> list[Decision]:
        """Queue ``queries`` (already validated) and wait for their decisions; TimeoutError
        after ``timeout`` seconds (None: no limit), and then they are decided only when their
        batch was already being embedded or decided."""
        if self._arrived is None:
            raise RuntimeError("the batcher is not started")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        pending = _Pending(queries, loop.create_future(), deadline, tracing.current_context())
        self._queue.append(pending)
        self._arrived.set()
        # the timer starts after the deadline is taken: it never fires before the deadline
        return await asyncio.wait_for(pending.future, timeout)

    def run_on_worker_now(self, work: Callable[[], object]) -> Future[object]:
        """Queue ``work`` on the decision thread from any thread (between batches)."""
        return self._worker.submit(work)

    async def _run(self) -> None:
        deciding: asyncio.Task[None] | None = None  # the batch before this one
        while True:
            batch = await self._collect()
            self._last_requests = len(batch)
            now = asyncio.get_running_loop().time()
            live = [p for p in batch if p.wanted(now)]  # timed-out requests are not decided
            if not live:
                continue
            task = asyncio.create_task(self._answer(live, await self._embed(live)))
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
            if deciding is not None:  # at most two batches in the pipeline
                await asyncio.wait([deciding])
            deciding = task

    async def _wait_for_arrival(self, timeout: float | None) -> bool:
        assert self._arrived is not None
        self._arrived.clear()
        if self._queue:
            return True
        try:
            await asyncio.wait_for(self._arrived.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def _collect(self) -> list[_Pending]:
        while not self._queue:
            await self._wait_for_arrival(None)
        batch = [self._queue.popleft()]
        size = len(batch[0].queries)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.batching.max_wait_ms / 1000
        while size < self.batching.max_queries:
            if not self._queue:
                remaining = deadline - loop.time()
                # a batch being decided: its clients' next requests come with its answers,
                # and an embedder that waited for them would sit idle meanwhile
                if self._last_requests <= 1 or remaining <= 0 or self._in_flight:
                    break
                if not await self._wait_for_arrival(remaining):
                    break
                continue
            if size + len(self._queue[0].queries) > self.batching.max_queries:
                break  # never split a request
            batch.append(self._queue.popleft())
            size += len(batch[-1].queries)
        return batch

    async def _embed(self, live: list[_Pending]) -> Future[list[Decision]] | Exception:
        """Embed the batch; its decision, queued on the decision thread, or what failed."""
        queries = [q for p in live for q in p.queries]
        contexts = [p.trace for p in live]
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._embedder, self._stages, contexts, queries)
        except Exception as exc:
            return exc

    def _stages(self, contexts: list[object], queries: list[Query]) -> Future[list[Decision]]:
        """On the embedding thread: prepare, then queue the decision (so in batch order)."""
        with tracing.joined(contexts):
            prepared = self.prepare(queries)
        return self._worker.submit(self._process, contexts, prepared)

    def _process(self, contexts: list[object], prepared: Any) -> list[Decision]:
        with tracing.joined(contexts):
            return self.process(prepared)

    async def _answer(
        self, live: list[_Pending], decided: Future[list[Decision]] | Exception
    ) -> None:
        try:
            if isinstance(decided, Exception):
                raise decided
            decisions = await asyncio.wrap_future(decided)
        except Exception as exc:
            if len(live) == 1 or isinstance(exc, BatchFailure):
                for pending in live:
                    _fail(pending, exc)
                return
            for pending in live:  # isolate the request that failed
                await self._answer([pending], await self._embed([pending]))
            return
        start = 0
        for pending in live:
            end = start + len(pending.queries)
            if not pending.future.done():
                pending.future.set_result(decisions[start:end])
            start = end


def _fail(pending: _Pending, exc: Exception) -> None:
    if not pending.future.done():
        pending.future.set_exception(exc)
