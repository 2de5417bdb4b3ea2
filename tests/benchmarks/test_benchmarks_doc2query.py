"""benchmarks/doc2query.py: reply parsing, nearest abstracts, the signal and its table (no LLM)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import doc2query
from benchmarks.doc2query import HardQuestion
from ragbound.corpus import Document
from ragbound.knowledge import KnowledgeBase
from ragbound.llm.base import parallel_limit
from tests.texts import TOPICS


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    """The ten test sentences as abstracts: each record carries its topic-numbered pmid."""
    docs = [
        Document(id=f"{topic}-{i}", text=text, source=topic, metadata={"pmid": f"{topic}-{i}"})
        for topic, sentences in TOPICS.items()
        for i, text in enumerate(sentences)
    ]
    return KnowledgeBase.from_documents(docs, embedder="minilm")


def test_a_reply_keeps_its_questions_less_those_pointing_at_their_source():
    reply = (
        'Here: {"questions": ["Do  bees dance\\nto show food?", "What is the main purpose of '
        'the study?", 3, "Is honey made from nectar?"]}'
    )
    assert doc2query.usable_questions(reply) == [
        "Do bees dance to show food?",
        "Is honey made from nectar?",
    ]


@pytest.mark.parametrize("reply", ["no json here", '{"questions": "one string"}', "{}"])
def test_a_reply_without_a_question_list_gives_none(reply: str):
    assert doc2query.usable_questions(reply) == []


def test_the_prompt_takes_the_abstract_as_its_context():
    prompt = doc2query.doc_prompt()
    messages = prompt.render(context="Bees dance.")
    assert prompt.id == "doc-questions" and list(prompt.variables) == ["context"]
    assert "Bees dance." in messages[-1].content
    assert '{"questions": [' in messages[-1].content  # the doubled braces became JSON


def test_nearest_abstracts_are_distinct_and_nearest_first(kb: KnowledgeBase):
    found = doc2query.nearest_abstracts(kb, ["How do electric trains get their power?"], 2)
    assert len(found[0]) == 2 and len(set(found[0])) == 2
    assert found[0][0] == "trains-3"  # the pantograph sentence
    assert all(p.startswith("trains") for p in found[0])


def test_the_signal_is_the_nearest_generated_question_of_the_questions_abstracts(
    kb: KnowledgeBase,
):
    question = "How do bees show each other where the flowers are?"
    generated = {
        "bees-2": ["How do bees tell the hive where food is?"],
        "trains-0": ["How does a steam engine work?"],
        "bees-0": [],
    }
    hard = [
        HardQuestion(question, 1.0, ("bees-2", "trains-0")),
        HardQuestion(question, 1.0, ("trains-0",)),
        HardQuestion(question, 1.0, ("bees-0",)),  # no usable question: NaN
    ]
    sims = doc2query.question_similarity(kb, hard, generated)
    vectors = kb.embed([question, *generated["bees-2"], *generated["trains-0"]])
    assert sims[0] == pytest.approx(float(vectors[1] @ vectors[0]), abs=1e-6)
    assert sims[1] == pytest.approx(float(vectors[2] @ vectors[0]), abs=1e-6)
    assert sims[0] > sims[1]
    assert np.isnan(sims[2])


def test_the_table_has_a_row_per_split():
    split = {
        "seed": 1,
        "n_in": 40,
        "n_out": 37,
        "abstracts": 137,
        "questions": 274,
        "generation_s": 1200.4,
        "combined_auroc": 0.361,
        "similarity_auroc": 0.36,
        "similarity_in": 0.5061,
        "similarity_out": 0.5862,
    }
    lines = doc2query.doc2query_markdown(
        {"doc2query": {"model": "local:m", "n_hard": 40, "splits": [split]}}
    )
    assert "| seed 1 | 40 / 37 | 137 (274) | 1200 s | 0.361 | 0.360 | 0.506 / 0.586 |" in lines
    assert any("local:m writes 3" in line for line in lines)
    assert doc2query.doc2query_markdown({}) == []


def test_the_llm_is_the_one_bench_doc2query_llm_names(monkeypatch):
    monkeypatch.setenv("BENCH_DOC2QUERY_LLM", "openai:served-model")
    monkeypatch.setenv("RAGBOUND_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    llm = doc2query.doc2query_llm()  # no call is made: nothing listens on port 9
    assert llm.model_id == "openai:served-model"
    assert parallel_limit(llm, doc2query.SERVER_CONCURRENCY) == doc2query.SERVER_CONCURRENCY


@pytest.mark.parametrize(
    ("spec", "unset", "reason"),
    [
        ("gpt", (), "unknown LLM spec"),
        ("openai:served-model", ("RAGBOUND_LLM_BASE_URL", "OPENAI_BASE_URL"), "base_url"),
    ],
)
def test_an_llm_that_cannot_be_had_is_one_line_naming_the_setting(monkeypatch, spec, unset, reason):
    monkeypatch.setenv("BENCH_DOC2QUERY_LLM", spec)
    for name in unset:  # the server's address is missing
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit, match=f"BENCH_DOC2QUERY_LLM='{spec}': .*{reason}"):
        doc2query.doc2query_llm()


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("BENCH_DOC2QUERY_SEEDS", "x"),
        ("BENCH_DOC2QUERY_SEEDS", "-1"),
        ("BENCH_DOC2QUERY_SEEDS", ""),
        ("BENCH_DOC2QUERY_HARD", "0"),
        ("BENCH_DOC2QUERY_HARD", "-3"),
        ("BENCH_DOC2QUERY_HARD", "nan"),
        ("BENCH_DOC2QUERY_HARD", "40,50"),
    ],
)
def test_bad_settings_are_refused_before_any_work(monkeypatch, tmp_path, name, bad):
    monkeypatch.setenv(name, bad)
    # no knowledge base is built and no LLM is called: the refusal comes first
    with pytest.raises(SystemExit, match=name):
        doc2query.doc2query_part(tmp_path, llm=None)  # type: ignore[arg-type]
