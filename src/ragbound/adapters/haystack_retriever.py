"""Haystack, natively: the guard sits on the user's own embedding retriever, one search per query.

:class:`HaystackKnowledge` is :class:`~ragbound.knowledge.protocol.Knowledge` over a Haystack
embedding retriever and the text embedder its documents were embedded with (a Haystack
component or a ragbound dense embedder); :class:`GatedHaystackRetriever` embeds each query
once, searches once, decides and returns the first ``k`` documents on ``answer``.
``closeness`` (:mod:`ragbound.adapters._framework`) defaults to what an
``InMemoryEmbeddingRetriever`` gives (:func:`inferred_closeness`), else ``"cosine"``.

Example:
    >>> retriever = InMemoryEmbeddingRetriever(store)  # doctest: +SKIP
    >>> knowledge = HaystackKnowledge(retriever, embedder, name="minilm")  # doctest: +SKIP
    >>> guard = Guard.calibrate(knowledge, questions, k=4, alpha=0.1)  # doctest: +SKIP
    >>> guarded = GatedHaystackRetriever(guard, k=3)  # doctest: +SKIP
    >>> out = guarded.run("Who won the 1998 world cup?")  # doctest: +SKIP
    >>> out["documents"], out["decision"].action  # doctest: +SKIP
    ([], 'abstain')
"""

import dataclasses
from typing import Any

import numpy as np

from ragbound.adapters._common import OnBlock, missing_extra
from ragbound.adapters._framework import (
    Closeness,
    Found,
    FrameworkKnowledge,
    FrameworkSearch,
    embedder_name,
    model_name,
)
from ragbound.adapters._own_store import OwnStoreRetriever
from ragbound.adapters.haystack import (
    annotated,
    chat_query,
    routed,
    routed_outputs,
    upstream_history,
)
from ragbound.detect import Guard
from ragbound.embedders.base import Similarity
from ragbound.errors import InputError
from ragbound.gate import Decision
from ragbound.knowledge.query import QueryEmbedder
from ragbound.tripwires import Tripwire, TripwireRule
from ragbound.tripwires.collection import tripwire_metadata

try:
    from haystack import Document, component
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
    from haystack.dataclasses import ChatMessage
except ImportError as error:
    raise missing_extra("haystack-ai", "haystack", error) from error

__all__ = [
    "GatedHaystackRetriever",
    "HaystackEmbedder",
    "HaystackKnowledge",
    "HaystackSearch",
    "RagboundDocumentEmbedder",
    "RagboundTextEmbedder",
    "tripwire_documents",
]

UNIT_NORM_TOLERANCE = 1e-3
"""How far from 1 a query vector's norm may be when a dot product is declared cosine."""


class HaystackEmbedder:
    """A :class:`~ragbound.knowledge.query.QueryEmbedder` over a Haystack text embedder
    component: each query is one ``run(text=...)`` (warmed up before the first)."""

    def __init__(self, text_embedder: Any):
        if not callable(getattr(text_embedder, "run", None)):
            raise InputError(
                f"{type(text_embedder).__name__} is not a Haystack text embedder (no run)"
            )
        self.text_embedder = text_embedder
        self._warm = False

    def warm_up(self) -> None:
        """Warm the component up (load its model) once."""
        if not self._warm and callable(getattr(self.text_embedder, "warm_up", None)):
            self.text_embedder.warm_up()
        self._warm = True

    def encode(self, texts: list[str]) -> np.ndarray:
        self.warm_up()
        vectors = [self.text_embedder.run(text=t)["embedding"] for t in texts]
        return np.asarray(vectors, dtype=np.float32)

    def encode_one(self, text: str) -> np.ndarray:
        return self.encode([text])


@component
class RagboundTextEmbedder:
    """A Haystack text embedder over a ragbound dense embedder (e.g.
    ``load_dense_embedder("minilm")``): ``run(text) -> {"embedding": list[float]}``."""

    def __init__(self, embedder: QueryEmbedder):
        self.embedder = embedder
        self.model = embedder_name(embedder)

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, Any]:
        """The query's vector, as the ragbound embedder gives it."""
        vector = np.asarray(self.embedder.encode_one(text), dtype=np.float32)[0]
        return {"embedding": vector.tolist()}


@component
class RagboundDocumentEmbedder:
    """A Haystack document embedder over a ragbound dense embedder: copies of the documents
    with ``embedding`` set from their ``content`` (the originals untouched)."""

    def __init__(self, embedder: QueryEmbedder):
        self.embedder = embedder
        self.model = embedder_name(embedder)

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """The documents with their vectors (float lists), in the order given."""
        if not documents:
            return {"documents": []}
        vectors = np.asarray(self.embedder.encode([d.content or "" for d in documents]))
        embedded = [
            dataclasses.replace(doc, embedding=vector.astype(np.float32).tolist())
            for doc, vector in zip(documents, vectors, strict=True)
        ]
        return {"documents": embedded}


def query_embedder(embedder: Any) -> QueryEmbedder:
    """A ragbound embedder as it is; a Haystack text embedder component wrapped."""
    if callable(getattr(embedder, "encode_one", None)):
        return embedder
    return HaystackEmbedder(embedder)


def inferred_closeness(retriever: Any) -> Closeness:
    """The score mode an ``InMemoryEmbeddingRetriever`` gives: ``"relevance"`` with
    ``scale_score``, ``"cosine"`` on a cosine store, else ``"similarity"`` (a dot product);
    ``"cosine"`` for any other retriever."""
    if not isinstance(retriever, InMemoryEmbeddingRetriever):
        return "cosine"
    if retriever.scale_score:
        return "relevance"
    function = retriever.document_store.embedding_similarity_function
    return "cosine" if function == "cosine" else "similarity"


class HaystackSearch(FrameworkSearch):
    """A :class:`~ragbound.stores.Retriever` over a Haystack embedding retriever: query
    vectors, one ``run(query_embedding=..., top_k=k)`` per query (similarities higher =
    closer). ``exact`` defaults to True for ``InMemoryEmbeddingRetriever`` (a full scan)."""

    query_kind = "vector"

    def __init__(
        self,
        retriever: Any,
        *,
        closeness: Closeness | None = None,
        similarity: Similarity = "cosine",
        size: int | None = None,
        exact: bool | None = None,
    ):
        if not callable(getattr(retriever, "run", None)):
            raise InputError(f"{type(retriever).__name__} is not a Haystack retriever (no run)")
        self.backend = f"haystack:{type(retriever).__name__}"
        closeness = inferred_closeness(retriever) if closeness is None else closeness
        if exact is None:
            exact = isinstance(retriever, InMemoryEmbeddingRetriever)
        super().__init__(closeness=closeness, similarity=similarity, size=size, exact=exact)
        if getattr(retriever, "scale_score", False) is True and closeness != "relevance":
            raise InputError(
                f"{type(retriever).__name__} scales its scores (scale_score=True): only their "
                "order is known; declare closeness='relevance' or build it with scale_score=False"
            )
        self.retriever = retriever
        self._unit_queries = closeness == "cosine" and _dot_product(retriever)

    def _search_one(self, query: Any, k: int) -> list[Found]:
        if self._unit_queries:
            _check_unit_norm(query)
        vector = [float(x) for x in query]
        found = self.retriever.run(query_embedding=vector, top_k=k)["documents"]
        if any(doc.score is None for doc in found):
            raise InputError(
                "the retriever returned documents without a score: it cannot be tested"
            )
        return [(doc.id, doc.content or "", float(doc.score), doc) for doc in found]


def _dot_product(retriever: Any) -> bool:
    store = getattr(retriever, "document_store", None)
    return getattr(store, "embedding_similarity_function", None) == "dot_product"


def _check_unit_norm(query: np.ndarray) -> None:
    norm = float(np.linalg.norm(query))
    if abs(norm - 1.0) > UNIT_NORM_TOLERANCE:
        raise InputError(
            f"the query vector's norm is {norm:.4f}: a dot_product store's scores are cosine "
            "only for unit vectors; normalise the embeddings or declare closeness='similarity'"
        )


class HaystackKnowledge(FrameworkKnowledge):
    """:class:`~ragbound.knowledge.protocol.Knowledge` over a Haystack embedding retriever.

    ``embedder``: what the store's vectors come from (a Haystack text embedder component or a
    ragbound dense embedder); ``name`` names it in the fingerprint (default: its class and
    model name). ``closeness``, ``similarity``, ``size`` and ``exact`` describe the retriever's
    search (:class:`HaystackSearch`); ``version`` tags the store's contents.
    """

    def __init__(
        self,
        retriever: Any,
        embedder: Any,
        *,
        name: str | None = None,
        closeness: Closeness | None = None,
        similarity: Similarity = "cosine",
        size: int | None = None,
        exact: bool | None = None,
        version: str = "",
    ):
        search = HaystackSearch(
            retriever, closeness=closeness, similarity=similarity, size=size, exact=exact
        )
        name = name or model_name(embedder, "model", "name")
        super().__init__(search, query_embedder(embedder), name=name, version=version)


@component
class GatedHaystackRetriever(OwnStoreRetriever):
    """A Haystack component that searches the guard's retriever once per query.

    ``guard``: a :class:`~ragbound.detect.Guard` over a :class:`HaystackKnowledge`; ``k``:
    documents returned on ``answer`` (the retriever runs at ``top_k = max(k, guard.k)``);
    ``on_block``: ``"empty"`` or ``"raise"`` (``QueryBlocked``); ``tripwires``: the tripwire
    documents written to the store (:func:`tripwire_documents`), decided by ``tripwire_rule``
    from the same search. ``run`` routes as :class:`~ragbound.adapters.haystack.GateComponent`
    does, with the retriever's own documents. It holds a loaded guard: not serialisable.
    """

    knowledge_class = HaystackKnowledge

    def __init__(
        self,
        guard: Guard,
        k: int = 4,
        *,
        on_block: OnBlock = "empty",
        tripwires: list[Tripwire] | None = None,
        tripwire_rule: TripwireRule | None = None,
    ):
        self._start(guard, k, on_block, tripwires, tripwire_rule)

    def warm_up(self) -> None:
        """Warm the query embedder up (a Haystack component loads its model)."""
        embedder = self.guard.kb.query_embedder()
        if isinstance(embedder, HaystackEmbedder):
            embedder.warm_up()

    def to_dict(self) -> dict[str, Any]:
        """Refused: the component holds a loaded guard (save it with ``guard.save``)."""
        raise InputError(
            "a GatedHaystackRetriever holds a loaded guard and cannot be serialised: save "
            "the calibration with guard.save(folder=...) and build the component in code"
        )

    @routed_outputs
    def run(self, query: str, history: list[ChatMessage] | None = None) -> dict[str, Any]:
        """Decide ``query`` (after ``history``, the chat so far, as
        :class:`~ragbound.adapters.haystack.GateComponent` does); the retriever's documents on
        ``answer`` only, with ``history`` to send the LLM (without the turns found
        forbidden)."""
        decision = self.decide(chat_query(query, history))
        return self._outputs(decision, upstream_history(query, history, decision, self.refused))

    @routed_outputs
    async def run_async(
        self, query: str, history: list[ChatMessage] | None = None
    ) -> dict[str, Any]:
        """:meth:`run` for ``AsyncPipeline``: the decision is made in a worker thread."""
        decision = await self.adecide(chat_query(query, history))
        return self._outputs(decision, upstream_history(query, history, decision, self.refused))

    def _outputs(self, decision: Decision, upstream: list[ChatMessage]) -> dict[str, Any]:
        # each document scored by this search (the one kept is the first search's copy)
        found = [dataclasses.replace(doc, score=score) for doc, score in self._results(decision)]
        return routed(decision, annotated(found, decision), upstream)


def tripwire_documents(tripwires: list[Tripwire]) -> list[Document]:
    """Haystack documents for ``tripwires`` (ids = tripwire ids, ``meta`` flagging each), to
    embed and write to the store beside the knowledge."""
    return [Document(id=t.id, content=t.text, meta=tripwire_metadata(t)) for t in tripwires]
