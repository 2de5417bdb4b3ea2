"""Synthetic queries against a scripted fake backend (a test double, never a default)."""

import json
from pathlib import Path

import pytest

from ragbound.corpus import load_queries
from ragbound.knowledge import KnowledgeBase
from ragbound.llm import ChatMessage, GenerationParams, LLMResponse
from ragbound.synth.queries import QueryFilters, generate_queries, save_queries


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


GOOD_A = '{"question": "How many eggs can a queen bee lay in a day?", "answer": "2000"}'
EXAMPLE_COPY = (
    '{"question": "Is the use of magnetic resonance imaging (MRI) superior to computed '
    'tomography (CT) in diagnosing soft tissue injuries?"}'
)
REPLIES = [
    # round 1: three chunks, one question kept
    GOOD_A,
    "I cannot help with that.",
    GOOD_A,
    # round 2: keep rate 1/3 and 2 missing, so six chunks
    '{"question": "Why?"}',
    '{"question": "What is the objective of the study?"}',
    EXAMPLE_COPY,
    '{"answer": "no question here"}',
    '{"question": "How many eggs can a queen bee lay each day?"}',
    '```json\n{"question": "What powers an electric train?",}\n```',
    # round 3: one missing, one chunk
    '{"question": "Which metal carries current in overhead train wires?"}',
]


def test_generation_draws_chunks_until_n_questions_pass_the_filters(
    corpus_dir: Path, tmp_path: Path
):
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    llm = ScriptedLLM(REPLIES)
    queries, report = generate_queries(kb, llm, n=3, seed=0, concurrency=1, max_requests=10)
    assert [q.query for q in queries] == [
        "How many eggs can a queen bee lay in a day?",
        "What powers an electric train?",
        "Which metal carries current in overhead train wires?",
    ]
    assert (report.wanted, report.requested, report.kept) == (3, 10, 3)
    assert report.dropped == {
        "unparseable": 1,
        "duplicate": 1,
        "degenerate (too short)": 1,
        "refers to its source": 1,
        "copies an example": 1,
        "no question field": 1,
        "near duplicate": 1,
    }
    assert report.errors == ["I cannot help with that."]
    # every prompt carries the in-context example questions and one chunk of context
    system, user = llm.calls[0][0].content, llm.calls[0][1].content
    assert "magnetic resonance imaging" in system
    assert any(chunk.text in user for chunk in kb.chunks)
    assert queries[0].prompt_id == "synth-query" and queries[0].prompt_version == 2
    assert queries[0].model == "scripted" and queries[0].source == "llm:scripted"
    assert len({q.chunk_id for q in queries}) == 3

    out = tmp_path / "synthetic.jsonl"
    save_queries(out, queries)
    assert load_queries(out) == [q.query for q in queries]
    saved_as_text = tmp_path / "queries.out"  # the content, not the extension, decides
    save_queries(saved_as_text, queries)
    assert load_queries(saved_as_text) == [q.query for q in queries]
    assert json.loads(out.read_text().splitlines()[0])["chunk_id"] == queries[0].chunk_id


def test_switching_the_filters_off_keeps_what_they_would_drop(corpus_dir: Path):
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    llm = ScriptedLLM([*REPLIES[4:6], GOOD_A, REPLIES[7]])
    off = QueryFilters(source_references=False, example_copies=False, near_duplicate_jaccard=None)
    queries, report = generate_queries(kb, llm, n=4, seed=0, concurrency=1, filters=off)
    assert len(queries) == 4 and report.requested == 4 and report.dropped == {}


def test_a_model_that_never_passes_stops_at_the_request_budget(corpus_dir: Path):
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    llm = ScriptedLLM(["no json here"] * 10)
    queries, report = generate_queries(kb, llm, n=2, seed=0, concurrency=1)
    assert queries == [] and report.requested == 4 == len(llm.calls)
    assert report.dropped == {"unparseable": 4}


def test_the_paper_prompt_shows_the_examples_as_json(corpus_dir: Path):
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    llm = ScriptedLLM([GOOD_A])
    queries, _ = generate_queries(kb, llm, n=1, seed=0, prompt_id="synth-query-paper")
    assert '"options"' in llm.calls[0][0].content
    assert queries[0].prompt_id == "synth-query-paper"


def test_the_chunk_sample_is_seeded(corpus_dir: Path):
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")

    def contexts(seed: int) -> list[str]:
        llm = ScriptedLLM(['{"question": "What is this text about?"}'] * 3)
        generate_queries(kb, llm, n=3, seed=seed, concurrency=1)
        return [call[1].content for call in llm.calls]

    assert contexts(1) == contexts(1)
    assert contexts(1) != contexts(2)


def test_chunks_too_short_to_ask_about_are_not_sampled():
    from ragbound.corpus import Document
    from ragbound.synth.queries import MIN_CHUNK_WORDS

    long_text = " ".join(["Worker bees turn nectar into honey inside the hive."] * 3)
    docs = [Document(id=f"long{i}", text=f"{long_text} Note {i}.", source="s") for i in range(3)]
    docs += [Document(id="short", text="None.", source="s")]
    kb = KnowledgeBase.from_documents(docs, embedder="bm25")
    assert sum(c.n_words < MIN_CHUNK_WORDS for c in kb.chunks) == 1
    llm = ScriptedLLM(["x", "y", '{"question": "What do worker bees make from nectar?"}'])
    queries, report = generate_queries(
        kb, llm, n=1, seed=0, concurrency=1, max_requests=10, context="chunk"
    )
    prompts = [call[1].content for call in llm.calls]
    assert len(queries) == 1 and report.requested == 3  # every long chunk, never the short one
    assert not any("None." in p for p in prompts)


def paragraphs_kb():
    """Two 'papers', each stored as one record per paragraph with a shared paper id."""
    from ragbound.corpus import Document

    paper_a = [
        "Honey bees kept in cold climates need winter feeding. " * 3,
        "Colonies fed sugar syrup in autumn survived the winter more often than unfed ones. " * 2,
        "Feeding in spring made no difference to colony survival in the same apiaries. " * 2,
    ]
    paper_b = ["Electric trains draw current from overhead wires through a pantograph. " * 3]
    docs = [
        Document(id=f"a{i}", text=t, source="s", metadata={"paper": "A"})
        for i, t in enumerate(paper_a)
    ]
    docs += [Document(id="b0", text=paper_b[0], source="s", metadata={"paper": "B"})]
    return KnowledgeBase.from_documents(docs, embedder="bm25")


def test_the_document_context_shows_the_neighbouring_paragraphs_of_the_same_paper():
    from ragbound.synth.queries import CONTEXT_WORDS, ContextWindows

    kb = paragraphs_kb()
    middle = next(i for i, c in enumerate(kb.chunks) if c.doc_id.endswith("a1"))
    by_paper = ContextWindows(kb, "paper").text(middle)
    assert "winter feeding" in by_paper and "sugar syrup" in by_paper and "spring" in by_paper
    assert "pantograph" not in by_paper
    assert by_paper.index("winter feeding") < by_paper.index("sugar syrup")  # document order
    assert by_paper.count("\n\n") == 2
    alone = ContextWindows(kb, None).text(middle)  # each record is its own document
    assert "sugar syrup" in alone and "winter feeding" not in alone
    assert len(by_paper.split()) <= CONTEXT_WORDS


def test_the_window_stays_within_the_word_budget(monkeypatch):
    import ragbound.synth.queries as synth

    kb = paragraphs_kb()
    monkeypatch.setattr(synth, "CONTEXT_WORDS", 45)
    middle = next(i for i, c in enumerate(kb.chunks) if c.doc_id.endswith("a1"))
    text = synth.ContextWindows(kb, "paper").text(middle)
    assert "sugar syrup" in text and len(text.split()) <= 45
    assert "winter feeding" not in text or "spring" not in text  # only one neighbour fits


def test_grouping_by_a_field_no_chunk_has_is_an_error():
    from ragbound.errors import InputError
    from ragbound.synth.queries import ContextWindows

    with pytest.raises(InputError, match="pmid"):
        ContextWindows(paragraphs_kb(), "pmid")


def test_examples_come_from_a_builtin_set_or_the_users_file(tmp_path: Path):
    from ragbound.errors import InputError
    from ragbound.synth.queries import load_examples

    assert len(load_examples("pubmed")) == 3
    listed = tmp_path / "mine.json"
    listed.write_text(json.dumps(["Do bees sleep?", {"question": "Why do trains hum?"}]))
    assert [e["question"] for e in load_examples(str(listed))] == [
        "Do bees sleep?",
        "Why do trains hum?",
    ]
    lines = tmp_path / "mine.jsonl"
    lines.write_text('{"question": "Do bees sleep?", "answer": "yes"}\n\n{"question": "Why?"}\n')
    assert len(load_examples(str(lines))) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "ok?"}\n{"answer": "no question"}\n')
    with pytest.raises(InputError, match=r"bad\.jsonl:2 \(field 'question'\): missing"):
        load_examples(str(bad))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "ok?"}\n{oops\n')
    with pytest.raises(InputError, match=r"broken\.jsonl:2"):
        load_examples(str(broken))
