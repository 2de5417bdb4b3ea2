"""LlamaIndex, natively: the guard sits on the user's own retriever, one retrieval per query.

:class:`LlamaIndexKnowledge` is :class:`~ragbound.knowledge.protocol.Knowledge` over any
LlamaIndex retriever (it embeds the query itself; its ``similarity_top_k`` must be at least
``max(k, guard.k)``); :class:`GatedLlamaIndexRetriever` retrieves once per query, decides from
those scores and returns the first ``k`` nodes on ``answer``.

Example:
    >>> retriever = index.as_retriever(similarity_top_k=4)  # doctest: +SKIP
    >>> knowledge = LlamaIndexKnowledge(retriever, name="minilm")  # doctest: +SKIP
    >>> guard = Guard.calibrate(knowledge, questions, k=4, alpha=0.1)  # doctest: +SKIP
    >>> guarded = GatedLlamaIndexRetriever(guard, k=3)  # doctest: +SKIP
    >>> guarded.retrieve("Who won the 1998 world cup?"), guarded.last_decision.action
    ([], 'abstain')  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ragbound.adapters._common import OnBlock, missing_extra
from ragbound.adapters._framework import Closeness, Found, FrameworkKnowledge, FrameworkSearch
from ragbound.adapters._own_store import OwnStoreRetriever
from ragbound.adapters.llamaindex import (
    UpstreamMemory,
    Withheld,
    annotated,
    chat_query,
    upstream_memory,
)
from ragbound.detect import Guard
from ragbound.embedders.base import Similarity
from ragbound.errors import InputError
from ragbound.gate import Decision
from ragbound.tripwires import Tripwire, TripwireRule

try:
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.memory import BaseMemory
    from llama_index.core.schema import NodeWithScore, QueryBundle
except ImportError as error:
    raise missing_extra("llama-index-core", "llamaindex", error) from error

__all__ = ["GatedLlamaIndexRetriever", "LlamaIndexKnowledge", "LlamaIndexSearch"]


class LlamaIndexSearch(FrameworkSearch):
    """A :class:`~ragbound.stores.Retriever` over a LlamaIndex retriever: text queries, one
    ``retrieve`` per query, the first k of its nodes (similarities higher = closer)."""

    query_kind = "text"

    def __init__(
        self,
        retriever: BaseRetriever,
        *,
        closeness: Closeness = "cosine",
        similarity: Similarity = "cosine",
        size: int | None = None,
        exact: bool = False,
    ):
        self.backend = f"llamaindex:{type(retriever).__name__}"
        super().__init__(closeness=closeness, similarity=similarity, size=size, exact=exact)
        self.retriever = retriever

    def _search_one(self, query: Any, k: int) -> list[Found]:
        found = self.retriever.retrieve(str(query))
        if any(node.score is None for node in found):
            raise InputError("the retriever returned nodes without a score: it cannot be tested")
        return [(n.node.node_id, n.node.get_content(), float(n.score), n) for n in found]


class LlamaIndexKnowledge(FrameworkKnowledge):
    """:class:`~ragbound.knowledge.protocol.Knowledge` over a LlamaIndex retriever.

    ``name`` names the embedding model behind it (it enters the fingerprint); ``closeness``,
    ``similarity``, ``size`` and ``exact`` describe its search (:class:`LlamaIndexSearch`);
    ``version`` tags the index's contents (bump it when nodes change).
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        *,
        name: str,
        closeness: Closeness = "cosine",
        similarity: Similarity = "cosine",
        size: int | None = None,
        exact: bool = False,
        version: str = "",
    ):
        search = LlamaIndexSearch(
            retriever, closeness=closeness, similarity=similarity, size=size, exact=exact
        )
        super().__init__(search, None, name=name, version=version)


class GatedLlamaIndexRetriever(OwnStoreRetriever, BaseRetriever):
    """A LlamaIndex retriever that retrieves once per query through the guard's knowledge.

    ``guard``: a :class:`~ragbound.detect.Guard` over a :class:`LlamaIndexKnowledge`; ``k``:
    nodes returned on ``answer``; ``on_block``: ``"empty"`` or ``"raise"`` (``QueryBlocked``);
    ``tripwires``: the tripwire nodes added to the index (metadata ``ragbound_tripwire``; the
    retriever's ``similarity_top_k`` must leave room for them), decided by ``tripwire_rule``,
    its floor derived from their vectors by ``embed_model`` (default: the retriever's own);
    ``memory``: a chat engine's memory, as for
    :class:`~ragbound.adapters.llamaindex.GatePostprocessor`.
    """

    knowledge_class = LlamaIndexKnowledge
    returned = "nodes"

    def __init__(
        self,
        guard: Guard,
        k: int = 4,
        *,
        on_block: OnBlock = "empty",
        tripwires: list[Tripwire] | None = None,
        tripwire_rule: TripwireRule | None = None,
        embed_model: Any = None,
        callback_manager: CallbackManager | None = None,
        memory: BaseMemory | None = None,
    ):
        super().__init__(callback_manager=callback_manager)
        self._start(guard, k, on_block, tripwires, tripwire_rule, _embed(guard.kb, embed_model))
        self.memory = memory
        self.withheld = Withheld()

    def upstream_memory(self) -> UpstreamMemory:
        """The memory to give the chat engine: ``memory`` as its LLM may read it (without
        the turns found forbidden: :class:`~ragbound.adapters.llamaindex.UpstreamMemory`)."""
        return upstream_memory(self.memory, self)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        history = None if self.memory is None else self.memory.get_all()
        decision = self.decide(chat_query(query_bundle, history))
        self.withheld = Withheld.of(history, query_bundle, decision, self.refused)
        return self._nodes(decision)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        history = None if self.memory is None else await self.memory.aget_all()
        decision = await self.adecide(chat_query(query_bundle, history))
        self.withheld = Withheld.of(history, query_bundle, decision, self.refused)
        return self._nodes(decision)

    def _nodes(self, decision: Decision) -> list[NodeWithScore]:
        found = self._results(decision)
        return annotated([NodeWithScore(node=n.node, score=s) for n, s in found], decision)


def _embed(knowledge: object, embed_model: Any) -> Callable[[list[str]], Any] | None:
    """What embeds the declared tripwires: ``embed_model``'s batch embedding, by default the
    retriever's own model (a VectorIndexRetriever keeps the index's); None: neither."""
    if not isinstance(knowledge, LlamaIndexKnowledge):
        return None  # refused by _start, naming the knowledge it needs
    model = embed_model or getattr(knowledge.store.retriever, "_embed_model", None)
    return model.get_text_embedding_batch if model is not None else None
