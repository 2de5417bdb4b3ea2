"""The online test on the real PubMedQA set-up (skips cleanly without ../shared/data)."""

import pytest

from benchmarks import datasets
from ragbound.detect import Guard
from ragbound.detect.evaluate import evaluate, split_queries
from ragbound.knowledge import KnowledgeBase

pytestmark = pytest.mark.skipif(
    datasets.missing_reason() is not None, reason=str(datasets.missing_reason())
)


@pytest.fixture(scope="module")
def pubmed_guard(tmp_path_factory: pytest.TempPathFactory) -> tuple[Guard, list[str]]:
    """A BM25 knowledge base over all 3,358 abstract paragraphs, calibrated on 400 questions."""
    corpus = datasets.write_pubmedqa_corpus(tmp_path_factory.mktemp("pubmed") / "corpus.jsonl")
    kb = KnowledgeBase.build([corpus], embedder="bm25", id_field="id")
    assert len(kb) > 3358  # a few long paragraphs take two chunks
    calibration, held_out = split_queries(datasets.pubmedqa_questions(), 0.4, seed=1)
    return Guard.calibrate(kb, calibration, k=32), held_out


def test_far_out_of_knowledge_is_separated_on_real_data(pubmed_guard):
    guard, held_out = pubmed_guard
    report = evaluate(guard, held_out, datasets.truthfulqa_questions(), samples=300, runs=3)
    assert report.statistics["mss"].auroc > 0.9
    assert report.statistics["energy"].auroc > 0.9


def test_real_false_positive_rate_is_near_alpha_on_held_out_questions(pubmed_guard):
    guard, held_out = pubmed_guard
    verdicts = guard.check_many(held_out)
    rate = sum(v.out_of_knowledge for v in verdicts) / len(verdicts)
    # i.i.d. held-out questions: the rejection rate is alpha up to sampling error
    assert rate <= 0.05 + 3 * (0.05 * 0.95 / len(verdicts)) ** 0.5 + 1 / 401


def test_chunk_ids_carry_the_record_ids(pubmed_guard):
    guard, _ = pubmed_guard
    first = guard.kb.chunks[0]
    assert first.doc_id.count("-") == 1 and first.metadata["pmid"] == first.doc_id.split("-")[0]
