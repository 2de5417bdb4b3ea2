"""Reading ragbound's OpenTelemetry spans back in the tests: the SDK's in-memory exporter on
a provider passed to ``tracing.enable`` (never the process's global provider, which can be
set only once)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragbound.tracing as tracing

STEPS = ["ragbound.embed", "ragbound.search", "ragbound.statistic", "ragbound.tripwires"]


@contextlib.contextmanager
def recording() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into an in-memory exporter, until the block ends."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    try:
        yield exporter
    finally:
        tracing.disable()
        provider.shutdown()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def children(exporter: InMemorySpanExporter, parent: ReadableSpan) -> list[ReadableSpan]:
    """``parent``'s children, in the order they started."""
    found = [
        s
        for s in exporter.get_finished_spans()
        if s.parent is not None and s.parent.span_id == parent.context.span_id
    ]
    return sorted(found, key=lambda s: s.start_time or 0)


def no_query_text(exporter: InMemorySpanExporter, query: str) -> bool:
    values = []
    for span in exporter.get_finished_spans():
        values += list(span.attributes.values())
        values += [v for event in span.events for v in event.attributes.values()]
    return all(query not in str(value) for value in values)
