"""The answerability judge: graded scores from the first token's alternatives, the prompt it
sends, its calibration and its use in the gate (a scripted LLM stands in for the model in
the fast tests; the bundled local model in the slow one)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ragbound.detect import Guard
from ragbound.detect.judge import AnswerabilityJudge, no_probability
from ragbound.errors import InputError
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.llm import ChatMessage, GenerationParams
from tests.llm.llm_fakes import ScriptedLLM
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE

QUESTIONS = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE
MISSING_ANSWER = "How many drones live in a colony?"


def test_no_probability_reads_yes_and_no_however_spelled() -> None:
    seen = {"YES": math.log(0.5), " Yes": math.log(0.1), "NO": math.log(0.3), "x": -1.0}
    assert no_probability(seen, "YES") == pytest.approx(0.3 / 0.9)
    # no YES or NO among the alternatives: the word decides
    assert no_probability({"Maybe": -0.1}, "NO.") == 1.0
    assert no_probability(None, "Yes, it does") == 0.0
    assert no_probability(None, "I cannot tell") == 0.5


def numbers_only(messages: list[ChatMessage], params: GenerationParams) -> str:
    """A stand-in judge: YES when the passages hold a number, as a question of "how many"
    would need; NO otherwise."""
    passages = messages[-1].content.split("Question:")[0]
    return "YES" if any(c.isdigit() for c in passages) else "NO"


def test_the_prompt_shows_the_question_and_the_nearest_chunks_numbered() -> None:
    llm = ScriptedLLM(responder=lambda m, p: "YES")
    judge = AnswerabilityJudge(llm, depth=2)
    assert judge.scores(["Q?"], [["first  chunk", "second", "third"]]) == [0.0]
    messages, params = llm.calls[0]
    user = messages[-1].content
    assert "[1] first chunk" in user and "[2] second" in user and "third" not in user
    assert "Q?" in user
    assert (params.max_tokens, params.top_logprobs, params.temperature) == (2, 10, 0.0)


def test_a_failed_call_is_raised_not_taken_for_an_answer() -> None:
    judge = AnswerabilityJudge(ScriptedLLM([RuntimeError("server down")]))
    with pytest.raises(RuntimeError, match="server down"):
        judge.scores(["Q?"], [["a chunk"]])


@pytest.fixture(scope="module")
def kb(minilm_kb_dir: Path) -> KnowledgeBase:
    return KnowledgeBase.load(minilm_kb_dir)


def test_calibrated_recorded_and_used_by_the_gate(kb: KnowledgeBase, tmp_path: Path) -> None:
    llm = ScriptedLLM(responder=numbers_only, model_id="fake:numbers")
    guard = Guard.calibrate(kb, QUESTIONS, k=4, alpha=0.1, answerability="judge", llm=llm)
    model = guard.answerability
    assert model is not None and model.statistic == "judge"
    assert (model.llm, model.model_id) == (None, "fake:numbers")  # an object, not a spec
    assert len(llm.calls) == len(QUESTIONS) and set(model.null) <= {0.0, 1.0}
    guard.save(folder=tmp_path)
    loaded = Guard.load_for(kb, tmp_path)
    with pytest.raises(InputError, match="use_judge"):
        Gate(loaded).decide(MISSING_ANSWER)
    loaded.answers.use_judge(llm)
    decision = Gate(loaded).decide("When did the Shinkansen start running?")
    assert decision.answerability is not None
    assert decision.answerability.evidence.answer_probability == 1.0  # "1964" is there


def test_the_judge_needs_an_llm(kb: KnowledgeBase) -> None:
    with pytest.raises(InputError, match="needs an LLM"):
        Guard.calibrate(kb, QUESTIONS, answerability="judge")


@pytest.mark.slow
def test_the_bundled_model_judges_a_missing_answer(kb: KnowledgeBase, tmp_path: Path) -> None:
    from tests.llm.test_llm_local import default_model_or_skip

    default_model_or_skip()
    questions = QUESTIONS[:12]
    guard = Guard.calibrate(kb, questions, k=4, alpha=0.2, answerability="judge", llm="local")
    assert guard.answerability is not None and guard.answerability.llm == "local"
    guard.save(folder=tmp_path)
    gate = Gate(Guard.load_for(kb, tmp_path))  # the judge made again from the spec
    found = gate.decide("What do worker bees make from nectar?").answerability
    missing = gate.decide(MISSING_ANSWER).answerability
    assert found is not None and missing is not None
    assert found.evidence.answer_probability > missing.evidence.answer_probability
