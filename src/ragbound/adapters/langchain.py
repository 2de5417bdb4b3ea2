"""LangChain adapter: a ``BaseRetriever`` that asks the Gate before it retrieves.

On ``answer`` :class:`GatedRetriever` returns the wrapped retriever's documents (or the Gate's
own chunks), each with the decision in ``metadata["ragbound"]``; on ``reject`` / ``abstain``
none, or :class:`QueryBlocked` (``on_block="raise"``). Each decision is also
``last_decision`` and the custom callback event ``ragbound_decision`` (the decision as JSON).

Example:
    >>> guarded = vectorstore.as_retriever()  # doctest: +SKIP
    >>> retriever = GatedRetriever(gate=Gate.load("kb/"), retriever=guarded)  # doctest: +SKIP
    >>> docs = retriever.invoke("Who won the 1998 world cup?")  # doctest: +SKIP
    >>> docs, retriever.last_decision.action  # doctest: +SKIP
    ([], 'abstain')
"""

from __future__ import annotations

from collections.abc import Container, Sequence

from pydantic import PrivateAttr

from ragbound.adapters._chat import chat_messages, last_user_index, upstream_rows
from ragbound.adapters._common import (
    METADATA_KEY,
    OnBlockOption,
    QueryBlocked,
    blocked,
    chunk_metadata,
    decision_metadata,
    missing_extra,
)
from ragbound.conversations.model import Query
from ragbound.gate import Decision, Gate

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.messages import (
        BaseMessage,
        ChatMessage,
        MessageLikeRepresentation,
        convert_to_messages,
    )
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableConfig
    from langchain_core.runnables.config import run_in_executor
except ImportError as error:
    raise missing_extra("langchain-core", "langchain", error) from error

__all__ = [
    "DECISION_EVENT",
    "GatedRetriever",
    "QueryBlocked",
    "thread_conversation",
    "thread_upstream",
]

DECISION_EVENT = "ragbound_decision"
"""Name of the custom callback event that carries each decision (data: the decision as JSON)."""


class GatedRetriever(BaseRetriever):
    """Guards any LangChain retriever (or stands alone) with a ragbound Gate.

    ``gate``: the loaded :class:`~ragbound.gate.Gate`; ``retriever``: the retriever to guard
    (None: the Gate's context chunks are the documents); ``on_block``: ``"empty"`` returns no
    documents on ``reject`` / ``abstain``, ``"raise"`` raises ``QueryBlocked``.
    """

    gate: Gate
    retriever: BaseRetriever | None = None
    on_block: OnBlockOption = "empty"
    _last_decision: Decision | None = PrivateAttr(default=None)

    @property
    def last_decision(self) -> Decision | None:
        """The decision on the latest query this retriever saw (None before the first)."""
        return self._last_decision

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        decision = self.decide(query)
        report(decision, run_manager)
        return self._documents(decision, query, {"callbacks": run_manager.get_child()})

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        decision = await run_in_executor(None, self.decide, query)
        await areport(decision, run_manager)
        return await self._adocuments(decision, query, {"callbacks": run_manager.get_child()})

    def decide(self, query: Query | list[dict[str, str]]) -> Decision:
        """The decision on a query, or on a conversation (OpenAI-style messages, e.g.
        :func:`thread_conversation`'s) at its last user turn; kept as ``last_decision``."""
        decision = self.gate.decide(query)
        self._last_decision = decision
        return decision

    def answer_documents(
        self, decision: Decision, config: RunnableConfig | None = None
    ) -> list[Document]:
        """The documents for a decision already made (none unless ``answer``; ``on_block``
        applies): the wrapped retriever's, searched with the text the Gate searched
        (``decision.test.query``: a follow-up joined with the turns it follows), or the
        Gate's own chunks."""
        return self._documents(decision, decision.test.query, config)

    async def aanswer_documents(
        self, decision: Decision, config: RunnableConfig | None = None
    ) -> list[Document]:
        """:meth:`answer_documents`, the wrapped retriever run asynchronously."""
        return await self._adocuments(decision, decision.test.query, config)

    def _documents(
        self, decision: Decision, query: str, config: RunnableConfig | None
    ) -> list[Document]:
        """The documents behind ``decision``: ``query``'s from the wrapped retriever."""
        if blocked(decision, self.on_block):
            return []
        if self.retriever is None:
            return context_documents(decision)
        return annotated(self.retriever.invoke(query, config=config), decision)

    async def _adocuments(
        self, decision: Decision, query: str, config: RunnableConfig | None
    ) -> list[Document]:
        if blocked(decision, self.on_block) or self.retriever is None:
            return self._documents(decision, query, config)
        return annotated(await self.retriever.ainvoke(query, config=config), decision)


def thread_conversation(
    messages: Sequence[MessageLikeRepresentation], question: str | None = None
) -> list[dict[str, str]] | None:
    """LangChain messages (``BaseMessage`` objects, ``("human", text)`` tuples, dicts: what a
    ``MessagesPlaceholder`` takes) up to the last human message, as the OpenAI-style
    conversation the Gate decides; with ``question``, the messages are the history before it.
    None: no human turn to decide. Tool results and messages without text are left out
    (:mod:`ragbound.adapters._chat`)."""
    pairs = _pairs(messages)
    turn = _decided_turn(pairs, question)
    return None if turn is None else chat_messages(pairs[: turn[0]], turn[1])


def thread_upstream(
    messages: Sequence[MessageLikeRepresentation],
    decision: Decision,
    question: str | None = None,
    refused: Container[str] = (),
) -> list[int]:
    """The positions in ``messages`` (taken as :func:`thread_conversation` took them for
    ``decision``) that may go to the LLM on ``answer``, oldest first
    (:func:`~ragbound.adapters._chat.upstream_rows`); the decided turn and what follows it
    always stay."""
    pairs = _pairs(messages)
    turn = _decided_turn(pairs, question)
    if turn is None:
        return list(range(len(pairs)))
    end, text = turn
    return [*upstream_rows(pairs[:end], decision, text, refused), *range(end, len(pairs))]


def _decided_turn(pairs: list[tuple[str, str]], question: str | None) -> tuple[int, str] | None:
    """(how many of ``pairs`` come before the decided turn, its text): ``question`` after them
    all, else the last human message (None: there is none)."""
    if question is not None:
        return len(pairs), question
    last = last_user_index([role for role, _ in pairs])
    return None if last is None else (last, pairs[last][1])


def _pairs(messages: Sequence[MessageLikeRepresentation]) -> list[tuple[str, str]]:
    """(role, text) of each message (one per item: convert_to_messages keeps the positions)."""
    return [(_role(m), m.text) for m in convert_to_messages(messages)]


def _role(message: BaseMessage) -> str:
    # a ChatMessage carries any role name in .role; the others name theirs in .type
    return message.role if isinstance(message, ChatMessage) else message.type


def report(decision: Decision, run_manager: CallbackManagerForRetrieverRun) -> None:
    """Send the decision (as JSON, context included) as the ``ragbound_decision`` event."""
    run_manager.get_child().on_custom_event(
        DECISION_EVENT, decision.model_dump(mode="json"), run_id=run_manager.run_id
    )


async def areport(decision: Decision, run_manager: AsyncCallbackManagerForRetrieverRun) -> None:
    """:func:`report` for an async run."""
    await run_manager.get_child().on_custom_event(
        DECISION_EVENT, decision.model_dump(mode="json"), run_id=run_manager.run_id
    )


def context_documents(decision: Decision) -> list[Document]:
    """The Gate's retrieved chunks as LangChain documents, nearest first."""
    summary = decision_metadata(decision)
    return [
        Document(
            id=chunk.chunk_id,
            page_content=chunk.text,
            metadata=chunk_metadata(chunk, summary),
        )
        for chunk in decision.neighbours
    ]


def annotated(documents: list[Document], decision: Decision) -> list[Document]:
    """Copies of ``documents`` with the decision in their metadata (the originals untouched)."""
    summary = decision_metadata(decision)
    return [
        doc.model_copy(update={"metadata": {**doc.metadata, METADATA_KEY: summary}})
        for doc in documents
    ]
