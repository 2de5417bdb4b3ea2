"""The LLM relevance-judge baseline (benchmarks/judge.py) against a scripted fake backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.judge import judge_relevance, parse_judgement
from ragbound.knowledge import KnowledgeBase
from ragbound.llm import ChatMessage, GenerationParams, ParseError
from tests.llm.llm_fakes import ScriptedLLM


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ('{"feedback": "on topic", "score": 0.8}', 0.8),
        ('Sure!\n```json\n{"feedback": "x", "score": 1,}\n```', 1.0),
        ("{'feedback': 'copied the brackets', 'score': [0.25]}", 0.25),
        ('{"feedback": "as text", "score": "0"}', 0.0),
    ],
)
def test_a_score_in_the_unit_interval_is_read(reply: str, score: float) -> None:
    assert parse_judgement(reply)[0] == score


@pytest.mark.parametrize(
    "reply",
    ['{"feedback": "x", "score": 1.5}', '{"feedback": "x"}', '{"score": "high"}', "no json"],
)
def test_a_reply_without_a_usable_score_is_refused_not_guessed(reply: str) -> None:
    with pytest.raises(ParseError):
        parse_judgement(reply)


def bee_judge(messages: list[ChatMessage], params: GenerationParams) -> str:
    """Scores 0.9 when the query is about bees, else 0.1 (reads only the user message)."""
    query = messages[-1].content.split("Query:")[1].split("Context:")[0]
    score = 0.9 if "bee" in query.lower() else 0.1
    return json.dumps({"feedback": "compared query and context", "score": score})


def test_judgements_score_each_query_against_its_retrieved_chunks(corpus_dir: Path) -> None:
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    fake = ScriptedLLM(["not json at all"], responder=bee_judge)
    queries = ["How many eggs can a queen bee lay?", "Who painted the Mona Lisa?"]
    judged = judge_relevance(kb, fake, queries, k=2, concurrency=1)
    assert [j.score for j in judged] == [0.9, 0.1]
    assert judged[0].attempts == 2  # the unparseable first reply was retried
    assert judged[0].model == "fake:scripted" and judged[0].prompt_version == 1
    user = fake.calls[-1][0][-1].content
    assert "Mona Lisa" in user and "Context:" in user
    bee_context = fake.calls[0][0][-1].content
    assert "queen bee can lay" in bee_context  # the retrieved chunk is the context


def test_a_query_whose_reply_never_parses_is_reported_with_the_raw_reply(corpus_dir: Path) -> None:
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    fake = ScriptedLLM(["nope 1", "nope 2", "nope 3"], responder=bee_judge)
    judged = judge_relevance(kb, fake, ["How do bees dance?", "What powers trains?"], concurrency=1)
    assert judged[0].score is None and judged[0].error and "nope 3" in judged[0].error
    assert judged[1].score == 0.1 and judged[1].error is None
