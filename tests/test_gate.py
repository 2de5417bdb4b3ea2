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
from ragbound.tripwires import TripwireRule
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE
from tests.tripwires.tripwire_texts import UNSAFE

RULE = TripwireRule(k=3, proportion=None, rank=1)


@pytest.fixture(scope="module")
def gate(gated_kb: Path) -> Gate:
    return Gate.load(gated_kb, rule=RULE, context_k=2)


def test_each_action_with_its_evidence(gate: Gate) -> None:
    answer, abstain, reject = gate.decide_many(
        [MORE_IN_KNOWLEDGE[12], OUT_OF_KNOWLEDGE[0], UNSAFE[0]]
    )
    assert (answer.action, abstain.action, reject.action) == ("answer", "abstain", "reject")
    assert not answer.test.out_of_knowledge and answer.test.p_value > answer.test.alpha
    assert abstain.test.out_of_knowledge and abstain.test.p_value <= abstain.test.alpha
    fired = reject.tripwires
    assert fired is not None and fired.forbidden and fired.rule == "rank<=1"
    assert fired.triggers[0].topic == "harm"
    assert "forbidden" in reject.reason and "harm" in reject.reason
    for calm in (answer, abstain):
        assert calm.tripwires is not None and not calm.tripwires.forbidden
        assert calm.tripwires.rule is None


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
        test = decision.test
        assert test.p_value == pytest.approx(verdict.p_value)
        assert test.score == pytest.approx(verdict.score, abs=1e-6)
        assert test.out_of_knowledge == verdict.out_of_knowledge
        assert (test.statistic, test.k, test.n_calibration) == (
            verdict.statistic,
            verdict.k,
            verdict.n_calibration,
        )
        assert decision.tripwires == tripwire
        expected = (
            "reject" if tripwire.forbidden else "abstain" if verdict.out_of_knowledge else "answer"
        )
        assert decision.action == expected
    single = gate.decide(queries[0])  # the one-query path agrees with the batch
    assert single.action == decisions[0].action
    assert single.test.p_value == pytest.approx(decisions[0].test.p_value)


def test_one_embedding_serves_both_searches(gate: Gate, monkeypatch) -> None:
    embedder = gate.guard.kb.embedder
    calls: list[int] = []
    real_encode, real_encode_one = embedder.encode, embedder.encode_one

    def counting_encode(texts, **kwargs):
        calls.append(len(texts))
        return real_encode(texts, **kwargs)

    def counting_encode_one(text):
        calls.append(1)
        return real_encode_one(text)

    monkeypatch.setattr(embedder, "encode", counting_encode)
    monkeypatch.setattr(embedder, "encode_one", counting_encode_one)
    gate.decide_many([IN_KNOWLEDGE[0], UNSAFE[1], OUT_OF_KNOWLEDGE[1]])
    gate.decide(IN_KNOWLEDGE[1])
    assert calls == [3, 1]


def test_the_decision_names_the_artifacts_it_used_and_serialises(gate: Gate) -> None:
    decision = gate.decide(UNSAFE[1])
    assert decision.kb_fingerprint == gate.guard.kb.fingerprint
    assert decision.calibration_id == gate.guard.calibration.manifest.id
    assert decision.tripwire_set == gate.tripwires.set_hash
    again = Decision.model_validate_json(decision.model_dump_json())
    assert again == decision
    fields = json.loads(decision.model_dump_json())
    assert set(fields) == {
        *("query", "action", "cause", "reason", "test", "answerability", "tripwires"),
        *("neighbours", "kb_fingerprint", "calibration_id", "tripwire_set", "conversation"),
    }
    assert fields["test"]["out_of_knowledge"] == decision.test.out_of_knowledge
    assert fields["test"]["neighbours"] == []  # the evidence is the decision's neighbours
    assert fields["tripwires"]["forbidden"] and fields["tripwires"]["triggers"]
    # one word for one idea: reject is only an action, never a test's outcome
    assert "reject" not in fields["test"] and "rejected" not in fields["tripwires"]
    assert decision.tripwires.floor is not None and "floor" in decision.reason


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
    assert np.isfinite(gate.decide(IN_KNOWLEDGE[0]).test.p_value)


def test_decisions_are_the_same_with_spinning_on_and_small_searches_not_held(
    gated_kb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 40: the default (no spinning, small searches on one BLAS thread) against the
    # settings before (this knowledge base's products are below OpenBLAS's own threading)
    from ragbound import blas_threads
    from ragbound.embedders import sentence

    queries = [IN_KNOWLEDGE[0], MORE_IN_KNOWLEDGE[12], OUT_OF_KNOWLEDGE[0], UNSAFE[0]]
    monkeypatch.setattr(sentence, "_SPINNING", {})
    default = Gate.load(gated_kb, rule=RULE, context_k=2)
    now = [default.decide(q).model_dump() for q in queries]  # one at a time, as served alone
    assert default.guard.kb.embedder.runner().spinning is False  # type: ignore[attr-defined]
    monkeypatch.setattr(sentence, "_SPINNING", {"onnx": True})
    monkeypatch.setattr(blas_threads, "SMALL_PRODUCT", 0)
    before = [default.decide(q).model_dump() for q in queries]
    assert default.guard.kb.embedder.runner().spinning is True  # type: ignore[attr-defined]
    assert before == now
