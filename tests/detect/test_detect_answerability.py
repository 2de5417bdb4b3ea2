"""The answerability test: calibrated on the relevance test's questions, saved with it, and
deciding with its own cause in the gate (real MiniLM knowledge base over tests/texts.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragbound.detect import Guard
from ragbound.detect.answerability import coverage, question_words
from ragbound.errors import InputError
from ragbound.gate import Decision, Gate
from ragbound.knowledge import KnowledgeBase
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE

QUESTIONS = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE
# on topic (bees), its words (an inventor, a year) in no document
MISSING_ANSWER = "Which beekeeper invented the smoker in 1873?"


@pytest.fixture(scope="module")
def guard(minilm_kb_dir: Path) -> Guard:
    kb = KnowledgeBase.load(minilm_kb_dir)
    return Guard.calibrate(kb, QUESTIONS, k=4, alpha=0.1, answerability="coverage")


def test_question_words_drop_function_words_only() -> None:
    assert question_words(["How do bees tell each other where food is?"]) == [
        {"bees", "tell", "food"}
    ]
    # contraction stems go; number words stay (a question's number is part of what it asks)
    assert question_words(["Why don't the two hives share?"]) == [{"two", "hives", "share"}]


def test_coverage_by_hand(guard: Guard) -> None:
    """A question whose every content word one retrieved sentence holds scores 0; one whose
    words no chunk holds scores 1 and names them, rarest first."""
    question = "Which bees collect nectar?"
    hits = guard.kb.search([question, MISSING_ANSWER], 5)
    found, missing = coverage(guard.kb, [question, MISSING_ANSWER], hits)
    assert found.score == pytest.approx(0.0)
    assert found.evidence.sentence.startswith("Worker bees collect nectar")
    assert found.evidence.missing == []
    assert missing.score == pytest.approx(1.0 - missing.evidence.coverage)
    assert set(missing.evidence.missing) >= {"1873", "invented", "smoker"}


def test_the_null_is_the_calibration_questions_scores_and_the_level_is_shared(
    guard: Guard,
) -> None:
    model = guard.answerability
    assert model is not None and model.statistic == "coverage"
    hits = guard.kb.search(QUESTIONS, model.depth)
    expected = [c.score for c in coverage(guard.kb, QUESTIONS, hits, model.depth)]
    np.testing.assert_allclose(model.null, expected)
    level = guard.answerability_level()
    assert 0.0 < level <= guard.config.alpha
    # at its level, the two tests together flag at most alpha of the calibration questions
    relevance = guard.null_scores()
    p_relevance = [(np.sum(relevance >= s)) / len(relevance) for s in relevance]
    p_answer = [(np.sum(np.array(model.null) >= s)) / len(model.null) for s in model.null]
    flagged = np.mean(np.minimum(p_relevance, p_answer) <= level)
    assert flagged <= guard.config.alpha


def test_the_gate_abstains_on_a_missing_answer_with_its_own_cause(guard: Guard) -> None:
    gate = Gate(guard)
    decision = gate.decide(MISSING_ANSWER)
    assert (decision.action, decision.cause) == ("abstain", "unanswerable")
    assert not decision.test.out_of_knowledge
    answer = decision.answerability
    assert answer is not None and answer.unanswerable
    assert answer.alpha == decision.test.alpha == guard.answerability_level()
    assert decision.reason.startswith("unanswerable:")
    assert "1873" in decision.reason
    kept = gate.decide("How do bees tell each other where food is?")
    assert (kept.action, kept.cause) == ("answer", "in_knowledge")
    assert kept.answerability is not None and not kept.answerability.unanswerable
    off_topic = gate.decide("What is the capital of Australia?")
    assert (off_topic.action, off_topic.cause) == ("abstain", "out_of_knowledge")
    assert off_topic.answerability is None  # decided already: not read again
    again = Decision.model_validate_json(decision.model_dump_json())
    assert again == decision


def test_saved_and_loaded_with_the_calibration(guard: Guard, tmp_path: Path) -> None:
    guard.save(folder=tmp_path)
    loaded = Guard.load_for(guard.kb, tmp_path)
    assert loaded.answerability == guard.answerability
    assert loaded.answerability_level() == guard.answerability_level()
    assert Gate(loaded).decide(MISSING_ANSWER).cause == "unanswerable"


def test_off_by_default_and_then_the_relevance_test_has_the_whole_alpha(guard: Guard) -> None:
    plain = Guard.calibrate(guard.kb, QUESTIONS, k=4, alpha=0.1)
    assert plain.answerability is None
    decision = Gate(plain).decide(MISSING_ANSWER)
    assert decision.answerability is None
    assert decision.test.alpha == 0.1
    assert decision.cause in ("in_knowledge", "out_of_knowledge")


def test_refused_with_an_unknown_statistic_or_a_learned_one(guard: Guard) -> None:
    with pytest.raises(InputError, match="unknown answerability statistic"):
        Guard.calibrate(guard.kb, QUESTIONS, answerability="judge-of-everything")
    with pytest.raises(InputError, match="answerability test needs a statistic"):
        Guard.calibrate(guard.kb, QUESTIONS * 3, statistic="combined", answerability="coverage")


def test_too_few_questions_flag_nothing_rather_than_fail(guard: Guard) -> None:
    """Under 1 / alpha calibration questions no test can flag; sharing alpha must not make
    the gate fail either (the level stays > 0 and below every p-value)."""
    with pytest.warns(UserWarning, match="cannot flag anything"):
        few = Guard.calibrate(guard.kb, QUESTIONS[:8], k=4, answerability="coverage")
    level = few.answerability_level()
    assert 0.0 < level < 1 / 9
    decision = Gate(few).decide(MISSING_ANSWER)
    assert decision.action == "answer"


def test_a_conversation_is_read_as_the_relevance_test_searched_it(guard: Guard) -> None:
    """The answerability test reads the text searched (the follow reading's join), so a
    follow-up's missing answer is judged with the turn it follows."""
    chat = [
        {"role": "user", "content": "Why do beekeepers use smoke?"},
        {"role": "assistant", "content": "To calm the colony before opening the hive."},
        {"role": "user", "content": "Which beekeeper invented the smoker in 1873?"},
    ]
    decision = Gate(guard).decide(chat)
    assert decision.query == chat[-1]["content"]
    searched = decision.test.query
    assert chat[0]["content"] in searched and chat[-1]["content"] in searched
    assert not decision.test.out_of_knowledge
    answer = decision.answerability
    assert answer is not None
    hits = guard.kb.search([searched], answer_depth(guard))
    (expected,) = coverage(guard.kb, [searched], hits, answer_depth(guard))
    assert answer.score == pytest.approx(expected.score)
    # the earlier turn's words count as found: the join covers more than the turn alone
    (alone,) = coverage(guard.kb, [chat[-1]["content"]], hits, answer_depth(guard))
    assert answer.score < alone.score


def answer_depth(guard: Guard) -> int:
    assert guard.answerability is not None
    return guard.answerability.depth
