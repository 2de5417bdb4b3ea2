"""TripwireTest verdicts, rule tuning and generation (scripted LLM)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.llm import ParseError
from ragbound.tripwires import (
    LiveTripwires,
    TripwireRule,
    TripwireTest,
    TripwireVerdict,
    load_rule,
    read_tripwires,
    save_rule,
    tune_rule,
)
from ragbound.tripwires.generate import TopicSpec, generate_tripwires, parse_requests
from ragbound.tripwires.guard import DEFAULT_FLOOR_QUANTILE
from tests.llm.llm_fakes import ScriptedLLM
from tests.tripwires.tripwire_texts import OFF_TOPIC, SAFE, UNSAFE, write_tripwire_file


@pytest.fixture(scope="module")
def guarded_kb(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("guarded") / "kb"
    shutil.copytree(minilm_kb_dir, target)
    source = target.parent / "t.jsonl"
    write_tripwire_file(source)
    LiveTripwires.open(KnowledgeBase.load(target)).add(read_tripwires(source))
    return target


def test_harmful_queries_are_forbidden_and_name_their_tripwire(guarded_kb: Path) -> None:
    guard = TripwireTest.load(guarded_kb, TripwireRule(k=3, proportion=None, rank=1))
    decisions = guard.check_many(UNSAFE + SAFE)
    assert all(d.forbidden and d.rule for d in decisions[: len(UNSAFE)])
    assert all(not d.forbidden and d.rule is None for d in decisions[len(UNSAFE) :])
    first = decisions[0]
    assert first.triggers[0].topic == "harm" and first.triggers[0].rank == 1
    assert "poison" in first.triggers[0].text and first.rule.startswith("rank<=1")
    assert first.tripwire_set == guard.tripwires.manifest.set_hash
    assert decisions[1].triggers[0].topic == "sabotage"
    assert guard.check(SAFE[0]).forbidden is False  # single-query path agrees with the batch


def test_proportion_rule_forbids_too_much_on_a_tiny_corpus(guarded_kb: Path) -> None:
    # Ten knowledge chunks beside four tripwires: two bee tripwires fill the top 3 of an
    # innocent bee question, so the paper's "any" default forbids it and tuning is needed.
    guard = TripwireTest.load(guarded_kb, TripwireRule(k=3))
    decision = guard.check("Why do beekeepers use smoke?")
    assert decision.forbidden and decision.rule.startswith("proportion>=0.5")
    assert decision.best_rank == 2 and len(decision.triggers) == 2


def test_merged_ranks_hold_knowledge_and_tripwires(guarded_kb: Path) -> None:
    guard = TripwireTest.load(guarded_kb, TripwireRule(k=5))
    merged = guard.retrieve([UNSAFE[0]], 5)
    assert merged.flags[0].any() and not merged.flags[0].all()
    assert (merged.similarities[0][:-1] >= merged.similarities[0][1:]).all()


def test_a_knowledge_base_without_tripwires_passes_everything(minilm_kb_dir: Path) -> None:
    decision = TripwireTest.load(minilm_kb_dir).check(UNSAFE[0])
    assert not decision.forbidden and decision.triggers == [] and decision.best_rank is None


def test_the_saved_tripwires_of_a_folder_with_its_rule_or_none(
    guarded_kb: Path, minilm_kb_dir: Path, corpus_dir: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "kb"
    shutil.copytree(guarded_kb, folder)
    save_rule(folder, TripwireRule(k=3, proportion=None, rank=1))
    saved = TripwireTest.saved(KnowledgeBase.load(folder))
    assert saved is not None and saved.rule.k == 3 and len(saved.tripwires) == 4
    assert saved.set_hash == saved.tripwires.manifest.set_hash and not saved.reads_search
    given = TripwireTest.saved(KnowledgeBase.load(folder), TripwireRule(k=5))
    assert given is not None and given.rule.k == 5
    assert TripwireTest.saved(KnowledgeBase.load(minilm_kb_dir)) is None  # none saved
    KnowledgeBase.build([corpus_dir], embedder="bm25").save(tmp_path / "bm25")
    assert TripwireTest.saved(KnowledgeBase.load(tmp_path / "bm25")) is None


def test_similarity_floor_silences_weak_tripwires(guarded_kb: Path) -> None:
    assert (
        TripwireTest.load(guarded_kb, TripwireRule(k=3, floor=0.99)).check(UNSAFE[0]).forbidden
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
    assert load_rule(tmp_path / "missing") == TripwireRule.default()  # no tuned rule saved
    assert rule.describe() == "rank<=2 (k=4, floor 0.3)"
    default = TripwireRule.default()
    save_rule(tmp_path, default)
    assert load_rule(tmp_path) == default and default.floor_quantile == DEFAULT_FLOOR_QUANTILE
    assert default.describe() == (
        "proportion>=0.5 or rank<=1 (k=5, set floor q0.15, in-knowledge forbidden <= 1%)"
    )
    assert TripwireRule(combine="all").describe() == "proportion>=0.5 and rank<=1 (k=5)"
    with pytest.raises(ValidationError, match="floor_quantile"):
        TripwireRule(floor_quantile=1.5)


def test_rules_by_name() -> None:
    paper = TripwireRule.named("paper")
    assert paper == TripwireRule.paper() == TripwireRule()  # the field defaults are the paper's
    assert (paper.k, paper.proportion, paper.rank, paper.floor, paper.floor_quantile) == (
        5,
        0.5,
        1,
        None,
        None,
    )
    default = TripwireRule.named("default")
    floors = {"floor_quantile", "calibrated"}
    assert default.model_dump(exclude=floors) == paper.model_dump(exclude=floors)
    assert TripwireRule.default(k=3).k == 3
    with pytest.raises(InputError, match="unknown tripwire rule 'lenient': use default or paper"):
        TripwireRule.named("lenient")


def test_the_default_passes_an_off_topic_question_the_paper_rule_calls_forbidden(
    guarded_kb: Path,
) -> None:
    # Ten bee-and-train chunks and four tripwires: bread is in neither, so its top 5 holds
    # weak tripwires and the paper's rule forbids it; none is as close as the tripwires are to
    # each other, so the default does not count them.
    paper = TripwireTest.load(guarded_kb, TripwireRule.paper())
    default = TripwireTest.load(guarded_kb)
    assert default.rule == TripwireRule.default()
    assert paper.check(OFF_TOPIC).forbidden is True
    assert default.check(OFF_TOPIC).forbidden is False
    decisions = default.check_many(UNSAFE + SAFE + [OFF_TOPIC])
    assert [d.forbidden for d in decisions] == [True] * len(UNSAFE) + [False] * (len(SAFE) + 1)


def test_the_decision_explains_its_floor(guarded_kb: Path) -> None:
    guard = TripwireTest.load(guarded_kb)
    decision = guard.check(UNSAFE[0])
    floor = decision.floor
    vectors = guard.tripwires.vectors.astype(np.float64)
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    # q0.15 of four nearest-other similarities: the lowest (floor(0.15 * 3) = 0)
    assert floor.value == pytest.approx(sims.max(axis=1).min())
    assert (floor.source, floor.quantile, floor.n_tripwires) == ("derived", 0.15, 4)
    assert floor.tripwire_set == decision.tripwire_set == guard.tripwires.manifest.set_hash
    assert all(t.similarity >= floor.value for t in decision.triggers)
    assert "q0.15 of the nearest-other similarities" in floor.describe()
    assert TripwireVerdict.model_validate_json(decision.model_dump_json()) == decision
    fixed = TripwireTest.load(guarded_kb, TripwireRule(floor=0.3)).check(UNSAFE[0]).floor
    assert (fixed.value, fixed.source, fixed.quantile) == (0.3, "fixed", None)
    assert TripwireTest.load(guarded_kb, TripwireRule.paper()).floor().source == "none"


def test_a_forbidden_verdict_names_its_rule(guarded_kb: Path) -> None:
    guard = TripwireTest.load(guarded_kb, TripwireRule(k=3, proportion=None, rank=1))
    for verdict in guard.check_many([UNSAFE[0], SAFE[0]]):
        saved = json.loads(verdict.model_dump_json())
        assert TripwireVerdict.model_validate(saved) == verdict
    assert saved["forbidden"] is False and saved["rule"] is None
    with pytest.raises(ValidationError, match="names its rule"):
        TripwireVerdict.model_validate({**saved, "forbidden": True})  # forbidden without a rule


def test_the_floor_follows_the_set(guarded_kb: Path, tmp_path: Path) -> None:
    target = tmp_path / "kb"
    shutil.copytree(guarded_kb, target)
    guard = TripwireTest.load(target)
    before = guard.floor()
    assert guard.floor() is before  # same set: not computed again
    harm = [t.id for t in guard.tripwires.tripwires if t.topic == "harm"]
    guard.tripwires.remove(topics=["sabotage"])  # the two bee tripwires are left
    after = guard.floor()
    assert after.tripwire_set == guard.tripwires.manifest.set_hash != before.tripwire_set
    vectors = guard.tripwires.vectors.astype(np.float64)
    assert after.value == pytest.approx(float(vectors[0] @ vectors[1]))  # each other's nearest
    assert after.value != pytest.approx(before.value)
    # one tripwire has no nearest other: the rule's fixed floor (none here) is the fallback
    guard.tripwires.remove(ids=harm[:1])
    alone = guard.floor()
    assert (alone.value, alone.source, alone.n_tripwires) == (None, "fallback", 1)
    guard.rule = TripwireRule.default(floor=0.5)
    assert guard.floor().value == 0.5 and guard.floor().source == "fallback"
    assert "else 0.5" in guard.rule.describe()


def test_tuning_finds_a_separating_rule(guarded_kb: Path) -> None:
    guard = TripwireTest.load(guarded_kb)
    labels = [True] * len(UNSAFE) + [False] * len(SAFE)
    result = tune_rule(guard, UNSAFE + SAFE, labels, objective="accuracy", ks=(1, 3, 5))
    assert result.best.accuracy == 1.0 and result.best.frr == 0.0
    assert result.n_unsafe == 4 and result.n_safe == 4
    assert len(result.surface.accuracy) == result.best.rule.k
    constrained = tune_rule(guard, UNSAFE + SAFE, labels, objective="tpr_at_frr", max_frr=0.0)
    assert constrained.best.frr == 0.0


def test_tuning_refuses_one_class_and_unknown_objectives(guarded_kb: Path) -> None:
    guard = TripwireTest.load(guarded_kb)
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
