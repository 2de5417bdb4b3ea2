"""The context and prompt ``generate_queries`` uses, against the scripted LLM test double."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbound.corpus import Document
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.llm import ChatMessage, GenerationParams
from ragbound.synth.queries import (
    DEFAULT_PROMPT,
    MAX_SHOWN_EXAMPLES,
    USERS_PROMPT,
    ContextWindows,
    default_prompt,
    generate_queries,
    save_queries,
)
from tests.llm.llm_fakes import ScriptedLLM

PAPER_A = [
    "Honey bee colonies kept in cold climates need feeding before the long winter months.",
    "Colonies fed sugar syrup in autumn survived the winter more often than unfed colonies.",
    "Feeding in spring made no difference to colony survival in the same apiaries studied.",
]
PAPER_B = [
    "Electric trains draw current from overhead wires through a pantograph on the roof.",
    "Pantographs wear down faster on lines where the overhead wire is poorly tensioned.",
]


def paragraph_records(tmp_path: Path) -> Path:
    """Two papers stored as one record per paragraph, ids ``PAPER-i`` (their document ids),
    no document field."""
    path = tmp_path / "paragraphs.jsonl"
    lines = [
        json.dumps({"id": f"{paper}-{i}", "text": " ".join([text] * 2)})
        for paper, texts in (("1001", PAPER_A), ("1002", PAPER_B))
        for i, text in enumerate(texts)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def numbered_questions(messages: list[ChatMessage], params: GenerationParams) -> str:
    """A distinct, well-formed question per call (the seed differs per chunk)."""
    return json.dumps({"question": f"Which finding number {params.seed} holds for colonies?"})


def test_without_a_document_field_the_context_is_the_paper_found_from_the_ids(tmp_path: Path):
    kb = KnowledgeBase.build([paragraph_records(tmp_path)], embedder="bm25")
    assert len({c.doc_id for c in kb.chunks}) == len(kb)  # each record is its own document
    llm = ScriptedLLM(responder=numbered_questions)
    queries, report = generate_queries(kb, llm, n=5, seed=0, concurrency=1)
    assert report.context == "id-prefix:doc_id"
    assert {q.context for q in queries} == {"id-prefix:doc_id"}
    for (_, user), query in zip((call[0] for call in llm.calls), queries, strict=True):
        sampled = next(c for c in kb.chunks if c.id == query.chunk_id)
        paper = PAPER_A if sampled.doc_id.startswith("1001") else PAPER_B
        other = PAPER_B if paper is PAPER_A else PAPER_A
        assert all(text in user.content for text in paper)  # the whole paper
        assert not any(text in user.content for text in other)  # and nothing else

    out = tmp_path / "synthetic.jsonl"
    save_queries(out, queries)
    assert json.loads(out.read_text().splitlines()[0])["context"] == "id-prefix:doc_id"


def test_a_group_by_field_that_differs_only_in_case_is_suggested(tmp_path: Path):
    docs = [Document(id="d", text="Bees make honey.", source="d.txt", metadata={"Paper": "1"})]
    kb = KnowledgeBase.from_documents(docs, embedder="bm25")
    with pytest.raises(InputError) as caught:
        ContextWindows(kb, "paper")
    assert str(caught.value) == (
        "no chunk has the metadata field 'paper' to group by (fields present: Paper); did you "
        "mean 'Paper'? (field names are case-sensitive)"
    )


def test_chunk_context_shows_one_paragraph(tmp_path: Path):
    kb = KnowledgeBase.build([paragraph_records(tmp_path)], embedder="bm25")
    llm = ScriptedLLM(responder=numbered_questions)
    _, report = generate_queries(kb, llm, n=2, seed=0, concurrency=1, context="chunk")
    assert report.context == "chunk"
    user = llm.calls[0][0][1].content
    assert sum(text in user for text in PAPER_A + PAPER_B) == 1


def test_users_questions_are_shown_a_seeded_sample_per_call(tmp_path: Path):
    docs = [
        Document(
            id=f"d{i}",
            text=" ".join([f"Fact {i} about honey bee colonies."] * 5),
            source=f"{i}.txt",
        )
        for i in range(6)
    ]
    kb = KnowledgeBase.from_documents(docs, embedder="bm25")
    users = [{"question": f"Do bees of hive number {i} sleep at night?"} for i in range(20)]

    def shown(seed: int) -> list[set[str]]:
        llm = ScriptedLLM(responder=numbered_questions)
        queries, _ = generate_queries(
            kb, llm, n=3, seed=seed, concurrency=1, examples=users, prompt_id=USERS_PROMPT
        )
        assert {q.prompt_id for q in queries} == {USERS_PROMPT}
        systems = [call[0][0].content for call in llm.calls]
        assert all("Questions real users asked" in system for system in systems)
        return [{u["question"] for u in users if u["question"] in s} for s in systems]

    first = shown(0)
    assert all(len(sample) == MAX_SHOWN_EXAMPLES for sample in first)
    assert len({frozenset(sample) for sample in first}) > 1  # a different sample per call
    assert shown(0) == first  # seeded


def test_a_file_of_questions_selects_the_users_prompt(tmp_path: Path):
    questions = tmp_path / "real.txt"
    questions.write_text("Do bees sleep?\n")
    assert default_prompt(str(questions)) == USERS_PROMPT
    assert default_prompt("pubmed") == DEFAULT_PROMPT
