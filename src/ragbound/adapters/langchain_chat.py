"""LangChain chat chains: the Gate decides the conversation, the chat history beside the question.

With the input of LangChain's history-aware chains (``{"input": question, "chat_history":
messages}``), :class:`GatedChatRetriever` decides history and question together and returns
documents only on ``answer``; :func:`gated_chat_chain` is the whole turn, calling the LLM only
on ``answer`` and answering a refusal or abstention itself. What goes to an LLM leaves out the
turns found forbidden (:meth:`GatedChatRetriever.upstream_input`).

Example:
    >>> chat = GatedChatRetriever(retriever=GatedRetriever(gate=Gate.load("kb/")))  # doctest: +SKIP
    >>> bot = gated_chat_chain(chat, prompt | llm | StrOutputParser())  # doctest: +SKIP
    >>> history = [("human", "How does BM25 score a chunk?"), ("ai", "By term frequency...")]
    >>> bot.invoke({"input": "And its weaknesses?", "chat_history": history})  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from ragbound.adapters._common import blocked, missing_extra, reply_texts
from ragbound.adapters.langchain import (
    DECISION_EVENT,
    annotated,
    thread_conversation,
    thread_upstream,
)
from ragbound.errors import InputError
from ragbound.gate import DEFAULT_ABSTENTION, DEFAULT_REFUSAL, DEFAULT_UNANSWERABLE, Decision

try:
    from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
    from langchain_core.documents import Document
    from langchain_core.runnables import (
        Runnable,
        RunnableConfig,
        RunnableLambda,
        RunnableSerializable,
    )
    from langchain_core.runnables.config import run_in_executor
except ImportError as error:
    raise missing_extra("langchain-core", "langchain", error) from error

__all__ = ["GatedChatRetriever", "gated_chat_chain"]


class GatedChatRetriever(RunnableSerializable[dict[str, Any], list[Document]]):
    """Decides ``{"input": question, "chat_history": messages}`` as one conversation.

    ``retriever``: the gated retriever that decides and returns the documents (a
    ``GatedRetriever`` or ``GatedVectorStoreRetriever``); ``search``: a runnable over the same
    input whose documents are returned on ``answer`` instead (None: the gated retriever's);
    ``input_key`` / ``history_key``: the input's keys (LangChain's names by default). The
    history is a list of LangChain messages, ``(role, text)`` tuples or dicts.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: Any
    search: Runnable | None = None
    input_key: str = "input"
    history_key: str = "chat_history"

    def conversation(self, inputs: dict[str, Any]) -> list[dict[str, str]]:
        """The input as the OpenAI-style messages the Gate decides."""
        return thread_conversation(self._history(inputs), self._question(inputs)) or []

    def upstream_input(self, inputs: dict[str, Any], decision: Decision) -> dict[str, Any]:
        """The input as it may go to an LLM on ``answer`` (the rephrasing ``search``, your
        answer chain): its history cut by :func:`~ragbound.adapters.langchain.thread_upstream`,
        the items kept as given."""
        history = self._history(inputs)
        if not history:
            return inputs
        refused = getattr(self.retriever, "refused", ())  # a one-search retriever's
        rows = thread_upstream(history, decision, self._question(inputs), refused)
        if len(rows) == len(history):
            return inputs
        return {**inputs, self.history_key: [history[row] for row in rows]}

    def _question(self, inputs: dict[str, Any]) -> str:
        question = inputs.get(self.input_key) if isinstance(inputs, dict) else None
        if not isinstance(question, str):
            raise InputError(f"the chat input needs the question as a string in {self.input_key!r}")
        return question

    def _history(self, inputs: dict[str, Any]) -> list[Any]:
        return list(inputs.get(self.history_key) or []) if isinstance(inputs, dict) else []

    def decide(self, inputs: dict[str, Any], config: RunnableConfig | None = None) -> Decision:
        """The decision on the conversation (sent as the ``ragbound_decision`` event when
        called inside a run)."""
        decision = self.retriever.decide(self.conversation(inputs))
        if config is not None:
            dispatch_custom_event(DECISION_EVENT, decision.model_dump(mode="json"), config=config)
        return decision

    async def adecide(
        self, inputs: dict[str, Any], config: RunnableConfig | None = None
    ) -> Decision:
        """:meth:`decide`, the decision made in a worker thread."""
        decision = await run_in_executor(config, self.retriever.decide, self.conversation(inputs))
        if config is not None:
            data = decision.model_dump(mode="json")
            await adispatch_custom_event(DECISION_EVENT, data, config=config)
        return decision

    def documents(
        self, decision: Decision, inputs: dict[str, Any], config: RunnableConfig | None = None
    ) -> list[Document]:
        """The documents for a decision already made (none unless ``answer``)."""
        if self.search is None:
            return self.retriever.answer_documents(decision, config)
        if blocked(decision, self.retriever.on_block):
            return []
        upstream = self.upstream_input(inputs, decision)
        return annotated(self.search.invoke(upstream, config), decision)

    async def adocuments(
        self, decision: Decision, inputs: dict[str, Any], config: RunnableConfig | None = None
    ) -> list[Document]:
        """:meth:`documents`, the search run asynchronously."""
        if self.search is None or blocked(decision, self.retriever.on_block):
            answer = getattr(self.retriever, "aanswer_documents", None)
            if answer is None:  # a search of its own already made: nothing left to await
                return self.documents(decision, inputs, config)
            return await answer(decision, config)
        upstream = self.upstream_input(inputs, decision)
        return annotated(await self.search.ainvoke(upstream, config), decision)

    def invoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        return self._call_with_config(self._run, input, config, run_type="retriever")

    async def ainvoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        return await self._acall_with_config(self._arun, input, config, run_type="retriever")

    def _run(self, inputs: dict[str, Any], config: RunnableConfig) -> list[Document]:
        return self.documents(self.decide(inputs, config), inputs, config)

    async def _arun(self, inputs: dict[str, Any], config: RunnableConfig) -> list[Document]:
        return await self.adocuments(await self.adecide(inputs, config), inputs, config)


def gated_chat_chain(
    retriever: GatedChatRetriever,
    answer_chain: Runnable,
    *,
    refusal: str = DEFAULT_REFUSAL,
    abstention: str = DEFAULT_ABSTENTION,
    unanswerable: str = DEFAULT_UNANSWERABLE,
) -> Runnable[dict[str, Any], dict[str, Any]]:
    """A chat turn: ``{"input", "chat_history"}`` -> the input with ``context`` (documents),
    ``answer`` (a string) and ``ragbound_decision`` (the decision as JSON).

    ``answer_chain`` (your LLM chain over the input with ``context`` added, e.g.
    ``create_stuff_documents_chain(llm, prompt)``) runs only on ``answer``, given
    :meth:`GatedChatRetriever.upstream_input`; ``reject`` answers ``refusal``, ``abstain``
    ``abstention`` or ``unanswerable`` (by the decision's cause).
    """
    replies = reply_texts(refusal, abstention, unanswerable)

    def blocked_turn(inputs: dict[str, Any], decision: Decision) -> dict[str, Any]:
        return {**turn_of(inputs, decision, []), "answer": replies[decision.cause]}

    def turn(inputs: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        decision = retriever.decide(inputs, config)
        if decision.action != "answer":
            return blocked_turn(inputs, decision)
        out = turn_of(inputs, decision, retriever.documents(decision, inputs, config))
        upstream = {**out, **retriever.upstream_input(inputs, decision)}
        return {**out, "answer": answer_chain.invoke(upstream, config)}

    async def aturn(inputs: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        decision = await retriever.adecide(inputs, config)
        if decision.action != "answer":
            return blocked_turn(inputs, decision)
        documents = await retriever.adocuments(decision, inputs, config)
        out = turn_of(inputs, decision, documents)
        upstream = {**out, **retriever.upstream_input(inputs, decision)}
        return {**out, "answer": await answer_chain.ainvoke(upstream, config)}

    return RunnableLambda(turn, afunc=aturn, name="ragbound_chat_turn")


def turn_of(inputs: dict[str, Any], decision: Decision, context: list[Document]) -> dict[str, Any]:
    """The turn's input with its documents and its decision (as JSON)."""
    return {**inputs, "context": context, DECISION_EVENT: decision.model_dump(mode="json")}
