"""The answerability test alone (no Guard): calibrated beside an OnlineTest, its shared level,
verdicts only for the rows asked, removed again; what a request is refused for."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragbound.detect.answers import AnswerabilityTest, check_request
from ragbound.detect.config import DetectorConfig
from ragbound.detect.fitting import fit_rows
from ragbound.detect.online import OnlineTest
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE

pytestmark = pytest.mark.filterwarnings("ignore:.*calibration questions are few")
QUESTIONS = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE
MISSING_ANSWER = "Which beekeeper invented the smoker in 1873?"


@pytest.fixture(scope="module")
def answers(minilm_kb_dir: Path) -> AnswerabilityTest:
    kb = KnowledgeBase.load(minilm_kb_dir)
    relevance = OnlineTest(kb, fit_rows(kb, QUESTIONS, DetectorConfig(k=4, alpha=0.1)).calibration)
    answers = AnswerabilityTest(relevance)
    answers.calibrate("coverage")
    return answers


def test_calibrated_on_the_calibration_questions_at_a_shared_level(
    answers: AnswerabilityTest,
) -> None:
    model = answers.model
    assert model is not None and model.statistic == "coverage"
    assert len(model.null) == len(QUESTIONS)
    level = answers.level()
    assert level == model.level(0.1, answers.relevance.null_scores())
    assert 0 < level < 0.1  # each test at its share of alpha
    assert answers.level(0.2) > level and answers.judge is None


def test_verdicts_only_for_the_rows_asked(answers: AnswerabilityTest) -> None:
    texts = [MISSING_ANSWER, QUESTIONS[0]]
    hits = answers.relevance.kb.search(texts, answers.model.depth)
    found = answers.verdicts_at(texts, hits, 0.05, [0])
    assert found[1] is None and found[0] is not None
    assert found[0] == answers.verdicts(texts[:1], hits, 0.05)[0]
    assert found[0].alpha == 0.05 and "1873" in found[0].evidence.missing


def test_removed_and_refused(minilm_kb_dir: Path) -> None:
    kb = KnowledgeBase.load(minilm_kb_dir)
    relevance = OnlineTest(kb, fit_rows(kb, QUESTIONS, DetectorConfig(k=4)).calibration)
    answers = AnswerabilityTest(relevance)
    answers.calibrate("coverage")
    answers.calibrate(None)
    assert answers.model is None and answers.level(0.1) == 0.1
    with pytest.raises(InputError, match="no answerability test"):
        answers.verdicts(QUESTIONS[:1], kb.search(QUESTIONS[:1], 5), 0.05)
    with pytest.raises(InputError, match="needs an LLM"):
        check_request("judge", None)
    with pytest.raises(InputError, match="unknown answerability statistic"):
        check_request("vibes", None)
