"""OpenTelemetry spans of the decisions (the optional ``tracing`` extra).

Off until :func:`enable` is called (``ragbound serve --tracing`` calls it); while off, or with
OpenTelemetry not installed, ``span(...)`` is one check of a module attribute and returns a
shared do-nothing context manager. The spans and their attributes are listed in
docs/service.md ("Tracing"); a query's text is never recorded (spans leave the process).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any

from ragbound.errors import InputError

TRACER_NAME = "ragbound"
PREFIX = "ragbound."
EXPORTERS = ("otlp", "console")

_tracer: Any = None  # an opentelemetry Tracer while enabled, else None: the one check
_links: ContextVar[tuple[Any, ...]] = ContextVar("ragbound_span_links", default=())


class _Off:
    """What :func:`span` gives while tracing is off: a context manager and a span that do
    nothing (the methods of OpenTelemetry's ``Span`` that ragbound calls)."""

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def is_recording(self) -> bool:
        return False

    def set_attributes(self, attributes: dict[str, Any]) -> None:
        return None

    def add_event(self, name: str, attributes: dict[str, Any] | None = None) -> None:
        return None


OFF = _Off()


def enabled() -> bool:
    return _tracer is not None


def span(name: str, **attributes: Any):
    """A context manager recording span ``name`` (as the current span's child) with these
    attributes, each named ``ragbound.<keyword>`` (None values left out); it gives the span
    (``set_attributes``, ``add_event``, ``is_recording``). While tracing is off: :data:`OFF`.
    """
    tracer = _tracer
    if tracer is None:
        return OFF
    return _recording(tracer, name, attributes)


@contextlib.contextmanager
def _recording(tracer: Any, name: str, attributes: dict[str, Any]) -> Iterator[Any]:
    links = _links.get()
    token = _links.set(()) if links else None  # the links are this span's, not its children's
    try:
        with tracer.start_as_current_span(name, attributes=named(attributes), links=links) as s:
            yield s
    finally:
        if token is not None:
            _links.reset(token)


def named(attributes: dict[str, Any]) -> dict[str, Any]:
    """``attributes`` named ``ragbound.<key>``, None values left out (OpenTelemetry refuses
    them)."""
    return {PREFIX + key: value for key, value in attributes.items() if value is not None}


def current_context() -> Any:
    """The caller's trace context, to hand to another thread (None while tracing is off)."""
    if _tracer is None:
        return None
    from opentelemetry import context

    return context.get_current()


def joined(contexts: Sequence[Any]):
    """A context manager running work done for several callers (whose
    :func:`current_context` these are) under their trace: one caller's context is attached,
    so the work's spans are its children; with several, the work's first span is linked to
    each caller's span instead. While tracing is off: :data:`OFF`."""
    if _tracer is None:
        return OFF
    return _joined([c for c in contexts if c is not None])


@contextlib.contextmanager
def _joined(contexts: list[Any]) -> Iterator[None]:
    from opentelemetry import context, trace

    if len(contexts) == 1:
        token = context.attach(contexts[0])
        try:
            yield
        finally:
            context.detach(token)
        return
    spans = (trace.get_current_span(c).get_span_context() for c in contexts)
    token = _links.set(tuple(trace.Link(s) for s in spans if s.is_valid))
    try:
        yield
    finally:
        _links.reset(token)


# ------------------------------------------------------------------- turning it on
def enable(provider: Any = None) -> None:
    """Record spans from now on, with ``provider`` (an OpenTelemetry ``TracerProvider``).

    None: the global provider when one was set (e.g. by ``opentelemetry-instrument``), else a
    new one, made the global, exporting in batches to the exporter ``OTEL_TRACES_EXPORTER``
    names: ``otlp`` (the default; needs ``opentelemetry-exporter-otlp``, configured by the
    standard ``OTEL_EXPORTER_OTLP_*`` variables) or ``console`` (stderr). Its resource is
    read from ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (service name
    ``ragbound`` by default). InputError when OpenTelemetry is not installed.
    """
    global _tracer
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise _missing(exc) from None
    if provider is None:
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider):  # none set yet
            provider = _exporting_provider()
            trace.set_tracer_provider(provider)
    _tracer = provider.get_tracer(TRACER_NAME)


def disable() -> None:
    """Record nothing from now on (spans already started still end)."""
    global _tracer
    _tracer = None


def _exporting_provider() -> Any:
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise _missing(exc) from None
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = Resource.create({"service.name": TRACER_NAME})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(_exporter()))
    return provider


def _exporter() -> Any:
    """The span exporter ``OTEL_TRACES_EXPORTER`` names (default ``otlp``)."""
    name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stderr)
    if name != "otlp":
        raise InputError(
            f"OTEL_TRACES_EXPORTER={name!r}: ragbound exports spans with one of "
            f"{', '.join(EXPORTERS)}"
        )
    with contextlib.suppress(ImportError):
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise InputError(
            "tracing exports spans over OTLP, and no OTLP exporter is installed: pip install "
            "opentelemetry-exporter-otlp (or set OTEL_TRACES_EXPORTER=console)"
        ) from None
    return OTLPSpanExporter()


def _missing(exc: ImportError) -> InputError:
    sdk = (exc.name or "").startswith("opentelemetry.sdk")
    return InputError(
        f"tracing needs the tracing extra (opentelemetry-{'sdk' if sdk else 'api'} is not "
        "installed): pip install 'ragbound[tracing]'"
    )
