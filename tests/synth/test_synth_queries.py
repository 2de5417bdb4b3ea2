"""Synthetic queries against a scripted fake backend (a test double, never a default)."""

import json
from pathlib import Path

from ragbound.corpus import load_queries
from ragbound.knowledge import KnowledgeBase
from ragbound.llm import ChatMessage, GenerationParams, LLMResponse
from ragbound.synth.queries import generate_queries, save_queries


class ScriptedLLM:
    """Answers from a list of replies, in call order; counts calls."""

    model_id = "scripted"

    def __init__(self, replies: list[str]):
        self.replies = list(replies)
        self.calls: list[list[ChatMessage]] = []

    def complete(self, messages: list[ChatMessage], params: GenerationParams) -> LLMResponse:
        self.calls.append(messages)
        return LLMResponse(
            text=self.replies.pop(0),
            model=self.model_id,
            prompt_tokens=None,
            completion_tokens=None,
            seconds=0.0,
        )

    async def acomplete(self, messages, params) -> LLMResponse:
        return self.complete(messages, params)


def test_generation_keeps_good_questions_and_reports_the_rest(corpus_dir: Path, tmp_path: Path):
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    replies = [
        '{"question": "How many eggs can a queen bee lay in a day?", "answer": "2000"}',
        '```json\n{"question": "What powers an electric train?",}\n```',
        '{"question": "How many eggs can a queen bee lay in a day?"}',
        "I cannot help with that.",
        '{"question": "Why?"}',
        '{"answer": "no question here"}',
    ]
    llm = ScriptedLLM(replies)
    queries, report = generate_queries(kb, llm, n=6, seed=0, concurrency=1)
    assert [q.query for q in queries] == [
        "How many eggs can a queen bee lay in a day?",
        "What powers an electric train?",
    ]
    assert report.requested == 6 and report.kept == 2
    assert report.dropped == {
        "duplicate": 1,
        "unparseable": 1,
        "degenerate (too short)": 1,
        "no question field": 1,
    }
    assert report.errors == ["I cannot help with that."]
    # every prompt carries the paper's in-context examples and one chunk of context
    system, user = llm.calls[0][0].content, llm.calls[0][1].content
    assert "magnetic resonance imaging" in system
    assert any(chunk.text in user for chunk in kb.chunks)
    assert queries[0].prompt_id == "synth-query" and queries[0].model == "scripted"

    out = tmp_path / "synthetic.jsonl"
    save_queries(out, queries)
    assert load_queries(out) == [q.query for q in queries]
    assert json.loads(out.read_text().splitlines()[0])["chunk_id"] == queries[0].chunk_id


def test_the_chunk_sample_is_seeded(corpus_dir: Path):
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")

    def contexts(seed: int) -> list[str]:
        llm = ScriptedLLM(['{"question": "What is this text about?"}'] * 3)
        generate_queries(kb, llm, n=3, seed=seed, concurrency=1)
        return [call[1].content for call in llm.calls]

    assert contexts(1) == contexts(1)
    assert contexts(1) != contexts(2)
