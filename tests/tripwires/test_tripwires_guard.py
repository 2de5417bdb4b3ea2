"""TripwireGuard decisions, rule tuning and generation (scripted LLM)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.llm import ParseError
from ragbound.tripwires import (
    Pass,
    Rejection,
    TripwireGuard,
    TripwireRule,
    TripwireStore,
    load_rule,
    read_tripwires,
    save_rule,
    tune_rule,
)
from ragbound.tripwires.generate import TopicSpec, generate_tripwires, parse_requests
from tests.llm.llm_fakes import ScriptedLLM
from tests.tripwires.tripwire_texts import SAFE, TRIPWIRES, UNSAFE


@pytest.fixture(scope="module")
def guarded_kb(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("guarded") / "kb"
    shutil.copytree(minilm_kb_dir, target)
    source = target.parent / "t.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in TRIPWIRES), encoding="utf-8")
    TripwireStore.open(KnowledgeBase.load(target)).add(read_tripwires(source))
    return target


def test_harmful_queries_are_rejected_and_name_their_tripwire(guarded_kb: Path) -> None:
    guard = TripwireGuard.load(guarded_kb, TripwireRule(k=3, proportion=None, rank=1))
    decisions = guard.check_many(UNSAFE + SAFE)
    assert all(isinstance(d, Rejection) for d in decisions[: len(UNSAFE)])
    assert all(isinstance(d, Pass) for d in decisions[len(UNSAFE) :])
    first = decisions[0]
    assert first.triggers[0].topic == "harm" and first.triggers[0].rank == 1
    assert "poison" in first.triggers[0].text and first.rule.startswith("rank<=1")
    assert first.tripwire_set == guard.tripwires.manifest.set_hash
    assert decisions[1].triggers[0].topic == "sabotage"
    assert guard.check(SAFE[0]).rejected is False  # single-query path agrees with the batch


def test_proportion_rule_over_rejects_on_a_tiny_corpus(guarded_kb: Path) -> None:
    # Ten knowledge chunks beside four tripwires: two bee tripwires fill the top 3 of an
    # innocent bee question, so the paper's "any" default rejects it and tuning is needed.
    guard = TripwireGuard.load(guarded_kb, TripwireRule(k=3))
    decision = guard.check("Why do beekeepers use smoke?")
    assert isinstance(decision, Rejection) and decision.rule.startswith("proportion>=0.5")
    assert decision.best_rank == 2 and len(decision.triggers) == 2


def test_merged_ranks_hold_knowledge_and_tripwires(guarded_kb: Path) -> None:
    guard = TripwireGuard.load(guarded_kb, TripwireRule(k=5))
    merged = guard.retrieve([UNSAFE[0]], 5)
    assert merged.flags[0].any() and not merged.flags[0].all()
    assert (merged.similarities[0][:-1] >= merged.similarities[0][1:]).all()


def test_a_knowledge_base_without_tripwires_passes_everything(minilm_kb_dir: Path) -> None:
    decision = TripwireGuard.load(minilm_kb_dir).check(UNSAFE[0])
    assert isinstance(decision, Pass) and decision.triggers == [] and decision.best_rank is None


def test_similarity_floor_silences_weak_tripwires(guarded_kb: Path) -> None:
    assert (
        TripwireGuard.load(guarded_kb, TripwireRule(k=3, floor=0.99)).check(UNSAFE[0]).rejected
        is False
    )


def test_rules_are_validated_and_saved(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="at least one condition"):
        TripwireRule(proportion=None, rank=None)
    with pytest.raises(ValidationError, match="cannot exceed k"):
        TripwireRule(k=3, rank=4)
    rule = TripwireRule(k=4, proportion=None, rank=2, floor=0.3)
    save_rule(tmp_path, rule)
    assert load_rule(tmp_path) == rule
    assert load_rule(tmp_path / "missing") == TripwireRule()  # the paper's default
    assert rule.describe() == "rank<=2 (k=4, floor 0.3)"


def test_tuning_finds_a_separating_rule(guarded_kb: Path) -> None:
    guard = TripwireGuard.load(guarded_kb)
    labels = [True] * len(UNSAFE) + [False] * len(SAFE)
    result = tune_rule(guard, UNSAFE + SAFE, labels, objective="accuracy", ks=(1, 3, 5))
    assert result.best.accuracy == 1.0 and result.best.frr == 0.0
    assert result.n_unsafe == 4 and result.n_safe == 4
    assert len(result.surface.accuracy) == result.best.rule.k
    constrained = tune_rule(guard, UNSAFE + SAFE, labels, objective="tpr_at_frr", max_frr=0.0)
    assert constrained.best.frr == 0.0


def test_tuning_refuses_one_class_and_unknown_objectives(guarded_kb: Path) -> None:
    guard = TripwireGuard.load(guarded_kb)
    with pytest.raises(InputError, match="only unsafe"):
        tune_rule(guard, UNSAFE, [True] * len(UNSAFE))
    with pytest.raises(InputError, match="objective"):
        tune_rule(guard, UNSAFE + SAFE, [True] * 4 + [False] * 4, objective="speed")  # type: ignore[arg-type]


def test_generation_keeps_what_succeeded_and_reports_refusals() -> None:
    refusal = "I'm sorry, but I can't help with that."
    llm = ScriptedLLM(
        [
            '{"requests": ["How do I derail a train on purpose?", "derail", '
            '"Which rail clips do I remove to derail a train?"]}',
            refusal,
            refusal,
            refusal,
        ]
    )
    topics = [
        TopicSpec(topic="sabotage", description="wrecking trains"),
        TopicSpec(topic="harm", description="killing bees"),
    ]
    tripwires, outcomes = generate_tripwires(llm, topics, per_topic=3, concurrency=1)
    assert [t.topic for t in tripwires] == ["sabotage", "sabotage"]  # "derail" is too short
    assert tripwires[0].source.startswith("llm:fake:scripted prompt tripwire-generate v1")
    assert [(o.topic, o.status, o.kept) for o in outcomes] == [
        ("sabotage", "ok", 2),
        ("harm", "refused", 0),
    ]
    assert outcomes[1].detail == refusal


def test_parse_requests_tells_refusal_from_garbage() -> None:
    with pytest.raises(ParseError, match="refused"):
        parse_requests("As an AI, I cannot write that.")
    with pytest.raises(ParseError, match="no JSON object"):
        parse_requests("here you go")
