"""The corpus zoo: its new loaders (BANKING77-OOS, CLAP NQ), its rows and the worst loss."""

from __future__ import annotations

import json

import pytest

from benchmarks import datasets, zoo
from ragbound.corpus import Document
from ragbound.knowledge import KnowledgeBase
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE, TOPICS

banking = pytest.mark.skipif(
    datasets.banking77oos_missing_reason() is not None,
    reason=str(datasets.banking77oos_missing_reason()),
)
clapnq = pytest.mark.skipif(
    datasets.clapnq_missing_reason() is not None, reason=str(datasets.clapnq_missing_reason())
)


# ------------------------------------------------------------------------- loaders
@banking
def test_banking77oos_has_its_published_splits():
    train = datasets.banking77oos("train")
    assert len(train) == 5903  # 5,905 lines, 2 of them blank
    assert len({intent for _, intent in train}) == 50
    assert len(datasets.banking77oos("valid")) == 1506
    assert len(datasets.banking77oos("test")) == 2000
    oos = datasets.banking77oos("id-oos_test")
    assert len(oos) == 1076 and {intent for _, intent in oos} == {"oos"}
    assert all(query for query, _ in train + oos)
    # the zoo's two corpora of them: a record a document, or an intent a document
    assert len({doc.id for doc in zoo.banking_documents()}) == 5903
    assert len({doc.id for doc in zoo.banking_documents(by_intent=True)}) == 50


@clapnq
def test_clapnq_has_300_questions_of_each_kind_with_their_passage():
    for kind in datasets.CLAPNQ_KINDS:
        rows = datasets.clapnq(kind)
        assert len(rows) == 300
        assert all(row["question"] and row["title"] and row["text"] for row in rows)


def test_loaders_read_a_data_root_of_the_published_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGBOUND_DATA", str(tmp_path))
    assert datasets.banking77oos_missing_reason() is not None
    for split in datasets.BANKING77_SPLITS:
        folder = tmp_path / "banking77oos" / split
        folder.mkdir(parents=True)
        (folder / "seq.in").write_text("lost my card\n\nwhere is my refund?\n")
        (folder / "label").write_text("lost_card\nlost_card\nrefund\n")
    assert datasets.banking77oos_missing_reason() is None
    assert datasets.banking77oos("train") == [
        ("lost my card", "lost_card"),
        ("where is my refund?", "refund"),
    ]
    (tmp_path / "banking77oos" / "test" / "label").write_text("lost_card\n")
    with pytest.raises(ValueError, match="3 queries but 1 labels"):
        datasets.banking77oos("test")
    with pytest.raises(ValueError, match="choose among"):
        datasets.banking77oos("ood")
    folder = tmp_path / "clapnq"
    folder.mkdir()
    record = {
        "id": 7,
        "input": " who built the wall ",
        "passages": [{"title": "Wall", "text": "Built by many.", "sentences": []}],
        "output": [],
    }
    for kind in datasets.CLAPNQ_KINDS:
        (folder / f"clapnq_dev_{kind}.jsonl").write_text(json.dumps(record) + "\n\n")
    assert datasets.clapnq("unanswerable") == [
        {"id": "7", "question": "who built the wall", "title": "Wall", "text": "Built by many."}
    ]


# -------------------------------------------------------------------------- worst loss
def _rows(aurocs: dict[str, dict[str, list[float]]]) -> dict:
    return {
        corpus: {choice: {"auroc": values} for choice, values in choices.items()}
        for corpus, choices in aurocs.items()
    }


def test_worst_loss_is_the_largest_paired_drop_over_corpora():
    rows = _rows(
        {
            "A": {zoo.DEFAULT: [0.80, 0.90], "auto": [0.70, 0.70]},  # loses 0.10, 0.20
            "B": {zoo.DEFAULT: [0.90, 0.90], "auto": [0.95, 0.97]},  # gains
            "C": {zoo.DEFAULT: [0.90, 0.90], "auto": [0.10]},  # a seed refused: not paired
        }
    )
    worst = zoo.worst_loss(rows, "auto")
    assert worst["corpus"] == "A"
    assert worst["loss"] == pytest.approx(0.15)
    assert worst["sd"] == pytest.approx(0.05)


def test_a_choice_that_gains_everywhere_has_a_negative_worst_loss():
    rows = _rows(
        {
            "A": {zoo.DEFAULT: [0.80], "knn": [0.85]},
            "B": {zoo.DEFAULT: [0.80], "knn": [0.90]},
        }
    )
    assert zoo.worst_loss(rows, "knn") == {"loss": pytest.approx(-0.05), "sd": 0.0, "corpus": "A"}
    assert zoo.worst_loss(rows, "auto") is None  # never measured


# --------------------------------------------------------------------------- rows
@pytest.fixture
def split() -> zoo.ZooSplit:
    # one sentence a document, four times over: more chunks than the default k = 32
    docs = [
        Document(id=f"{topic}-{i}-{copy}", text=sentence, source=topic)
        for topic, sentences in TOPICS.items()
        for i, sentence in enumerate(sentences)
        for copy in range(4)
    ]
    kb = KnowledgeBase.from_documents(docs, embedder="bm25")
    half = len(IN_KNOWLEDGE) // 2
    return zoo.ZooSplit(
        kb,
        IN_KNOWLEDGE[:half],
        IN_KNOWLEDGE[half:],
        OUT_OF_KNOWLEDGE[:2],
        OUT_OF_KNOWLEDGE[2:],
        {"apart": OUT_OF_KNOWLEDGE},
    )


@pytest.mark.filterwarnings("ignore:.*calibration queries cannot flag anything")
def test_the_default_is_mss_and_every_row_has_its_measures(split: zoo.ZooSplit):
    rows = zoo.split_rows(split, seed=0, choices=(zoo.DEFAULT, "mss", "knn"))
    for row in rows.values():
        row.pop("seconds")
    assert rows[zoo.DEFAULT] == rows["mss"]
    assert set(rows["knn"]) == {*zoo.METRICS, "apart"}
    assert set(rows["knn"]["apart"]) == {"flagged", "auroc"}
    results = {"rows": {}, "seeds": [0], "choices": [zoo.DEFAULT, "mss", "knn"]}
    zoo.collect(results["rows"], "toy", rows)
    assert results["rows"]["toy"]["knn"]["apart: flagged"] == [rows["knn"]["apart"]["flagged"]]
    header, table = zoo.summary_table(results)
    assert header[-1] == "worst loss against the default (corpus)"
    assert [row[0] for row in table] == [zoo.DEFAULT, "mss", "knn"]
    assert table[1][-1] == "+0.000 ± 0.000 (toy)"


def test_saved_results_render_in_the_zoo_order():
    rows = _rows({"PubMedQA-half": {zoo.DEFAULT: [0.9]}, "COVID-QA halves": {zoo.DEFAULT: [0.6]}})
    saved = json.loads(json.dumps({"rows": rows, "sizes": {}}, sort_keys=True))  # as zoo.json
    assert list(saved["rows"]) == ["COVID-QA halves", "PubMedQA-half"]
    results = zoo.ordered(saved)
    assert list(results["rows"]) == ["PubMedQA-half", "COVID-QA halves"]  # zoo.CORPORA's order
    assert results["auto_picks"] == {}


def test_mixed_questions_are_nested_seeded_samples_after_the_synthetic_ones():
    real = [f"real {i}" for i in range(300)]
    samples = {n: zoo.mixed_questions([], real, n, seed=3) for n in zoo.REAL_COUNTS}
    assert [len(samples[n]) for n in zoo.REAL_COUNTS] == list(zoo.REAL_COUNTS)
    assert samples[50][:20] == samples[20] and samples[100][:50] == samples[50]  # 20 in 50 in 100
    assert zoo.mixed_questions([], real, 20, seed=4) != samples[20]
    assert zoo.mixed_questions(["s1", "s2"], real, None, seed=3) == ["s1", "s2", *real]
    assert zoo.mixed_questions(["s1"], real[:5], 20, seed=3)[0] == "s1"  # fewer than asked: all
    assert sorted(zoo.mixed_questions(["s1"], real[:5], 20, seed=3)[1:]) == real[:5]


@pytest.mark.filterwarnings("ignore:.*calibration queries cannot flag anything")
def test_the_synthetic_zoo_rows_and_section(split: zoo.ZooSplit):
    split.synthetic = list(IN_KNOWLEDGE)
    rows = zoo.split_rows(split, seed=0, choices=zoo.SYNTH_CHOICES)
    assert all("fpr" in row for row in rows.values())
    results = {
        "rows": {},
        "seeds": [0],
        "choices": list(zoo.SYNTH_CHOICES),
        "synthetic": True,
        "synthetic_n": len(IN_KNOWLEDGE),
        "skipped": {},
        "sizes": {"PubMedQA": split.sizes()},
        "synthetic_generation": {
            "PubMedQA": [{"n": 7, "requested": 8, "seconds": 0.1, "llm_seconds": 120.0}]
        },
    }
    zoo.collect(results["rows"], "PubMedQA", rows)
    text = "\n".join(zoo.synth_markdown(results))
    assert "not run: PubMedQA-half" in text
    assert "| PubMedQA | 7 (8) | 2.0 | 0 |" in text
    _, table = zoo.synth_corpus_table(results)
    by_choice = {row[1]: row for row in table}
    assert by_choice[zoo.DEFAULT][4] == ""  # no difference against itself
    assert by_choice["synthetic + 20 real (mss)"][2] == f"7 + {len(split.calibration)}"
    assert by_choice["20 real (mss)"][2] == f"{len(split.calibration)}"


def test_real_needed_says_which_real_question_counts_are_within_the_slack():
    def rows(fprs: dict[str, float]) -> dict:
        return {"A": {c: {"fpr": [v]} for c, v in fprs.items()}}

    mixes = {
        zoo.SYNTH_ONLY: 0.3,
        "synthetic + 20 real (mss)": 0.2,
        "synthetic + 50 real (mss)": 0.06,
        "20 real (mss)": 0.1,
    }
    mixes["synthetic + 100 real (mss)"] = 0.08
    assert zoo.real_needed(rows(mixes), synthetic=True) == "50 (not 20, 100)"
    assert zoo.real_needed(rows(mixes), synthetic=False) == "none (not 20)"
    assert zoo.worst_fpr(rows(mixes), zoo.SYNTH_ONLY) == (0.3, "A")


def test_the_fpr_of_one_draw_of_n_calibration_questions():
    assert zoo.fpr_spread(20) == (pytest.approx(1 / 21), pytest.approx(0.0454, abs=1e-4))
    mean, sd = zoo.fpr_spread(100)
    assert mean == pytest.approx(5 / 101) and sd == pytest.approx(0.0215, abs=1e-4)
