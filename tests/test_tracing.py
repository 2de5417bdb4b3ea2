"""OpenTelemetry spans of a real gate (the bees-and-trains MiniLM knowledge base with
tripwires, as the service tests serve it), read back with the SDK's in-memory exporter; the
gateway's spans are tested in ``tests/serve/test_gateway.py``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext

from ragbound import tracing
from ragbound.errors import InputError
from ragbound.gate import Gate
from ragbound.serve.batcher import Batcher
from ragbound.serve.settings import Batching
from tests.cli.runner import run
from tests.serve.server import free_port, guarded_kb
from tests.spans import STEPS, children, named, no_query_text, recording
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE
from tests.tripwires.tripwire_texts import UNSAFE

SRC = Path(__file__).resolve().parents[1] / "src"
QUERIES = {"answer": IN_KNOWLEDGE[0], "abstain": OUT_OF_KNOWLEDGE[0], "reject": UNSAFE[1]}


@pytest.fixture(scope="module")
def gate(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Gate:
    return Gate.load(guarded_kb(minilm_kb_dir, tmp_path_factory.mktemp("tracing") / "kb"))


@pytest.fixture
def spans():
    with recording() as exporter:
        yield exporter


# ----------------------------------------------------------------------------- gate
@pytest.mark.parametrize("action", list(QUERIES))
def test_a_decision_is_one_decide_span_over_its_four_steps(gate: Gate, spans, action) -> None:
    query = QUERIES[action]
    decision = gate.decide(query)
    assert decision.action == action
    (decide,) = named(spans, "ragbound.decide")
    assert decide.parent is None
    assert [s.name for s in children(spans, decide)] == STEPS
    attributes = decide.attributes
    assert attributes["ragbound.action"] == action
    assert attributes["ragbound.p_value"] == pytest.approx(decision.test.p_value)
    assert attributes["ragbound.cause"] == decision.cause
    assert attributes["ragbound.statistic"] == decision.test.statistic
    assert attributes["ragbound.k"] == decision.test.k
    assert attributes["ragbound.batch_size"] == 1
    if action == "reject":
        assert attributes["ragbound.tripwire.topics"] == tuple(decision.tripwires.topics())
    else:
        assert "ragbound.tripwire.topics" not in attributes
    (tripwires,) = named(spans, "ragbound.tripwires")
    assert tripwires.attributes["ragbound.forbidden"] == int(action == "reject")
    (statistic,) = named(spans, "ragbound.statistic")
    assert statistic.attributes["ragbound.statistic"] == decision.test.statistic
    assert no_query_text(spans, query)


def test_a_batch_is_one_span_with_a_decision_event_per_query(gate: Gate, spans) -> None:
    decisions = gate.decide_many(list(QUERIES.values()))
    (decide,) = named(spans, "ragbound.decide")
    assert decide.attributes["ragbound.batch_size"] == 3
    assert "ragbound.action" not in decide.attributes  # one action per query: in the events
    events = [e for e in decide.events if e.name == "ragbound.decision"]
    assert [e.attributes["ragbound.index"] for e in events] == [0, 1, 2]
    assert [e.attributes["ragbound.action"] for e in events] == list(QUERIES)
    for event, decision in zip(events, decisions, strict=True):
        assert event.attributes["ragbound.p_value"] == pytest.approx(decision.test.p_value)
    fired = tuple(decisions[2].tripwires.topics())
    assert fired and events[2].attributes["ragbound.tripwire.topics"] == fired
    assert all("ragbound.tripwire.topics" not in e.attributes for e in events[:2])
    assert len(named(spans, "ragbound.embed")) == 1  # the batch is embedded once


def test_embedded_then_decided_is_decide_many_in_two_spans(gate: Gate, spans) -> None:
    """A server embeds the next batch while this one is decided: the same decisions, the
    embedding a span of its own beside ``ragbound.decide``."""
    queries = list(QUERIES.values())
    decisions = gate.decide_embedded(gate.embed(queries))
    (embed,) = named(spans, "ragbound.embed")
    (decide,) = named(spans, "ragbound.decide")
    assert embed.parent is None and decide.parent is None
    assert [s.name for s in children(spans, decide)] == STEPS[1:]
    expected = gate.decide_many(queries)
    assert [d.model_dump() for d in decisions] == [d.model_dump() for d in expected]


def test_nothing_is_recorded_with_tracing_off(gate: Gate) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    tracing.disable()
    assert gate.decide(QUERIES["answer"]).action == "answer"
    assert exporter.get_finished_spans() == ()
    assert tracing.span("ragbound.decide", batch_size=1) is tracing.OFF
    assert tracing.joined([None]) is tracing.OFF and tracing.current_context() is None


def test_ragbound_decides_without_opentelemetry_installed(gate: Gate) -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"  # as if not installed
        "from ragbound.gate import Gate\n"
        "print(Gate.load(sys.argv[1]).decide(sys.argv[2]).action)"
    )
    argv = [sys.executable, "-c", code, str(gate.guard.kb.path), QUERIES["answer"]]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=child_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "answer"


def test_the_service_s_batch_is_its_request_s_child_or_linked_to_each_request(spans) -> None:
    """The batcher decides concurrent requests in one batch on its worker thread: a batch of
    one request is that request's child; one of several is nobody's child, linked to each
    request's span (and its own children are not)."""

    def process(queries: list[str]) -> list[str]:
        with tracing.span("ragbound.decide", batch_size=len(queries)), tracing.span("step"):
            return queries

    async def request(batcher: Batcher, name: str, query: str) -> SpanContext:
        with tracing.span(name) as span:
            await batcher.submit([query])
            return span.get_span_context()

    async def scenario() -> tuple[list[SpanContext], SpanContext]:
        batcher = Batcher(process, Batching(max_wait_ms=0, max_queries=8))
        await batcher.start()
        try:
            together = await asyncio.gather(
                request(batcher, "r1", "a"), request(batcher, "r2", "b")
            )
            return list(together), await request(batcher, "r3", "c")
        finally:
            await batcher.stop()

    together, alone = asyncio.run(scenario())
    batched, single = named(spans, "ragbound.decide")
    assert batched.attributes["ragbound.batch_size"] == 2 and batched.parent is None
    assert {link.context.span_id for link in batched.links} == {c.span_id for c in together}
    assert single.attributes["ragbound.batch_size"] == 1 and not single.links
    assert single.parent.span_id == alone.span_id
    for step in named(spans, "step"):
        assert not step.links and step.parent.span_id in (
            batched.context.span_id,
            single.context.span_id,
        )


# ------------------------------------------------------------------------------ CLI
def test_tracing_without_the_extra_is_one_error_line(monkeypatch, capsys, gate: Gate) -> None:
    # the serve extra's FastAPI brings opentelemetry-api: the SDK is what may be missing
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.resources", None)  # not installed
    args = ["serve", str(gate.guard.kb.path), "--port", str(free_port()), "--tracing"]
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: tracing needs the tracing extra (opentelemetry-sdk is not")
    assert "pip install 'ragbound[tracing]'" in err and not tracing.enabled()
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # nor the API, in Python
    with pytest.raises(InputError, match=r"extra \(opentelemetry-api is not installed"):
        tracing.enable()


def test_an_unknown_exporter_is_one_error_line(monkeypatch, capsys, gate: Gate) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    args = ["serve", str(gate.guard.kb.path), "--port", str(free_port()), "--tracing"]
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 2 and err.count("\n") == 1, err
    assert "OTEL_TRACES_EXPORTER='zipkin'" in err and "otlp, console" in err
    assert not tracing.enabled()


def child_env() -> dict[str, str]:
    return os.environ | {
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    }
