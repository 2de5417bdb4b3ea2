"""LangChain, natively: the guard sits on the user's own ``VectorStore``, one search per query.

:class:`VectorStoreKnowledge` is :class:`~ragbound.knowledge.protocol.Knowledge` over any
LangChain ``VectorStore`` (``closeness``: see :mod:`ragbound.adapters._framework`);
:class:`GatedVectorStoreRetriever` searches the store once per query, decides from those
scores and returns the store's top documents on ``answer``. Tripwires live in the same store,
flagged with metadata ``ragbound_tripwire`` (:func:`tripwire_documents`).

Example:
    >>> store = InMemoryVectorStore(embeddings)  # doctest: +SKIP
    >>> knowledge = VectorStoreKnowledge(store, embeddings, name="minilm")  # doctest: +SKIP
    >>> guard = Guard.calibrate(knowledge, questions, k=4, alpha=0.1)  # doctest: +SKIP
    >>> retriever = GatedVectorStoreRetriever(guard=guard, k=3)  # doctest: +SKIP
    >>> retriever.invoke("Who won the 1998 world cup?"), retriever.last_decision.action
    ([], 'abstain')  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import PrivateAttr

from ragbound.adapters._chat import Refused
from ragbound.adapters._common import OnBlockOption, QueryBlocked, missing_extra
from ragbound.adapters._framework import (
    RANK_STATISTICS,
    Closeness,
    Found,
    FrameworkKnowledge,
    FrameworkSearch,
    embedder_name,
    model_name,
)
from ragbound.adapters._own_store import OwnStoreRetriever
from ragbound.adapters.langchain import annotated, areport, report
from ragbound.detect import Guard
from ragbound.embedders.base import Similarity
from ragbound.errors import InputError
from ragbound.gate import Decision, Gate
from ragbound.knowledge.query import QueryEmbedder
from ragbound.tripwires import Tripwire, TripwireRule
from ragbound.tripwires.collection import tripwire_metadata

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableConfig
    from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
except ImportError as error:
    raise missing_extra("langchain-core", "langchain", error) from error

__all__ = [
    "RANK_STATISTICS",
    "GatedVectorStoreRetriever",
    "LangChainEmbedder",
    "QueryBlocked",
    "RagboundEmbeddings",
    "VectorStoreKnowledge",
    "VectorStoreSearch",
    "tripwire_documents",
]


class LangChainEmbedder:
    """A :class:`~ragbound.knowledge.query.QueryEmbedder` over LangChain ``Embeddings``:
    queries go through ``embed_query`` (a model with a query prefix gets it)."""

    def __init__(self, embeddings: Embeddings):
        self.embeddings = embeddings

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.asarray([self.embeddings.embed_query(t) for t in texts], dtype=np.float32)

    def encode_one(self, text: str) -> np.ndarray:
        return np.asarray([self.embeddings.embed_query(text)], dtype=np.float32)


class RagboundEmbeddings(Embeddings):
    """LangChain ``Embeddings`` over a ragbound dense embedder, e.g.
    ``RagboundEmbeddings(load_dense_embedder("minilm"))`` (the bundled MiniLM, offline);
    ``model`` is the embedder's name."""

    def __init__(self, embedder: QueryEmbedder):
        self.embedder = embedder
        self.model = embedder_name(embedder)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return np.asarray(self.embedder.encode(list(texts)), dtype=np.float32).tolist()

    def embed_query(self, text: str) -> list[float]:
        return np.asarray(self.embedder.encode_one(text), dtype=np.float32)[0].tolist()


class VectorStoreSearch(FrameworkSearch):
    """A :class:`~ragbound.stores.Retriever` over a LangChain ``VectorStore``, one store call
    per query: ``similarity_search_with_score_by_vector``, or with ``closeness="relevance"``
    ``similarity_search_with_relevance_scores`` (the store embeds the query itself).
    ``exact`` defaults to True for ``InMemoryVectorStore`` (a full scan), else False."""

    def __init__(
        self,
        vectorstore: VectorStore,
        *,
        closeness: Closeness = "cosine",
        similarity: Similarity = "cosine",
        size: int | None = None,
        exact: bool | None = None,
    ):
        self.backend = f"langchain:{type(vectorstore).__name__}"
        if exact is None:
            exact = isinstance(vectorstore, InMemoryVectorStore)
        super().__init__(closeness=closeness, similarity=similarity, size=size, exact=exact)
        if closeness != "relevance" and not _has_vector_search(vectorstore):
            raise InputError(
                f"{type(vectorstore).__name__} has no similarity_search_with_score_by_vector: "
                "use closeness='relevance' (the store embeds the query itself)"
            )
        self.vectorstore = vectorstore
        self.query_kind = "text" if closeness == "relevance" else "vector"

    def _search_one(self, query: Any, k: int) -> list[Found]:
        if self.closeness == "relevance":
            found = self.vectorstore.similarity_search_with_relevance_scores(query, k=k)
        else:
            vector = [float(x) for x in query]
            found = self.vectorstore.similarity_search_with_score_by_vector(vector, k=k)
        return [(doc.id, doc.page_content, score, doc) for doc, score in found]


def _has_vector_search(vectorstore: VectorStore) -> bool:
    return callable(getattr(type(vectorstore), "similarity_search_with_score_by_vector", None))


class VectorStoreKnowledge(FrameworkKnowledge):
    """:class:`~ragbound.knowledge.protocol.Knowledge` over a LangChain ``VectorStore``.

    ``embedding``: the LangChain ``Embeddings`` the store's vectors come from (default: the
    store's own ``embeddings``); ``name`` names it in the fingerprint (default: its class
    and model name). ``closeness``, ``similarity``, ``size`` and ``exact`` describe the store's
    search (:class:`VectorStoreSearch`); ``version`` tags its contents (bump it when
    documents change).
    """

    def __init__(
        self,
        vectorstore: VectorStore,
        embedding: Embeddings | None = None,
        *,
        name: str | None = None,
        closeness: Closeness = "cosine",
        similarity: Similarity = "cosine",
        size: int | None = None,
        exact: bool | None = None,
        version: str = "",
    ):
        embedding = embedding if embedding is not None else _store_embeddings(vectorstore)
        if embedding is None:
            raise InputError("give the LangChain Embeddings the store's vectors come from")
        search = VectorStoreSearch(
            vectorstore, closeness=closeness, similarity=similarity, size=size, exact=exact
        )
        name = name or model_name(embedding, "model", "model_name")
        super().__init__(search, LangChainEmbedder(embedding), name=name, version=version)


def _store_embeddings(vectorstore: VectorStore) -> Embeddings | None:
    try:
        return vectorstore.embeddings
    except (AttributeError, NotImplementedError):
        return None


class GatedVectorStoreRetriever(OwnStoreRetriever, BaseRetriever):
    """A LangChain retriever that searches the guard's vector store once per query.

    ``guard``: a :class:`~ragbound.detect.Guard` over a :class:`VectorStoreKnowledge`; ``k``:
    documents returned on ``answer`` (the store is searched at ``max(k, guard.k)``);
    ``on_block``: ``"empty"`` or ``"raise"`` (``QueryBlocked``); ``tripwires``: the tripwire
    documents added to the store (:func:`tripwire_documents`; an empty list still applies the
    rule to flagged documents met; None: no rule), decided by ``tripwire_rule``. The store's
    documents come back with the decision, reported as
    :class:`~ragbound.adapters.langchain.GatedRetriever` reports it.
    """

    knowledge_class: ClassVar[type[FrameworkKnowledge]] = VectorStoreKnowledge
    guard: Guard
    k: int = 4
    on_block: OnBlockOption = "empty"
    tripwires: list[Tripwire] | None = None
    tripwire_rule: TripwireRule | None = None
    _gate: Gate = PrivateAttr()
    _last_decision: Decision | None = PrivateAttr(default=None)
    _refused: Refused = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self._start(self.guard, self.k, self.on_block, self.tripwires, self.tripwire_rule)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        decision = self.decide(query)
        report(decision, run_manager)
        return self.answer_documents(decision)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        decision = await self.adecide(query)
        await areport(decision, run_manager)
        return self.answer_documents(decision)

    def answer_documents(
        self, decision: Decision, config: RunnableConfig | None = None
    ) -> list[Document]:
        """The store's documents for a decision already made (none unless ``answer``;
        ``on_block`` applies): what :class:`~ragbound.adapters.langchain_chat.GatedChatRetriever`
        returns for a chat turn."""
        return annotated([doc for doc, _ in self._results(decision)], decision)


def tripwire_documents(tripwires: list[Tripwire]) -> list[Document]:
    """LangChain documents for ``tripwires`` (ids = tripwire ids, metadata flagging each), for
    the store's ``add_documents``.

    Example:
        >>> store.add_documents(tripwire_documents(read_tripwires("t.jsonl")))  # doctest: +SKIP
    """
    return [Document(t.text, id=t.id, metadata=tripwire_metadata(t)) for t in tripwires]
