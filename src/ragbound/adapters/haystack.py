"""Haystack adapter: a component that decides the query and routes the pipeline on the answer.

:class:`GateComponent` returns ``decision`` and ``documents`` always (none unless ``answer``),
``query`` and ``history`` (the chat without the turns found forbidden) only on ``answer``, to
run the generation branch, and ``blocked`` only on ``reject`` / ``abstain``. Built from
``kb_dir`` it serialises with the pipeline (load it with
``allowed_modules=["ragbound.adapters.haystack"]``).

Example:
    >>> pipe = Pipeline()  # doctest: +SKIP
    >>> pipe.add_component("retriever", InMemoryBM25Retriever(store))  # doctest: +SKIP
    >>> pipe.add_component("gate", GateComponent("kb/"))  # doctest: +SKIP
    >>> pipe.connect("retriever.documents", "gate.documents")  # doctest: +SKIP
    >>> out = pipe.run({"retriever": {"query": q}, "gate": {"query": q}})  # doctest: +SKIP
    >>> out["gate"]["decision"].action  # doctest: +SKIP
    'abstain'
"""

import asyncio
import dataclasses
from collections.abc import Container
from pathlib import Path
from typing import Any

from ragbound.adapters._chat import chat_messages, upstream_rows
from ragbound.adapters._common import (
    METADATA_KEY,
    chunk_metadata,
    decision_metadata,
    missing_extra,
)
from ragbound.errors import InputError
from ragbound.gate import DEFAULT_CONTEXT_K, Decision, Gate

try:
    from haystack import Document, component, default_from_dict, default_to_dict
    from haystack.dataclasses import ChatMessage
except ImportError as error:
    raise missing_extra("haystack-ai", "haystack", error) from error

__all__ = ["GateComponent", "chat_query"]

routed_outputs = component.output_types(
    documents=list[Document],
    decision=Decision,
    query=str,
    blocked=Decision,
    history=list[ChatMessage],
)
"""The outputs of a component whose outputs are :func:`routed` (its ``run`` and ``run_async``)."""


@component
class GateComponent:
    """Decides each query with a ragbound Gate; passes documents only on ``answer``.

    Give exactly one of ``kb_dir`` (a calibrated knowledge base, loaded in ``warm_up``, with
    ``context_k`` context chunks) or ``gate`` (already loaded). ``annotate``: on ``answer``,
    copy the given documents with the decision in their ``meta`` (False: pass them untouched).
    """

    def __init__(
        self,
        kb_dir: str | Path | None = None,
        *,
        gate: Gate | None = None,
        context_k: int = DEFAULT_CONTEXT_K,
        annotate: bool = True,
    ):
        if (kb_dir is None) == (gate is None):
            raise InputError("GateComponent needs exactly one of kb_dir or gate")
        self.kb_dir = None if kb_dir is None else str(kb_dir)
        self.context_k = context_k
        self.annotate = annotate
        self._gate = gate

    def warm_up(self) -> None:
        """Load the Gate from ``kb_dir`` (once); the pipeline calls this before running."""
        if self._gate is None:
            self._gate = Gate.load(self.kb_dir, context_k=self.context_k)

    def to_dict(self) -> dict[str, Any]:
        """The component's init parameters, for pipeline serialisation (needs ``kb_dir``)."""
        if self.kb_dir is None:
            raise InputError(
                "a GateComponent built from a loaded gate cannot be serialised: "
                "build it with kb_dir to save the pipeline"
            )
        return default_to_dict(
            self, kb_dir=self.kb_dir, context_k=self.context_k, annotate=self.annotate
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GateComponent":
        """The component again from :meth:`to_dict`'s output."""
        return default_from_dict(cls, data)

    @routed_outputs
    def run(
        self,
        query: str,
        documents: list[Document] | None = None,
        history: list[ChatMessage] | None = None,
    ) -> dict[str, Any]:
        """Decide ``query`` (after ``history``, in a chat); documents on ``answer`` only."""
        self.warm_up()
        assert self._gate is not None
        decision = self._gate.decide(chat_query(query, history))
        return self._outputs(decision, documents, upstream_history(query, history, decision))

    @routed_outputs
    async def run_async(
        self,
        query: str,
        documents: list[Document] | None = None,
        history: list[ChatMessage] | None = None,
    ) -> dict[str, Any]:
        """:meth:`run` for ``AsyncPipeline``: the decision is made in a worker thread."""
        self.warm_up()
        assert self._gate is not None
        decision = await asyncio.to_thread(self._gate.decide, chat_query(query, history))
        return self._outputs(decision, documents, upstream_history(query, history, decision))

    def _outputs(
        self,
        decision: Decision,
        documents: list[Document] | None,
        upstream: list[ChatMessage],
    ) -> dict[str, Any]:
        if decision.action != "answer":
            return routed(decision, [])
        if documents is None:
            found = context_documents(decision)
        else:
            found = annotated(documents, decision) if self.annotate else documents
        return routed(decision, found, upstream)


def chat_query(query: str, history: list[ChatMessage] | None) -> str | list[dict[str, str]]:
    """What the Gate decides: ``query`` alone (``history`` None), or the conversation of
    ``history`` (Haystack chat messages, oldest first) with ``query`` as its last user turn,
    as OpenAI-style messages."""
    if history is None:
        return query
    return chat_messages(_pairs(history), query)


def upstream_history(
    query: str,
    history: list[ChatMessage] | None,
    decision: Decision,
    refused: Container[str] = (),
) -> list[ChatMessage]:
    """``history`` (before ``query``, as :func:`chat_query` took them for ``decision``) as it
    may go to the LLM on ``answer`` (:func:`~ragbound.adapters._chat.upstream_rows`)."""
    if not history or decision.action != "answer":
        return []
    rows = upstream_rows(_pairs(history), decision, query, refused)
    return [history[row] for row in rows]


def _pairs(history: list[ChatMessage]) -> list[tuple[str, str]]:
    return [(m.role.value, m.text or "") for m in history]


def routed(
    decision: Decision, documents: list[Document], upstream: list[ChatMessage] | None = None
) -> dict[str, Any]:
    """A component's outputs: ``documents`` and ``decision`` always; on ``answer`` ``query``
    (to run the generation branch) and ``history``, the chat before it for the LLM
    (``upstream``: :func:`upstream_history`); ``blocked`` otherwise (to run a refusal
    branch)."""
    if decision.action != "answer":
        return {"documents": documents, "decision": decision, "blocked": decision}
    outputs = {"documents": documents, "decision": decision, "query": decision.query}
    return {**outputs, "history": upstream or []}


def context_documents(decision: Decision) -> list[Document]:
    """The Gate's retrieved chunks as Haystack documents, nearest first."""
    summary = decision_metadata(decision)
    return [
        Document(
            id=chunk.chunk_id,
            content=chunk.text,
            score=chunk.similarity,
            meta=chunk_metadata(chunk, summary),
        )
        for chunk in decision.neighbours
    ]


def annotated(documents: list[Document], decision: Decision) -> list[Document]:
    """Copies of ``documents`` with the decision in their meta (the originals untouched)."""
    summary = decision_metadata(decision)
    return [dataclasses.replace(doc, meta={**doc.meta, METADATA_KEY: summary}) for doc in documents]
