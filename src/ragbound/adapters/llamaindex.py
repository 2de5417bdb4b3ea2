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

A user turn found forbidden is refused at its turn and then dropped (docs/tripwires.md). Give
the engine ``gate.upstream_memory()`` as its memory (an :class:`UpstreamMemory` over the same
memory): what the engine reads to send its LLM (``get``) is then the chat without the turns
dropped and what answers them, and without the messages older than the recent part the Gate
read; everything else (``get_all``, ``put``, ``reset``...) is the memory's own, so the chat
the user sees keeps them. A ``ContextChatEngine`` decides before it reads its memory: the
turn's own decision says what is left out. An engine that reads first
(``CondensePlusContextChatEngine``) gets the previous turn's: its turns dropped, and the
previous turn itself when it was refused.

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
    ...     index.as_retriever(), memory=gate.upstream_memory(), node_postprocessors=[gate],
    ...     llm=llm)
"""

from __future__ import annotations

import asyncio
from collections.abc import Container
from dataclasses import dataclass
from typing import Any, Protocol

from ragbound.adapters._chat import chat_messages, upstream_rows
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
    on_block: OnBlock = "empty"
    annotate: bool = True
    _last_decision: Decision | None = PrivateAttr(default=None)
    _withheld: Withheld = PrivateAttr(default_factory=lambda: Withheld())

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


class _Source(Protocol):
    """What an :class:`UpstreamMemory` reads: the latest decision's :class:`Withheld`."""

    @property
    def withheld(self) -> Withheld: ...


def upstream_memory(memory: BaseMemory | None, source: _Source) -> UpstreamMemory:
    """An :class:`UpstreamMemory` over a gated component's ``memory`` (refused without one)."""
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
