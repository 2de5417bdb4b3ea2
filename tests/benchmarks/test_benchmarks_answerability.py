"""The answerability benchmark: its leave-one-out splits, COVID-QA's paragraphs, a small run's
rows and the targets."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from benchmarks import answerability as ans
from benchmarks import datasets
from ragbound.corpus import Document
from ragbound.detect import Guard
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE, TOPICS

covidqa = pytest.mark.skipif(
    datasets.covidqa_missing_reason() is not None,
    reason=str(datasets.covidqa_missing_reason()),
)


# ------------------------------------------------------------------------------ splits
def test_a_quarter_of_each_group_is_left_out_and_the_seed_decides_which():
    groups = {"a": [f"a{i}" for i in range(8)], "b": [f"b{i}" for i in range(4)], "c": ["c0"]}
    left = ans.left_out(groups, seed=3)
    assert len(left & set(groups["a"])) == 2
    assert len(left & set(groups["b"])) == 1
    assert not left & set(groups["c"])  # a quarter of one, rounded: none
    assert ans.left_out(groups, seed=3) == left
    assert any(ans.left_out(groups, seed=s) != left for s in range(4, 10))


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    # one sentence a document, four times over: more chunks than the default k = 32
    docs = [
        Document(id=f"{topic}-{i}-{copy}", text=sentence, source=topic)
        for topic, sentences in TOPICS.items()
        for i, sentence in enumerate(sentences)
        for copy in range(4)
    ]
    return KnowledgeBase.from_documents(docs, embedder="bm25")


def test_a_split_indexes_the_kept_documents_and_leaves_their_questions_in(kb: KnowledgeBase):
    docs = sorted({chunk.doc_id for chunk in kb.chunks})
    questions = [(doc, f"question {n} about {doc}") for doc in docs for n in range(4)]
    unanswerable = [(doc, f"unanswerable about {doc}") for doc in docs]
    groups = {topic: [d for d in docs if d.startswith(topic)] for topic in TOPICS}
    split = ans.leave_out_split(kb, 0, questions, groups, unanswerable=unanswerable)
    left = ans.left_out(groups, 0)
    assert len(left) == 10  # a quarter of 20 per topic
    assert split.kept == set(docs) - left
    assert {chunk.doc_id for chunk in split.kb.chunks} == split.kept
    assert split.left_out == [q for doc, q in questions if doc in left]
    assert sorted(split.calibration + split.inside) == sorted(
        q for doc, q in questions if doc not in left
    )
    assert len(split.calibration) == len(split.inside)
    assert split.unanswerable == [q for doc, q in unanswerable if doc not in left]
    assert set(split.sets()) == {"inside", "left_out", "unanswerable"}


def test_covid_questions_go_to_the_paragraph_their_answer_starts_in(tmp_path, monkeypatch):
    context = "Title line\n\nFirst paragraph here.\nSecond paragraph, the answer."
    answer = context.index("the answer")
    data = {
        "data": [
            {
                "paragraphs": [
                    {
                        "document_id": 7,
                        "context": context,
                        "qas": [
                            {"question": " Where? ", "answers": [{"answer_start": answer}]},
                            {"question": "Title?", "answers": [{"answer_start": 0}]},
                            {"question": "None?", "answers": []},
                        ],
                    }
                ]
            }
        ]
    }
    (tmp_path / "covidqa").mkdir()
    (tmp_path / "covidqa" / "covid_qa.json").write_text(json.dumps(data))
    monkeypatch.setenv("RAGBOUND_DATA", str(tmp_path))
    ans.covid_paragraphs.cache_clear()
    try:
        assert datasets.covidqa_answer_starts() == [("7", "Where?", answer), ("7", "Title?", 0)]
        documents, questions = ans.covid_paragraphs()
    finally:
        ans.covid_paragraphs.cache_clear()
    assert [d.text for d in documents] == [
        "Title line",
        "First paragraph here.",
        "Second paragraph, the answer.",
    ]
    assert [d.id for d in documents] == ["7:0", "7:1", "7:2"]
    assert questions == (("7:2", "Where?"), ("7:0", "Title?"))


@covidqa
def test_every_covid_question_has_its_paragraph():
    documents, questions = ans.covid_paragraphs()
    ids = {d.id for d in documents}
    assert len(questions) == len(datasets.covidqa_questions()) == 1380
    assert all(doc in ids for doc, _ in questions)


# ------------------------------------------------------------------------------- rows
def words_vector(texts: list[str]) -> np.ndarray:
    """Unit bag-of-words vectors (hashed): a stand-in for MiniLM in the sentence rows."""
    out = np.zeros((len(texts), 64), np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().split():
            out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


@pytest.fixture(scope="module")
def split(kb: KnowledgeBase) -> ans.LeaveOutSplit:
    docs = {chunk.doc_id for chunk in kb.chunks}
    # 40 calibration questions: at alpha 0.05 fewer than 20 leave the two tests no level
    forms = ("Is it true that {}", "Explain this: {}", "Why? {}", "Tell me more. {}")
    calibration = [
        form.format(sentence)
        for sentences in TOPICS.values()
        for sentence in sentences
        for form in forms
    ]
    inside = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE
    return ans.LeaveOutSplit(kb, docs, calibration, inside, OUT_OF_KNOWLEDGE, OUT_OF_KNOWLEDGE[:2])


def test_every_row_has_its_measures_and_the_gate_abstains_on_either_test(split):
    rows = ans.split_rows(split, words_vector, split.kb, latency_n=3, seed=0)
    assert list(rows) == list(ans.CHOICES)
    for row in rows.values():
        assert {"left_out", "fpr", "auroc", "unanswerable", "level"} <= set(row)
    assert 0 < rows[ans.COVERAGE]["null_top"] <= 1 and "null_top" in rows[ans.SENTENCE]
    assert {"p50_ms", "p50_ratio"} <= set(rows[ans.WITH_COVERAGE])
    assert "p50_ms" in rows[ans.RELEVANCE]
    assert rows[ans.RELEVANCE]["level"] == ans.ALPHA
    # the benchmark reads the gate's union as the two tests at their shared level
    both = Guard.calibrate(split.kb, split.calibration, answerability="coverage")
    alone = Guard.calibrate(split.kb, split.calibration)
    found = ans.decided(Gate(alone), Gate(both), split.left_out)
    level = both.answerability_level()
    union = (found.relevance_p <= level) | (found.coverage_p <= level)
    assert np.array_equal(found.abstained_both, union)
    assert np.array_equal(found.abstained_alone, found.relevance_p <= ans.ALPHA)
    assert rows[ans.WITH_COVERAGE]["level"] == level


def test_without_an_encoder_or_a_plain_kb_the_diagnostic_and_latency_are_left_out(split):
    rows = ans.split_rows(split)
    assert list(rows) == [ans.RELEVANCE, ans.WITH_COVERAGE, ans.COVERAGE]
    assert "p50_ms" not in rows[ans.RELEVANCE]


# ---------------------------------------------------------------------------- summary
def _results() -> dict:
    def row(left_out: float, fpr: float, **more: float) -> dict[str, list[float]]:
        values = {"left_out": left_out, "fpr": fpr, "auroc": 0.8, **more}
        return {m: [v, v] for m, v in values.items()}

    return {
        "choices": [ans.RELEVANCE, ans.WITH_COVERAGE],
        "rows": {
            "A": {
                ans.RELEVANCE: row(0.40, 0.05, p50_ms=10.0),
                ans.WITH_COVERAGE: row(0.60, 0.06, p50_ms=11.0, p50_ratio=1.10),
            },
            ans.CLAP: {
                ans.RELEVANCE: row(0.50, 0.04, unanswerable=0.30),
                ans.WITH_COVERAGE: row(0.60, 0.08, unanswerable=0.40, p50_ratio=1.20),
            },
        },
    }


def test_targets_read_each_choice_at_its_worst_corpus():
    results = _results()
    assert ans.gains(results, "A", ans.WITH_COVERAGE) == pytest.approx([0.2, 0.2])
    assert ans.gains(results, "A", ans.RELEVANCE) is None
    found = {label: (met, value) for label, met, value in ans.targets(results, ans.WITH_COVERAGE)}
    assert found["held-out FPR"] == (False, f"0.080 ({ans.CLAP})")
    assert found["gain"] == (False, f"0.100 ({ans.CLAP})")  # 0.2 on A, 0.1 on CLAP NQ
    assert found["CLAP NQ unanswerable"] == (True, f"0.400 ({ans.CLAP})")
    assert found["p50"] == (False, f"1.200 ({ans.CLAP})")
    baseline = {label: met for label, met, _ in ans.targets(results, ans.RELEVANCE)}
    assert baseline["gain"] is None and baseline["p50"] is None


def test_the_tables_hold_every_choice_and_corpus():
    results = _results() | {
        "seeds": [0, 1],
        "alpha": ans.ALPHA,
        "leave": ans.LEAVE,
        "latency_n": 3,
        "skipped": {},
        "sizes": {"A": {"chunks": 5}},
        "build_s": {"A": {"seconds": None, "cached": True}},
        "seconds": {"A": 1.0},
    }
    header, table = ans.summary_table(results)
    assert [row[0] for row in table] == results["choices"]
    assert table[1][-1] == "held-out FPR, gain, p50"
    header, table = ans.targets_table(results)
    assert header[1:] == results["choices"]
    assert table[0][2] == f"0.080 ({ans.CLAP}) missed"
    header, table = ans.corpus_table(results)
    assert len(table) == 4
    lines = ans.answerability_markdown(results)
    assert "mean ± sd over 2 seeds" in lines[0]
    assert ans.answerability_markdown({"rows": {}}) == []


def test_the_top_share_is_the_calibration_tied_at_the_largest_score():
    assert ans.top_share([0.1, 1.0, 1.0, 0.5]) == 0.5
    assert ans.top_share([0.3, 0.2]) == 0.5
