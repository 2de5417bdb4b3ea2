"""LlamaIndex adapter: a node postprocessor that lets nodes through only when the Gate answers.

:class:`GatePostprocessor` decides the query of each retrieval with a
:class:`~ragbound.gate.Gate`:

- ``answer``: the retrieved nodes pass through, as copies annotated with the decision (without
  its context) in ``metadata["ragbound"]``, a key kept out of the LLM and embedding text;
- ``reject`` / ``abstain``: no nodes (``on_block="empty"``, the default: a query engine then
  answers "Empty Response" without calling the LLM), or :class:`QueryBlocked` carrying the
  decision (``on_block="raise"``).

The decision reaches the caller through ``last_decision`` (the latest query's), the nodes'
metadata on ``answer``, and the exception in ``raise`` mode.

In a chat engine, give it the engine's ``memory``: the query is then decided as the last
user turn of the chat the memory holds (as ``POST /v1/decide`` with ``messages`` decides it:
a follow-up read with the turns it follows; the tripwires see every user turn). A
``ContextChatEngine`` retrieves before it adds the user's message to its memory, so the
memory is the history and the query the new turn; a ``CondensePlusContextChatEngine``
retrieves with the LLM's condensed question, which is then the turn decided
(``skip_condense=True``: the user's own message, as the service decides it).

Example:
    >>> gate = GatePostprocessor(gate=Gate.load("kb/"))  # doctest: +SKIP
    >>> engine = index.as_query_engine(node_postprocessors=[gate])  # doctest: +SKIP
    >>> engine.query("Who won the 1998 world cup?").source_nodes  # doctest: +SKIP
    []
    >>> gate.last_decision.action  # doctest: +SKIP
    'abstain'
    >>> memory = ChatMemoryBuffer.from_defaults()  # doctest: +SKIP
    >>> gate = GatePostprocessor(gate=Gate.load("kb/"), memory=memory)  # doctest: +SKIP
    >>> chat = ContextChatEngine.from_defaults(  # doctest: +SKIP
    ...     index.as_retriever(), memory=memory, node_postprocessors=[gate], llm=llm)
"""

from __future__ import annotations

import asyncio

from ragbound.adapters._chat import chat_messages
from ragbound.adapters._common import (
    METADATA_KEY,
    OnBlock,
    QueryBlocked,
    blocked,
    check_on_block,
    decision_metadata,
    missing_extra,
)
from ragbound.errors import InputError
from ragbound.gate import Decision, Gate

try:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole
    from llama_index.core.bridge.pydantic import Field, PrivateAttr, field_validator
    from llama_index.core.memory import BaseMemory
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.schema import NodeWithScore, QueryBundle
except ImportError as error:
    raise missing_extra("llama-index-core", "llamaindex", error) from error

__all__ = ["GatePostprocessor", "QueryBlocked", "chat_query"]


class GatePostprocessor(BaseNodePostprocessor):
    """Empties (or refuses) the retrieved nodes of a query the Gate does not answer.

    ``gate``: the loaded :class:`~ragbound.gate.Gate` (not serialised); ``on_block``:
    ``"empty"`` or ``"raise"``; ``annotate``: on ``answer``, copy the nodes with the decision in
    their metadata (False: pass the nodes through untouched); ``memory``: the chat engine's
    memory (None: each query decided alone).
    """

    gate: Gate = Field(exclude=True)
    memory: BaseMemory | None = Field(default=None, exclude=True)
    on_block: OnBlock = "empty"
    annotate: bool = True
    _last_decision: Decision | None = PrivateAttr(default=None)

    @field_validator("on_block", mode="before")
    @classmethod
    def _valid_on_block(cls, value: str) -> OnBlock:
        return check_on_block(value)

    @classmethod
    def class_name(cls) -> str:
        return "RagboundGatePostprocessor"

    @property
    def last_decision(self) -> Decision | None:
        """The decision on the latest query this postprocessor saw (None before the first)."""
        return self._last_decision

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise InputError(
                "GatePostprocessor needs the query: pass query_bundle or query_str to "
                "postprocess_nodes (query engines do)"
            )
        history = None if self.memory is None else self.memory.get_all()
        return self._passed(nodes, self.gate.decide(chat_query(query_bundle, history)))

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None or self.memory is None:
            return await asyncio.to_thread(self._postprocess_nodes, nodes, query_bundle)
        query = chat_query(query_bundle, await self.memory.aget_all())
        return self._passed(nodes, await asyncio.to_thread(self.gate.decide, query))

    def _passed(self, nodes: list[NodeWithScore], decision: Decision) -> list[NodeWithScore]:
        self._last_decision = decision
        if blocked(decision, self.on_block):
            return []
        return annotated(nodes, decision) if self.annotate else nodes


def chat_query(
    query: QueryBundle | str, history: list[ChatMessage] | None
) -> str | list[dict[str, str]]:
    """What the Gate decides for a retrieval: the query alone (``history`` None), or the
    conversation of ``history`` (LlamaIndex chat messages, oldest first) and the query as its
    last user turn, as OpenAI-style messages (:mod:`ragbound.adapters._chat`)."""
    text = query.query_str if isinstance(query, QueryBundle) else query
    if history is None:
        return text
    return chat_messages([(_role(m), m.content or "") for m in history], text)


def _role(message: ChatMessage) -> str:
    role = message.role
    return role.value if isinstance(role, MessageRole) else str(role)


def annotated(nodes: list[NodeWithScore], decision: Decision) -> list[NodeWithScore]:
    """Copies of ``nodes`` with the decision in metadata, hidden from the LLM and embeddings."""
    summary = decision_metadata(decision)
    copies = []
    for scored in nodes:
        node = scored.node
        copy = node.model_copy(
            update={
                "metadata": {**node.metadata, METADATA_KEY: summary},
                "excluded_llm_metadata_keys": _with_key(node.excluded_llm_metadata_keys),
                "excluded_embed_metadata_keys": _with_key(node.excluded_embed_metadata_keys),
            }
        )
        copies.append(NodeWithScore(node=copy, score=scored.score))
    return copies


def _with_key(keys: list[str]) -> list[str]:
    return keys if METADATA_KEY in keys else [*keys, METADATA_KEY]
