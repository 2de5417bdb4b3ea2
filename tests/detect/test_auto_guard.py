"""calibrate --statistic auto keeps the default (MSS) when leave-documents-out cannot stand for
an uncovered topic, and a group field (index --group-field) masks whole groups.

The corpus is written here: eight support topics, each said ten ways (near-duplicate records,
one record per document, like an intent corpus), asked ten other ways."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragbound.corpus import Document
from ragbound.corpus.groups import chunk_groups, suggest_group_field
from ragbound.detect import Guard
from ragbound.detect.combined import Candidate, QueryFeatures, feature_depth
from ragbound.detect.select import (
    MIN_GROUPS,
    ProxyShape,
    default_candidate,
    keep_default_because,
    learning_and_null,
    proxy_shape,
)
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.stats import auroc_standard_error
from tests.cli.runner import run

TOPICS = {
    "lost_card": "I lost my bank card and need to block it",
    "exchange_rate": "what exchange rate do you use when I pay in euros",
    "pin_change": "how can I change the PIN of my debit card",
    "refund": "the shop promised a refund but it has not arrived",
    "top_up": "my top up by bank transfer has not shown up",
    "address": "how do I update my home address in the app",
    "cash_fee": "why was I charged a fee for a cash withdrawal",
    "delivery": "when will my new card be delivered",
}
RECORD_WAYS = (
    "{}.",
    "Hi, {}.",
    "Hello, {}, please.",
    "{}, thanks.",
    "Quick question: {}.",
    "Please help, {}.",
    "Good morning, {}.",
    "Excuse me, {}.",
    "{} - can you help?",
    "Hey there, {}.",
)
QUESTION_WAYS = (
    "Hey, {}?",
    "Can you tell me: {}?",
    "Hi there, {}?",
    "Sorry to bother you, {}.",
    "{}, what should I do?",
    "Help: {}!",
    "Good evening, {}.",
    "{}?",
    "Urgent: {}.",
    "Hello again, {}.",
)
QUESTIONS = [way.format(core) for core in TOPICS.values() for way in QUESTION_WAYS]
TOPIC_OF = {q: name for name in TOPICS for q in QUESTIONS if TOPICS[name] in q}


def documents() -> list[Document]:
    return [
        Document(
            id=f"{name}-{i}",
            text=way.format(core),
            source="support.jsonl",
            metadata={"topic": name},
        )
        for name, core in TOPICS.items()
        for i, way in enumerate(RECORD_WAYS)
    ]


@pytest.fixture(scope="module")
def plain() -> KnowledgeBase:
    return KnowledgeBase.from_documents(documents(), embedder="minilm")


@pytest.fixture(scope="module")
def grouped() -> KnowledgeBase:
    return KnowledgeBase.from_documents(documents(), embedder="minilm", group_field="topic")


def learning_features(kb: KnowledgeBase) -> QueryFeatures:
    learning, _ = learning_and_null(QUESTIONS, None, seed=0)
    return QueryFeatures(kb, learning, feature_depth(kb), masked=True)


def test_near_duplicate_records_without_a_group_keep_mss_and_say_why(plain: KnowledgeBase):
    guard = Guard.calibrate(plain, QUESTIONS, statistic="auto")
    selection = guard.calibration.manifest.selection
    assert selection is not None and selection.proposed is not None
    assert selection.picked.label == "chunk mss" == selection.default.label
    assert guard.config.statistic == "mss" and guard.k == 1
    # each record is its own document: masking three leaves seven siblings that answer it
    assert selection.n_groups >= MIN_GROUPS
    assert selection.sibling_share > 0.5
    assert "near-duplicate sibling" in selection.kept_default_because
    assert selection.reason().startswith("kept chunk mss (the default): ")
    assert "--group-field" in selection.reason()


def test_a_group_field_masks_whole_groups(plain: KnowledgeBase, grouped: KnowledgeBase):
    assert plain.groups() == [f"doc:{c.doc_id}" for c in plain.chunks]
    assert grouped.groups() == [f"topic={c.metadata['topic']}" for c in grouped.chunks]
    topic_of_row = [c.metadata["topic"] for c in grouped.chunks]
    by_group = learning_features(grouped)
    by_document = learning_features(plain)
    assert len(by_group.masked_rows) == len(by_group.queries)  # every query kept enough rows
    for j, i in enumerate(by_group.masked_rows):
        own = TOPIC_OF[by_group.queries[i]]
        assert f"topic={own}" in by_group.masked_groups[i]
        left = {topic_of_row[r] for r in by_group.masked_hits[("chunk",)].indices[j]}
        assert not left & {g.removeprefix("topic=") for g in by_group.masked_groups[i]}
    # by document, the same questions still find their own topic's records after masking
    stays = [
        TOPIC_OF[by_document.queries[i]]
        == topic_of_row[by_document.masked_hits[("chunk",)].indices[j, 0]]
        for j, i in enumerate(by_document.masked_rows)
    ]
    assert np.mean(stays) > 0.8
    # masking the whole topic moves the nearest chunk away: no siblings left behind
    assert proxy_shape(by_group).sibling_share < proxy_shape(by_document).sibling_share
    assert proxy_shape(by_group).n_groups == len(TOPICS)


def test_eight_groups_are_too_few_and_auto_says_so(grouped: KnowledgeBase):
    guard = Guard.calibrate(grouped, QUESTIONS, statistic="auto")
    selection = guard.calibration.manifest.selection
    assert selection.n_groups == len(TOPICS) < MIN_GROUPS
    assert selection.picked.label == "chunk mss"
    assert selection.kept_default_because.startswith(f"only {len(TOPICS)} groups left out")


def test_the_group_field_is_kept_and_refused_when_no_record_has_it(
    grouped: KnowledgeBase, tmp_path: Path
):
    grouped.save(tmp_path / "kb")
    assert KnowledgeBase.load(tmp_path / "kb").groups() == grouped.groups()
    with pytest.raises(InputError, match="group field 'topc': no record has a value for it"):
        KnowledgeBase.from_documents(documents(), embedder="bm25", group_field="topc")


def test_a_knowledge_base_made_before_groups_masks_its_documents(tmp_path: Path):
    KnowledgeBase.from_documents(documents(), embedder="bm25").save(tmp_path / "kb")
    path = tmp_path / "kb" / "manifest.json"
    manifest = json.loads(path.read_text())
    assert manifest.pop("group_field") is None
    path.write_text(json.dumps(manifest))
    older = KnowledgeBase.load(tmp_path / "kb")
    assert older.group_field is None
    assert older.groups() == [f"doc:{c.doc_id}" for c in older.chunks]


# ----------------------------------------------------------------- the pure decision rule
def candidate(statistic: str, auc: float, granularity: str = "chunk", k: int = 1) -> Candidate:
    return Candidate(statistic=statistic, k=k, granularity=granularity, auroc=auc, flagged=0.5)


MSS = candidate("mss", 0.80)
COMBINED = candidate("combined", 0.90, "chunk,sentence", 32)
GOOD = ProxyShape(n_groups=150, sibling_share=0.1)


def test_a_clear_winner_on_a_proxy_that_moves_the_questions_stands():
    assert keep_default_because(COMBINED, MSS, 0.90, 250, 250, GOOD) is None
    lexical = ProxyShape(n_groups=150, sibling_share=None)  # BM25: no scale for the margin
    assert keep_default_because(COMBINED, MSS, 0.90, 250, 250, lexical) is None


def test_lexical_knowledge_counts_groups_but_no_siblings():
    bm25 = KnowledgeBase.from_documents(documents(), embedder="bm25", group_field="topic")
    shape = proxy_shape(learning_features(bm25))
    assert shape == ProxyShape(n_groups=len(TOPICS), sibling_share=None)


@pytest.mark.parametrize(
    ("shape", "best", "fragment"),
    [
        (ProxyShape(19, 0.1), 0.90, "only 19 groups left out (under 20)"),
        (ProxyShape(150, 0.7), 0.90, "70% of left-out queries kept a near-duplicate sibling"),
        (GOOD, 0.58, "no candidate separates left-out queries (best AUROC 0.580)"),
    ],
)
def test_a_proxy_that_cannot_simulate_an_uncovered_topic_keeps_the_default(
    shape: ProxyShape, best: float, fragment: str
):
    assert fragment in keep_default_because(COMBINED, MSS, best, 250, 250, shape)


def test_the_pick_must_beat_mss_by_more_than_its_standard_error():
    error = auroc_standard_error(0.82, 250, 250)
    close = candidate("energy", 0.80 + error * 0.9, k=4)
    reason = keep_default_because(close, MSS, 0.85, 250, 250, GOOD)
    assert reason is not None and f"within one standard error ({error:.3f})" in reason
    ahead = candidate("energy", 0.80 + error * 1.5, k=4)
    assert keep_default_because(ahead, MSS, 0.85, 250, 250, GOOD) is None
    assert "nothing beats it" in keep_default_because(MSS, MSS, 0.80, 250, 250, GOOD)


def test_the_default_is_mss_at_the_knowledge_bases_granularity():
    ranked = [COMBINED, candidate("mss", 0.85, "chunk,sentence"), MSS]
    assert default_candidate(ranked, "chunk,sentence").granularity == "chunk,sentence"
    assert default_candidate(ranked, "chunk") == MSS
    assert default_candidate(ranked, "window") == MSS  # not compared: chunk MSS


# ---------------------------------------------------------------- index --group-field
def test_index_suggests_a_grouping_field_and_records_the_one_given(monkeypatch, capsys, tmp_path):
    corpus = tmp_path / "support.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": d.id, "text": d.text, "topic": d.metadata["topic"]}) + "\n"
            for d in documents()
        )
    )

    def index(out: str, *options: str) -> tuple[int, str, str]:
        where = ["--out", str(tmp_path / out), "--embedder", "bm25"]
        return run(monkeypatch, capsys, "index", str(corpus), *where, *options)

    code, _, err = index("a")
    assert code == 0
    assert "field 'topic' has 8 values, 10 records each" in err
    assert "--group-field topic" in err
    code, out, err = index("b", "--group-field", "topic", "--json")
    assert code == 0 and "hint" not in err
    assert json.loads(out)["group_field"] == "topic"
    code, out, err = index("b", "--group-field", "topic", "--overwrite")
    assert code == 0 and "grouped by topic (8 groups)" in " ".join(out.split()), err
    assert KnowledgeBase.load(tmp_path / "b").groups()[0] == "topic=lost_card"


def test_a_field_with_a_value_per_record_is_not_suggested():
    ids = [{"url": f"u{i}", "lang": "en"} for i in range(40)]
    assert suggest_group_field(ids) is None  # one value, or one per record
    topics = [{"topic": f"t{i % 8}", "lang": "en" if i % 2 else "fr"} for i in range(40)]
    assert suggest_group_field(topics) == ("topic", 8)  # the finer of two groupings
    assert chunk_groups([], "topic") == []
