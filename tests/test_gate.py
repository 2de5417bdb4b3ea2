"""Gate: one decision per query from the tripwires and the boundary test, one embedding each."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ragbound.detect import Guard
from ragbound.errors import InputError
from ragbound.gate import Decision, Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.tripwires import TripwireRule, TripwireStore, read_tripwires
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE
from tests.tripwires.tripwire_texts import TRIPWIRES, UNSAFE

RULE = TripwireRule(k=3, proportion=None, rank=1)


@pytest.fixture(scope="module")
def gated_kb(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bees-and-trains knowledge base, calibrated, with four tripwires."""
    target = tmp_path_factory.mktemp("gate") / "kb"
    shutil.copytree(minilm_kb_dir, target)
    kb = KnowledgeBase.load(target)
    Guard.calibrate(kb, IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10], k=4, alpha=0.1).save()
    source = target.parent / "t.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in TRIPWIRES), encoding="utf-8")
    TripwireStore.open(kb).add(read_tripwires(source))
    return target


@pytest.fixture(scope="module")
def gate(gated_kb: Path) -> Gate:
    return Gate.load(gated_kb, rule=RULE, context_k=2)


def test_each_action_with_its_evidence(gate: Gate) -> None:
    answer, abstain, reject = gate.decide_many(
        [MORE_IN_KNOWLEDGE[12], OUT_OF_KNOWLEDGE[0], UNSAFE[0]]
    )
    assert (answer.action, abstain.action, reject.action) == ("answer", "abstain", "reject")
    assert not answer.out_of_knowledge and answer.p_value > answer.alpha
    assert abstain.out_of_knowledge and abstain.p_value <= abstain.alpha
    assert reject.forbidden and reject.rule == "rank<=1" and reject.triggers[0].topic == "harm"
    assert "forbidden" in reject.reason and "harm" in reject.reason
    assert not answer.forbidden and answer.rule is None


def test_an_answer_carries_its_context_in_full(gate: Gate) -> None:
    decision = gate.decide(MORE_IN_KNOWLEDGE[12])
    kb = gate.guard.kb
    assert [c.rank for c in decision.neighbours] == [1, 2]
    first = decision.neighbours[0]
    chunk = next(c for c in kb.chunks if c.id == first.chunk_id)
    assert first.text == chunk.text  # the full chunk, not a preview
    assert decision.neighbours[0].similarity >= decision.neighbours[1].similarity


def test_decisions_agree_with_the_guard_and_the_tripwire_guard(gate: Gate) -> None:
    queries = [*MORE_IN_KNOWLEDGE[10:14], *OUT_OF_KNOWLEDGE[:3], *UNSAFE]
    decisions = gate.decide_many(queries)
    verdicts = gate.guard.check_many(queries)
    tripwires = gate.tripwires.check_many(queries)
    for decision, verdict, tripwire in zip(decisions, verdicts, tripwires, strict=True):
        assert decision.p_value == pytest.approx(verdict.p_value)
        assert decision.score == pytest.approx(verdict.score, abs=1e-6)
        assert decision.forbidden == tripwire.forbidden
    single = gate.decide(queries[0])  # the one-query path agrees with the batch
    assert single.action == decisions[0].action
    assert single.p_value == pytest.approx(decisions[0].p_value)


def test_one_embedding_serves_both_searches(gate: Gate, monkeypatch) -> None:
    kb = gate.guard.kb
    calls: list[int] = []
    real_embed = kb.embed

    def counting_embed(texts, **kwargs):
        calls.append(len(texts))
        return real_embed(texts, **kwargs)

    monkeypatch.setattr(kb, "embed", counting_embed)
    gate.decide_many([IN_KNOWLEDGE[0], UNSAFE[1], OUT_OF_KNOWLEDGE[1]])
    assert calls == [3]


def test_the_decision_names_the_artifacts_it_used_and_serialises(gate: Gate) -> None:
    decision = gate.decide(UNSAFE[1])
    assert decision.kb_fingerprint == gate.guard.kb.fingerprint
    assert decision.calibration_id == gate.guard.calibration.manifest.id
    assert decision.tripwire_set == gate.tripwires.tripwires.manifest.set_hash
    again = Decision.model_validate_json(decision.model_dump_json())
    assert again == decision
    fields = json.loads(decision.model_dump_json())
    assert {"action", "p_value", "reject", "triggers", "neighbours"} <= set(fields)
    assert fields["reject"] == decision.out_of_knowledge
    assert decision.tripwire_floor is not None and "floor" in decision.reason


def test_without_tripwires_nothing_is_rejected(minilm_kb_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "kb"
    shutil.copytree(minilm_kb_dir, target)
    Guard.calibrate(KnowledgeBase.load(target), IN_KNOWLEDGE + MORE_IN_KNOWLEDGE, k=4).save()
    gate = Gate.load(target)
    assert gate.tripwires is None
    decisions = gate.decide_many(UNSAFE)
    assert all(d.action in ("answer", "abstain") and d.tripwire_set is None for d in decisions)


def test_bad_input_is_refused(gate: Gate) -> None:
    with pytest.raises(InputError, match="no queries"):
        gate.decide_many([])
    with pytest.raises(InputError, match="empty"):
        gate.decide("   ")
    with pytest.raises(InputError, match="context_k"):
        Gate(gate.guard, gate.tripwires, context_k=-1)
    assert np.isfinite(gate.decide(IN_KNOWLEDGE[0]).p_value)
