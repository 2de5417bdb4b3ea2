"""LlamaIndex adapter: a node postprocessor that lets nodes through only when the Gate answers.

:class:`GatePostprocessor` passes the retrieved nodes on ``answer`` (copies with the decision
in ``metadata["ragbound"]``, kept out of the LLM and embedding text) and none on ``reject`` /
``abstain`` (or :class:`QueryBlocked`). Given a chat engine's ``memory`` it decides the query
as the chat's last user turn; :class:`UpstreamMemory` is that memory as the engine's LLM may
read it, without the turns found forbidden.

Example:
    >>> gate = GatePostprocessor(gate=Gate.load("kb/"))  # doctest: +SKIP
    >>> engine = index.as_query_engine(node_postprocessors=[gate])  # doctest: +SKIP
    >>> engine.query("Who won the 1998 world cup?").source_nodes  # doctest: +SKIP
    []
    >>> gate.last_decision.action  # doctest: +SKIP
    'abstain'
"""

from __future__ import annotations

import asyncio
from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from ragbound.adapters._chat import chat_messages, upstream_rows
from ragbound.adapters._common import (
    METADATA_KEY,
    OnBlockOption,
    QueryBlocked,
    blocked,
    decision_metadata,
    missing_extra,
)
from ragbound.errors import InputError
from ragbound.gate import Decision, Gate

try:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole
    from llama_index.core.bridge.pydantic import Field, PrivateAttr
    from llama_index.core.memory import BaseMemory
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.schema import NodeWithScore, QueryBundle
except ImportError as error:
    raise missing_extra("llama-index-core", "llamaindex", error) from error

__all__ = ["GatePostprocessor", "QueryBlocked", "UpstreamMemory", "chat_query"]


class GatePostprocessor(BaseNodePostprocessor):
    """Empties (or refuses) the retrieved nodes of a query the Gate does not answer.

    ``gate``: the loaded :class:`~ragbound.gate.Gate` (not serialised); ``on_block``:
    ``"empty"`` or ``"raise"``; ``annotate``: on ``answer``, copy the nodes with the decision in
    their metadata (False: pass the nodes through untouched); ``memory``: the chat engine's
    memory (None: each query decided alone); give the engine :meth:`upstream_memory` as its
    memory, so its LLM never gets a turn found forbidden.
    """

    gate: Gate = Field(exclude=True)
    memory: BaseMemory | None = Field(default=None, exclude=True)
    on_block: OnBlockOption = "empty"
    annotate: bool = True
    _last_decision: Decision | None = PrivateAttr(default=None)
    _withheld: Withheld = PrivateAttr(default_factory=lambda: Withheld())

    @classmethod
    def class_name(cls) -> str:
        return "RagboundGatePostprocessor"

    @property
    def last_decision(self) -> Decision | None:
        """The decision on the latest query this postprocessor saw (None before the first)."""
        return self._last_decision

    @property
    def withheld(self) -> Withheld:
        """What the latest decision keeps of the memory from the LLM."""
        return self._withheld

    def upstream_memory(self) -> UpstreamMemory:
        """The memory to give the chat engine: ``memory`` as its LLM may read it."""
        return upstream_memory(self.memory, self)

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise InputError(
                "GatePostprocessor needs the query: pass query_bundle or query_str to "
                "postprocess_nodes (query engines do)"
            )
        history = None if self.memory is None else self.memory.get_all()
        decision = self.gate.decide(chat_query(query_bundle, history))
        return self._passed(nodes, decision, Withheld.of(history, query_bundle, decision))

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None or self.memory is None:
            return await asyncio.to_thread(self._postprocess_nodes, nodes, query_bundle)
        history = await self.memory.aget_all()
        decision = await asyncio.to_thread(self.gate.decide, chat_query(query_bundle, history))
        return self._passed(nodes, decision, Withheld.of(history, query_bundle, decision))

    def _passed(
        self, nodes: list[NodeWithScore], decision: Decision, withheld: Withheld
    ) -> list[NodeWithScore]:
        self._last_decision, self._withheld = decision, withheld
        if blocked(decision, self.on_block):
            return []
        return annotated(nodes, decision) if self.annotate else nodes


def chat_query(
    query: QueryBundle | str, history: list[ChatMessage] | None
) -> str | list[dict[str, str]]:
    """What the Gate decides for a retrieval: the query alone (``history`` None), or the
    conversation of ``history`` (LlamaIndex chat messages, oldest first) and the query as its
    last user turn, as OpenAI-style messages (:mod:`ragbound.adapters._chat`)."""
    text = _text(query)
    if history is None:
        return text
    return chat_messages(_pairs(history), text)


def _text(query: QueryBundle | str) -> str:
    return query.query_str if isinstance(query, QueryBundle) else query


def _pairs(history: list[ChatMessage]) -> list[tuple[str, str]]:
    return [(_role(m), m.content or "") for m in history]


def _role(message: ChatMessage) -> str:
    role = message.role
    return role.value if isinstance(role, MessageRole) else str(role)


@dataclass(frozen=True)
class Withheld:
    """What a decision on a chat memory keeps from the LLM: ``rows`` of the history it read
    (``read``: that history's (role, text), oldest first), and, when the turn was refused
    (``refused``), the messages the memory gained after it (the turn and its reply)."""

    read: tuple[tuple[str, str], ...] = ()
    rows: frozenset[int] = frozenset()
    refused: bool = False

    @classmethod
    def of(
        cls,
        history: list[ChatMessage] | None,
        query: QueryBundle | str,
        decision: Decision,
        refused: Container[str] = (),
    ) -> Withheld:
        """What ``decision`` on ``query`` after ``history`` withholds (nothing without one;
        ``refused``: turn texts left out besides those the decision dropped)."""
        if history is None:
            return cls()
        pairs = _pairs(history)
        kept = set(upstream_rows(pairs, decision, _text(query), refused))
        rows = frozenset(range(len(pairs))) - kept
        return cls(tuple(pairs), rows, decision.action == "reject")

    def upstream(self, history: list[ChatMessage], recent: list[ChatMessage]) -> list[ChatMessage]:
        """``recent`` (what the memory's ``get`` gave: its latest messages, newest last, as
        LlamaIndex's memories give them) without the withheld messages of ``history`` (all the
        memory holds), matched from the newest back. A history that no longer starts with
        the one decided (the memory was set anew) withholds nothing: no decision was made
        on it."""
        if _pairs(history[: len(self.read)]) != list(self.read):
            return recent
        shift = len(history) - len(recent)
        return [m for i, m in enumerate(recent) if not self._withholds(history, shift + i, m)]

    def _withholds(self, history: list[ChatMessage], row: int, message: ChatMessage) -> bool:
        # a message the memory adds of its own (its memory blocks, in front) is not matched
        if row < 0 or _role(history[row]) != _role(message):
            return False
        return row in self.rows if row < len(self.read) else self.refused


def upstream_memory(memory: BaseMemory | None, source: Any) -> UpstreamMemory:
    """An :class:`UpstreamMemory` over a gated component's ``memory`` (refused without one);
    ``source``: the component, whose ``withheld`` is its latest decision's :class:`Withheld`."""
    if memory is None:
        raise InputError("upstream_memory needs the chat memory: build the component with memory=")
    return UpstreamMemory(memory=memory, source=source)


class UpstreamMemory(BaseMemory):
    """A chat engine's memory as its LLM may read it: ``get`` / ``aget`` give ``memory``'s
    messages without those the latest decision of ``source`` withholds (the turns found
    forbidden and their replies); every other call is ``memory``'s own."""

    memory: BaseMemory = Field(exclude=True)
    source: Any = Field(exclude=True)

    @classmethod
    def class_name(cls) -> str:
        return "RagboundUpstreamMemory"

    @classmethod
    def from_defaults(cls, **kwargs: Any) -> UpstreamMemory:
        return cls(**kwargs)

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        recent = self.memory.get(input=input, **kwargs)
        return self.source.withheld.upstream(self.memory.get_all(), recent)

    async def aget(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        recent = await self.memory.aget(input=input, **kwargs)
        return self.source.withheld.upstream(await self.memory.aget_all(), recent)

    def get_all(self) -> list[ChatMessage]:
        return self.memory.get_all()

    async def aget_all(self) -> list[ChatMessage]:
        return await self.memory.aget_all()

    def put(self, message: ChatMessage) -> None:
        self.memory.put(message)

    async def aput(self, message: ChatMessage) -> None:
        await self.memory.aput(message)

    def put_messages(self, messages: list[ChatMessage]) -> None:
        self.memory.put_messages(messages)

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        await self.memory.aput_messages(messages)

    def set(self, messages: list[ChatMessage]) -> None:
        self.memory.set(messages)

    async def aset(self, messages: list[ChatMessage]) -> None:
        await self.memory.aset(messages)

    def reset(self) -> None:
        self.memory.reset()

    async def areset(self) -> None:
        await self.memory.areset()


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
