"""A retriever that is not a ragbound folder stands in for one: the guard, the gate, the
tripwire guard and the learned score read it through the Knowledge protocol alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragbound.detect import Guard
from ragbound.errors import IncompatibleArtifactError, InputError
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.protocol import Knowledge
from ragbound.knowledge.retriever import RetrieverKnowledge
from ragbound.stores import Hits, SearchInfo
from ragbound.tripwires import LiveTripwires, TripwireRule, TripwireTest
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE
from tests.tripwires.tripwire_texts import UNSAFE, tripwired_copy

CALIBRATION = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10]
CHECKED = MORE_IN_KNOWLEDGE[10:] + OUT_OF_KNOWLEDGE + UNSAFE


class CosineDistanceIndex:
    """The kind of retriever a user writes around their own index: it keeps its own copy of
    the vectors, its engine speaks cosine distance, and it hands back similarity 1 - d."""

    query_kind = "vector"
    similarity = "cosine"

    def __init__(self, vectors: np.ndarray):
        self._vectors = np.array(vectors, dtype=np.float32)

    @property
    def dimension(self) -> int:
        return self._vectors.shape[1]

    def __len__(self) -> int:
        return len(self._vectors)

    def search(self, queries: np.ndarray, k: int) -> Hits:
        distances = 1.0 - np.asarray(queries, dtype=np.float32) @ self._vectors.T
        order = np.argsort(distances, axis=1, kind="stable")[:, :k]
        return Hits(1.0 - np.take_along_axis(distances, order, axis=1), order.astype(np.int64))

    def describe(self) -> SearchInfo:
        return SearchInfo(backend="users-index", exact=True, similarity="cosine")


@pytest.fixture(scope="module")
def kb(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    """The bees-and-trains folder, with four tripwires saved in it."""
    return tripwired_copy(minilm_kb_dir, tmp_path_factory.mktemp("retriever") / "kb")


@pytest.fixture(scope="module")
def theirs(kb: KnowledgeBase) -> RetrieverKnowledge:
    """The same chunks behind the user's own index, queries embedded by a plain function."""
    return RetrieverKnowledge(
        CosineDistanceIndex(kb.vectors),
        kb.chunks,
        embedder=lambda texts: kb.embedder.encode(texts),
        name=kb.embedder_name,
    )


def test_both_are_knowledge(kb: KnowledgeBase, theirs: RetrieverKnowledge) -> None:
    assert isinstance(kb, Knowledge) and isinstance(theirs, Knowledge)
    assert theirs.fingerprint != kb.fingerprint  # another search, another fingerprint
    assert theirs.corpus_hash == kb.corpus_hash


def test_the_guard_gives_the_folders_p_values(kb: KnowledgeBase, theirs: RetrieverKnowledge):
    ours = Guard.calibrate(kb, CALIBRATION, k=4, alpha=0.1)
    guard = Guard.calibrate(theirs, CALIBRATION, k=4, alpha=0.1)
    assert guard.calibration.manifest.search.backend == "users-index"
    np.testing.assert_allclose(
        guard.calibration.similarities, ours.calibration.similarities, atol=1e-6
    )
    mine, yours = ours.check_many(CHECKED), guard.check_many(CHECKED)
    assert [v.p_value for v in yours] == pytest.approx([v.p_value for v in mine], abs=1e-9)
    assert [v.out_of_knowledge for v in yours] == [v.out_of_knowledge for v in mine]
    assert any(v.out_of_knowledge for v in yours[-len(OUT_OF_KNOWLEDGE) :])
    assert yours[0].neighbours[0].chunk_id == mine[0].neighbours[0].chunk_id


def test_the_gate_and_tripwires_decide_as_the_folders(
    kb: KnowledgeBase, theirs: RetrieverKnowledge
) -> None:
    rule = TripwireRule(k=3, proportion=None, rank=1)
    folder = LiveTripwires.open(kb)
    ours = Gate(Guard.calibrate(kb, CALIBRATION, k=4, alpha=0.1), TripwireTest(kb, rule))
    guard = Guard.calibrate(theirs, CALIBRATION, k=4, alpha=0.1)
    gate = Gate(guard, TripwireTest(theirs, rule, tripwires=folder))
    mine, yours = ours.decide_many(CHECKED), gate.decide_many(CHECKED)
    assert [d.action for d in yours] == [d.action for d in mine]
    assert {d.action for d in yours} == {"answer", "abstain", "reject"}
    assert [d.kb_fingerprint for d in yours] == [theirs.fingerprint] * len(CHECKED)


def test_the_learned_score_runs_on_the_retriever(kb: KnowledgeBase, theirs: RetrieverKnowledge):
    queries = CALIBRATION + MORE_IN_KNOWLEDGE[10:]
    ours = Guard.calibrate(kb, queries, statistic="combined", alpha=0.1)
    guard = Guard.calibrate(theirs, queries, statistic="combined", alpha=0.1)
    mine, yours = ours.score(OUT_OF_KNOWLEDGE), guard.score(OUT_OF_KNOWLEDGE)
    np.testing.assert_allclose(yours.scores, mine.scores, atol=1e-6)
    np.testing.assert_allclose(yours.p_values, mine.p_values)


def test_what_a_retriever_cannot_do_is_refused(
    kb: KnowledgeBase, theirs: RetrieverKnowledge
) -> None:
    guard = Guard.calibrate(theirs, CALIBRATION, k=4)
    with pytest.raises(IncompatibleArtifactError, match="rows are chunks"):
        Guard.calibrate(theirs, CALIBRATION, k=4, granularity="sentence")
    with pytest.raises(InputError, match="no folder"):
        guard.save()
    with pytest.raises(InputError, match="tripwires= of a folder"):
        TripwireTest(theirs)
    others = RetrieverKnowledge(
        CosineDistanceIndex(kb.vectors[:-1]), kb.chunks[:-1], embedder=kb.embedder, name="x"
    )
    with pytest.raises(IncompatibleArtifactError):
        Guard(others, guard.calibration)  # calibrated against other rows
    with pytest.raises(InputError, match="the knowledge by x"):
        TripwireTest(others, tripwires=LiveTripwires.open(kb))
    with pytest.raises(InputError, match="row i of the retriever must be chunk i"):
        RetrieverKnowledge(CosineDistanceIndex(kb.vectors), kb.chunks[:3], embedder=None, name="x")
    with pytest.raises(InputError, match="needs the embedder"):
        RetrieverKnowledge(CosineDistanceIndex(kb.vectors), kb.chunks, embedder=None, name="x")


def test_texts_become_chunks_of_their_documents() -> None:
    from ragbound.stores import ExactStore

    store = ExactStore(np.eye(3, dtype=np.float32))
    knowledge = RetrieverKnowledge.of_texts(
        store,
        ["red", "green", "blue"],
        embedder=lambda texts: np.eye(3)[: len(texts)],
        name="one-hot",
        doc_ids=["a", "a", "b"],
    )
    assert [(c.doc_id, c.position) for c in knowledge.chunks] == [("a", 0), ("a", 1), ("b", 0)]
    assert knowledge.search(["anything"], 1).indices.tolist() == [[0]]
    with pytest.raises(InputError, match="returned shape"):
        RetrieverKnowledge.of_texts(
            store, ["r", "g", "b"], embedder=lambda texts: np.ones(3), name="broken"
        ).search(["q"], 1)
