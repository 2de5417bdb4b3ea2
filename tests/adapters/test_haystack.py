"""Haystack adapter: GateComponent in a real Pipeline with an in-memory BM25 retriever."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("haystack")

from haystack import Document, Pipeline
from haystack.components.builders import PromptBuilder
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

from ragbound.adapters.haystack import GateComponent
from ragbound.errors import InputError
from ragbound.gate import Decision, Gate
from tests.adapters.conftest import ABSTAINED, ANSWERED, REJECTED, RULE
from tests.texts import TOPICS

TEMPLATE = "Context:\n{% for d in documents %}{{ d.content }}\n{% endfor %}Question: {{ query }}"


@pytest.fixture(scope="module")
def gate(gated_kb_dir: Path) -> Gate:
    return Gate.load(gated_kb_dir, rule=RULE, context_k=2)


@pytest.fixture(scope="module")
def store() -> InMemoryDocumentStore:
    store = InMemoryDocumentStore()
    texts = [text for sentences in TOPICS.values() for text in sentences]
    store.write_documents([Document(content=text, meta={"n": i}) for i, text in enumerate(texts)])
    return store


def rag_pipeline(gate_component: GateComponent, store: InMemoryDocumentStore) -> Pipeline:
    """Retriever -> gate -> prompt builder; the builder needs the gate's `query` output."""
    pipe = Pipeline()
    pipe.add_component("retriever", InMemoryBM25Retriever(store, top_k=2))
    pipe.add_component("gate", gate_component)
    pipe.add_component("prompt", PromptBuilder(TEMPLATE, required_variables=["query"]))
    pipe.connect("retriever.documents", "gate.documents")
    pipe.connect("gate.documents", "prompt.documents")
    pipe.connect("gate.query", "prompt.query")
    return pipe


def run(pipe: Pipeline, query: str) -> dict:
    inputs = {"retriever": {"query": query}, "gate": {"query": query}}
    return pipe.run(inputs, include_outputs_from={"gate"})


def test_an_answered_query_flows_on_with_the_retrieved_documents(
    gate: Gate, store: InMemoryDocumentStore
) -> None:
    out = run(rag_pipeline(GateComponent(gate=gate), store), ANSWERED)
    decision = out["gate"]["decision"]
    assert isinstance(decision, Decision) and decision.action == "answer"
    plain = InMemoryBM25Retriever(store, top_k=2).run(ANSWERED)["documents"]
    documents = out["gate"]["documents"]
    assert [d.id for d in documents] == [d.id for d in plain]
    assert all(d.meta["ragbound"]["action"] == "answer" for d in documents)
    assert all("ragbound" not in d.meta for d in plain)  # the store's documents untouched
    prompt = out["prompt"]["prompt"]
    assert all(d.content in prompt for d in plain) and prompt.endswith(ANSWERED)
    assert "blocked" not in out["gate"]


@pytest.mark.parametrize(
    ("query", "action"), [(ABSTAINED, "abstain"), (REJECTED, "reject")], ids=["abstain", "reject"]
)
def test_a_blocked_query_stops_the_generation_branch(
    gate: Gate, store: InMemoryDocumentStore, query: str, action: str
) -> None:
    out = run(rag_pipeline(GateComponent(gate=gate), store), query)
    assert "prompt" not in out  # the prompt builder never ran
    assert out["gate"]["documents"] == [] and "query" not in out["gate"]
    assert out["gate"]["decision"].action == action
    assert out["gate"]["blocked"] is out["gate"]["decision"]


def test_alone_it_returns_the_gates_context_as_documents(gate: Gate) -> None:
    out = GateComponent(gate=gate).run(ANSWERED)
    context = out["decision"].neighbours
    assert [d.content for d in out["documents"]] == [c.text for c in context]
    assert [d.score for d in out["documents"]] == [c.similarity for c in context]
    assert out["query"] == ANSWERED


def test_built_from_kb_dir_it_serialises_with_the_pipeline(
    gated_kb_dir: Path, store: InMemoryDocumentStore
) -> None:
    pipe = rag_pipeline(GateComponent(gated_kb_dir, context_k=2), store)
    # Haystack deserialises only modules its caller trusts
    restored = Pipeline.loads(pipe.dumps(), allowed_modules=["ragbound.adapters.haystack"])
    assert restored.get_component("gate").kb_dir == str(gated_kb_dir)
    restored.warm_up()
    assert run(restored, ABSTAINED)["gate"]["decision"].action == "abstain"


def test_a_component_from_a_loaded_gate_refuses_to_serialise(gate: Gate) -> None:
    with pytest.raises(InputError, match="build it with kb_dir"):
        GateComponent(gate=gate).to_dict()
    with pytest.raises(InputError, match="exactly one of kb_dir or gate"):
        GateComponent()


def test_the_async_run(gate: Gate, store: InMemoryDocumentStore) -> None:
    pipe = rag_pipeline(GateComponent(gate=gate), store)
    inputs = {"retriever": {"query": REJECTED}, "gate": {"query": REJECTED}}
    out = asyncio.run(pipe.run_async(inputs, include_outputs_from={"gate"}))
    assert "prompt" not in out and out["gate"]["decision"].action == "reject"
