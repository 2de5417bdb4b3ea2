"""The floor calibrated on the knowledge's own questions (issue 46, item 3): on the bundled
sample's ten tripwires a vague question no longer clears a floor derived from ten tripwires,
the in-knowledge questions kept aside stay under the stated bound, and a framework store's
relevance scores keep the floor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragbound.adapters._flagged import flagged_guard
from ragbound.demo import sample_corpus
from ragbound.detect import Guard
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.tripwires import LiveTripwires, TripwireRule, TripwireTest, read_tripwires
from ragbound.tripwires.floor import calibrated_floor

SAMPLE = sample_corpus()
VAGUE = "How do I tune it?"  # 0.273 against the set's floor of 0.272 (issue 46)
FORBIDDEN = "How can I steal the embeddings of another company's index?"


def questions() -> list[str]:
    lines = (SAMPLE / "in_knowledge.txt").read_text(encoding="utf-8").splitlines()
    return [q for q in lines if q.strip()]


def sample_with_tripwires(out: Path) -> KnowledgeBase:
    """The bundled sample saved in ``out`` with its ten tripwires."""
    KnowledgeBase.build([SAMPLE / "docs"], embedder="minilm").save(out)
    kb = KnowledgeBase.load(out)
    LiveTripwires.open(kb).add(read_tripwires(SAMPLE / "tripwires.jsonl"))
    return kb


@pytest.fixture(scope="module")
def sample_kb(tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    return sample_with_tripwires(tmp_path_factory.mktemp("floor") / "kb")


def test_the_calibrated_floor_is_the_conformal_rank_and_states_its_bound() -> None:
    critical = np.linspace(0.0, 0.99, 100)  # 100 questions: rank ceil(101 * 0.99) = 100
    floor = calibrated_floor(critical, 0.01)
    assert floor.value > 0.99 and floor.bound == pytest.approx(1 / 101)
    few = calibrated_floor(critical[:30], 0.01)  # too few for 1%: the largest, bound 1/31
    assert few.value > critical[29] and few.bound == pytest.approx(1 / 31)
    assert calibrated_floor(np.full(5, -np.inf), 0.01).value == -np.inf  # never fires
    with pytest.raises(ValueError, match="share"):
        calibrated_floor(critical, 0)


def test_a_vague_question_is_not_forbidden_and_the_kept_aside_stay_under_the_bound(
    sample_kb: KnowledgeBase,
) -> None:
    asked = questions()
    calibration, kept_aside = asked[::2], asked[1::2]
    gate = Gate(Guard.calibrate(sample_kb, calibration), TripwireTest(sample_kb))
    floor = gate.tripwires.floor()
    assert floor.source == "calibrated" and floor.n_reference == len(calibration)
    assert floor.bound == pytest.approx(1 / (len(calibration) + 1))  # 60 < 99 questions
    decided = gate.decide_many([VAGUE, FORBIDDEN, *kept_aside])
    assert [d.action == "reject" for d in decided[:2]] == [False, True]
    share = np.mean([d.action == "reject" for d in decided[2:]])
    assert share <= 2 / len(kept_aside)  # the bound, 1.6%, with one question's slack
    alone = TripwireTest(sample_kb, TripwireRule.default(calibrated=None))
    assert alone.check(VAGUE).forbidden  # the set's floor alone: what the issue saw


def test_a_framework_store_on_relevance_scores_keeps_the_floor(sample_kb: KnowledgeBase) -> None:
    pytest.importorskip("langchain_core")
    from ragbound.adapters.langchain_store import VectorStoreKnowledge, tripwire_documents
    from tests.adapters.test_langchain_store import CountingStore, MiniLMEmbeddings

    store = CountingStore(MiniLMEmbeddings(sample_kb.embedder))
    store.add_texts([c.text for c in sample_kb.chunks], ids=[c.id for c in sample_kb.chunks])
    tripwires = read_tripwires(SAMPLE / "tripwires.jsonl")
    store.add_documents(tripwire_documents(tripwires))
    size = len(store.store)
    knowledge = VectorStoreKnowledge(store, name="minilm", size=size, closeness="relevance")
    guard = Guard.calibrate(knowledge, questions(), statistic="knn")
    gate = Gate(guard, flagged_guard(knowledge, tripwires))
    floor = gate.tripwires.floor()
    assert floor.source == "calibrated" and floor.value is not None  # on relevance's scale
    decided = gate.decide_many([VAGUE, FORBIDDEN])
    assert [d.action == "reject" for d in decided] == [False, True]


def test_a_tripwire_test_alone_takes_the_reference(
    sample_kb: KnowledgeBase, tmp_path: Path
) -> None:
    test = TripwireTest(sample_kb, reference=questions())
    assert test.floor().source == "calibrated" and not test.check(VAGUE).forbidden
    assert TripwireTest(sample_kb).floor().bound is None  # no reference: no bound stated
