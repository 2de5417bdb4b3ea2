"""Haystack, natively: the guard on a real InMemoryEmbeddingRetriever over the bees-and-trains
chunks (embedded by ragbound's bundled MiniLM), against ragbound's own folder."""

import asyncio
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

pytest.importorskip("haystack")

from haystack import Document, Pipeline, component
from haystack.components.builders import PromptBuilder
from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

from ragbound.adapters._common import QueryBlocked
from ragbound.adapters.haystack_retriever import (
    GatedHaystackRetriever,
    HaystackKnowledge,
    RagboundDocumentEmbedder,
    RagboundTextEmbedder,
)
from ragbound.detect import Guard
from ragbound.errors import IncompatibleArtifactError, InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.protocol import Knowledge
from tests.adapters.native_texts import ABSTAINED, ANSWERED, CALIBRATION, CHECKED


@component
class CountingEmbedder(RagboundTextEmbedder):
    """The adapter's Haystack text embedder over the folder's MiniLM, counting its runs."""

    runs = 0

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, Any]:
        self.runs += 1
        return RagboundTextEmbedder.run(self, text)


@component
class DoublingEmbedder(RagboundTextEmbedder):
    """MiniLM's vectors times two: a dot product of them is not the cosine."""

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, Any]:
        return {"embedding": [2.0 * x for x in RagboundTextEmbedder.run(self, text)["embedding"]]}


@component
class CountingRetriever(InMemoryEmbeddingRetriever):
    """The real in-memory embedding retriever, recording the top_k of each run."""

    top_ks: ClassVar[list[int | None]] = []

    @component.output_types(documents=list[Document])
    def run(
        self,
        query_embedding: list[float],
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        self.top_ks.append(top_k)
        return InMemoryEmbeddingRetriever.run(
            self, query_embedding, filters, top_k, scale_score, return_embedding
        )


@pytest.fixture(scope="module")
def embedder(kb: KnowledgeBase) -> CountingEmbedder:
    return CountingEmbedder(kb.embedder)


def store_of(kb: KnowledgeBase, function: str) -> InMemoryDocumentStore:
    """The folder's chunks, embedded by its MiniLM, in a fresh in-memory store."""
    store = InMemoryDocumentStore(embedding_similarity_function=function, shared=False)
    documents = [Document(id=c.id, content=c.text, meta={"n": i}) for i, c in enumerate(kb.chunks)]
    store.write_documents(RagboundDocumentEmbedder(kb.embedder).run(documents)["documents"])
    return store


@pytest.fixture(scope="module")
def cosine_store(kb: KnowledgeBase) -> InMemoryDocumentStore:
    return store_of(kb, "cosine")


@pytest.fixture(scope="module")
def dot_store(kb: KnowledgeBase) -> InMemoryDocumentStore:
    return store_of(kb, "dot_product")


def knowledge_of(
    store: InMemoryDocumentStore, embedder: Any, *, scale: bool = False, **options: Any
) -> HaystackKnowledge:
    retriever = CountingRetriever(store, scale_score=scale)
    size = store.count_documents()
    return HaystackKnowledge(retriever, embedder, name="minilm", size=size, **options)


def p_values(guard: Guard) -> list[float]:
    return [v.p_value for v in guard.check_many(CHECKED)]


@pytest.mark.parametrize("statistic", ["mss", "knn", "fisher", "simes", "avgknn", "energy"])
def test_cosine_scores_give_the_folders_p_values(
    kb: KnowledgeBase, cosine_store: InMemoryDocumentStore, embedder: Any, statistic: str
) -> None:
    knowledge = knowledge_of(cosine_store, embedder)
    assert isinstance(knowledge, Knowledge) and knowledge.store.closeness == "cosine"
    ours = Guard.calibrate(kb, CALIBRATION, k=4, alpha=0.1, statistic=statistic)
    theirs = Guard.calibrate(knowledge, CALIBRATION, k=4, alpha=0.1, statistic=statistic)
    np.testing.assert_allclose(
        theirs.calibration.similarities, ours.calibration.similarities, atol=1e-6
    )
    assert p_values(theirs) == pytest.approx(p_values(ours), abs=1e-9)
    yours, mine = theirs.check_many(CHECKED), ours.check_many(CHECKED)
    assert [v.neighbours[0].text for v in yours] == [v.neighbours[0].text for v in mine]


def test_a_dot_product_store_gives_the_order_unless_declared_cosine(
    kb: KnowledgeBase, dot_store: InMemoryDocumentStore, embedder: Any
) -> None:
    ranked = knowledge_of(dot_store, embedder)
    assert ranked.store.closeness == "similarity"
    with pytest.raises(InputError, match=r"statistic avgknn is refused.*order"):
        Guard.calibrate(ranked, CALIBRATION, k=4, statistic="avgknn")
    ours = Guard.calibrate(kb, CALIBRATION, k=4, alpha=0.1, statistic="avgknn")
    unit = knowledge_of(dot_store, embedder, closeness="cosine")  # MiniLM's vectors have norm 1
    theirs = Guard.calibrate(unit, CALIBRATION, k=4, alpha=0.1, statistic="avgknn")
    assert p_values(theirs) == pytest.approx(p_values(ours), abs=1e-9)
    doubled = knowledge_of(dot_store, DoublingEmbedder(kb.embedder), closeness="cosine")
    with pytest.raises(InputError, match=r"norm is 2\.0000.*closeness='similarity'"):
        Guard.calibrate(doubled, CALIBRATION, k=4)


@pytest.mark.parametrize("function", ["cosine", "dot_product"])
def test_scaled_scores_keep_the_rank_statistics_only(
    kb: KnowledgeBase, embedder: Any, function: str
) -> None:
    store = store_of(kb, function)
    scaled = knowledge_of(store, embedder, scale=True)
    assert scaled.store.closeness == "relevance"
    for statistic in ("mss", "fisher"):
        ours = Guard.calibrate(kb, CALIBRATION, k=4, alpha=0.1, statistic=statistic)
        theirs = Guard.calibrate(scaled, CALIBRATION, k=4, alpha=0.1, statistic=statistic)
        assert p_values(theirs) == pytest.approx(p_values(ours), abs=1e-9)
    with pytest.raises(InputError, match=r"statistic energy is refused.*order"):
        Guard.calibrate(scaled, CALIBRATION, k=4, statistic="energy")
    for declared in ("cosine", "similarity"):
        with pytest.raises(InputError, match=r"scale_score=True.*closeness='relevance'"):
            knowledge_of(store, embedder, scale=True, closeness=declared)


def test_one_embedding_and_one_search_per_query_at_the_needed_depth(
    cosine_store: InMemoryDocumentStore, embedder: CountingEmbedder
) -> None:
    knowledge = knowledge_of(cosine_store, embedder)
    guard = Guard.calibrate(knowledge, CALIBRATION, k=4, alpha=0.1)
    for k, depth in ((6, 6), (2, 4)):
        guarded = GatedHaystackRetriever(guard, k=k)
        CountingRetriever.top_ks.clear()
        runs = embedder.runs
        guarded.run(ANSWERED)
        guarded.run(ABSTAINED)
        assert (CountingRetriever.top_ks, embedder.runs - runs) == ([depth, depth], 2)


def test_answer_returns_the_stores_documents_and_abstain_none(
    cosine_store: InMemoryDocumentStore, embedder: Any
) -> None:
    knowledge = knowledge_of(cosine_store, embedder)
    guarded = GatedHaystackRetriever(Guard.calibrate(knowledge, CALIBRATION, k=4), k=3)
    out = guarded.run(ANSWERED)
    decision = out["decision"]
    assert decision.action == "answer" and out["query"] == ANSWERED and "blocked" not in out
    vector = embedder.run(ANSWERED)["embedding"]
    plain = InMemoryEmbeddingRetriever(cosine_store, top_k=3).run(query_embedding=vector)
    assert [(d.id, d.meta["n"]) for d in out["documents"]] == [
        (d.id, d.meta["n"]) for d in plain["documents"]
    ]
    assert [d.score for d in out["documents"]] == pytest.approx(
        [d.score for d in plain["documents"]], rel=1e-6
    )
    assert out["documents"][0].meta["ragbound"]["test"]["p_value"] == decision.test.p_value
    assert all("ragbound" not in d.meta for d in cosine_store.filter_documents())
    blocked = guarded.run(ABSTAINED)
    assert blocked["documents"] == [] and "query" not in blocked
    assert blocked["blocked"].action == "abstain" and guarded.last_decision is blocked["decision"]
    with pytest.raises(QueryBlocked, match="abstain"):
        GatedHaystackRetriever(guarded.guard, on_block="raise").run(ABSTAINED)
    again = asyncio.run(guarded.run_async(ANSWERED))
    assert [d.id for d in again["documents"]] == [d.id for d in out["documents"]]


def test_in_a_pipeline_only_an_answer_reaches_the_prompt(
    cosine_store: InMemoryDocumentStore, embedder: Any
) -> None:
    guard = Guard.calibrate(knowledge_of(cosine_store, embedder), CALIBRATION, k=4, alpha=0.1)
    pipe = Pipeline()
    pipe.add_component("guarded", GatedHaystackRetriever(guard, k=2))
    template = "{% for d in documents %}{{ d.content }}\n{% endfor %}Q: {{ query }}"
    pipe.add_component("prompt", PromptBuilder(template, required_variables=["query"]))
    pipe.connect("guarded.documents", "prompt.documents")
    pipe.connect("guarded.query", "prompt.query")
    answered = pipe.run({"guarded": {"query": ANSWERED}}, include_outputs_from={"guarded"})
    texts = [d.content for d in answered["guarded"]["documents"]]
    assert len(texts) == 2 and answered["prompt"]["prompt"].startswith(texts[0])
    refused = pipe.run({"guarded": {"query": ABSTAINED}})
    assert "prompt" not in refused and refused["guarded"]["blocked"].action == "abstain"
    with pytest.raises(InputError, match="cannot be serialised"):
        pipe.dumps()


def test_the_calibration_saves_to_a_folder_and_loads_against_the_retriever(
    kb: KnowledgeBase,
    cosine_store: InMemoryDocumentStore,
    dot_store: InMemoryDocumentStore,
    embedder: Any,
    tmp_path: Path,
) -> None:
    folder = tmp_path / "calibration-of-my-retriever"
    guard = Guard.calibrate(knowledge_of(cosine_store, embedder), CALIBRATION, k=4, alpha=0.1)
    guard.save(folder=folder)
    again = Guard.load_for(knowledge_of(cosine_store, embedder), folder)
    assert p_values(again) == p_values(guard)
    for other in (
        knowledge_of(dot_store, embedder),  # another score mode
        knowledge_of(cosine_store, embedder, version="2"),
        HaystackKnowledge(InMemoryEmbeddingRetriever(cosine_store), embedder),  # another name
    ):
        with pytest.raises(IncompatibleArtifactError):
            Guard.load_for(other, folder)
    with pytest.raises(InputError, match="HaystackKnowledge"):
        GatedHaystackRetriever(Guard.calibrate(kb, CALIBRATION, k=4))


def test_what_the_retriever_cannot_give_is_refused(
    cosine_store: InMemoryDocumentStore, embedder: Any
) -> None:
    size = cosine_store.count_documents()
    with pytest.raises(InputError, match=rf"returned {size} documents for k={size + 1}"):
        Guard.calibrate(knowledge_of(cosine_store, embedder), CALIBRATION, k=size + 1)
    with pytest.raises(InputError, match=r"wrong way.*closeness='similarity'"):
        Guard.calibrate(
            knowledge_of(cosine_store, embedder, closeness="distance"), CALIBRATION, k=4
        )
    with pytest.raises(IncompatibleArtifactError, match="rows are its documents"):
        Guard.calibrate(knowledge_of(cosine_store, embedder), CALIBRATION, granularity="sentence")
    with pytest.raises(InputError, match="closeness must be one of"):
        knowledge_of(cosine_store, embedder, closeness="rank")
    with pytest.raises(InputError, match="not a Haystack retriever"):
        HaystackKnowledge(cosine_store, embedder, name="minilm")
    guard = Guard.calibrate(knowledge_of(cosine_store, embedder), CALIBRATION, k=4)
    with pytest.raises(InputError, match="k must be a positive integer"):
        GatedHaystackRetriever(guard, k=0)
    assert len(GatedHaystackRetriever(guard, k=size + 1).run(ANSWERED)["documents"]) == size
    unsized = HaystackKnowledge(InMemoryEmbeddingRetriever(cosine_store), embedder, name="m")
    deeper = GatedHaystackRetriever(Guard.calibrate(unsized, CALIBRATION, k=4), k=size + 1)
    with pytest.raises(InputError, match=rf"returned {size} documents for k={size + 1}"):
        deeper.run(ANSWERED)
