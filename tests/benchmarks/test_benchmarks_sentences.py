"""benchmarks/sentences.py: boundaries, the words shown around one, and the section's tables."""

from __future__ import annotations

import pytest

from benchmarks import sentences as bench
from ragbound.corpus import Document


def test_boundaries_count_non_space_characters() -> None:
    assert bench.boundaries(["One two.", "Three."]) == {7}
    assert bench.boundaries(["One."]) == set()
    assert bench.context("One two. Three four.", 7) == f"One two. {bench.MARK} Three four."


def test_compare_counts_and_lists_what_changes_chunks() -> None:
    pytest.importorskip("blingfire")
    # blingfire ends a sentence after "Dr." here; ragbound keeps the title with the name, and
    # the one-word sentence changes where the 200-word chunks break
    words = " ".join(["word"] * 149)
    text = f"The {words} removed. Dr. Zork " + " ".join(["said"] * 59) + " so."
    documents = [
        Document(id="same", text="One. Two.", source="t"),
        Document(id="differs", text=text, source="t"),
    ]
    row = bench.compare(documents)
    assert (row["documents"], row["identical"], row["chunks_identical"]) == (2, 1, 1)
    assert (row["ours"], row["blingfire"], row["agreed"]) == (2, 3, 2)
    # ragbound's "Dr. Zork ..." sentence is not blingfire's, nor its first chunk (without
    # "Dr."); the second chunk reads the same from both
    counted = (row["sentences"], row["sentences_new"], row["chunks"], row["chunks_new"])
    assert counted == (4, 1, 3, 1)
    assert row["characters"] == len(text) + 9
    assert row["differences"] == [
        {
            "document": "differs",
            "only": "blingfire",
            "context": f"word word removed. Dr. {bench.MARK} Zork said said said",
        }
    ]


def results(corpora: dict[str, dict]) -> dict:
    return {"corpora": corpora, "skipped": {"doc2dial": "not here"}}


def row(documents: int, identical: int, ours: int, theirs: int, agreed: int, chunks: int) -> dict:
    return {
        "documents": documents,
        "identical": identical,
        "ours": ours,
        "blingfire": theirs,
        "agreed": agreed,
        "chunks_identical": chunks,
        "sentences": ours + documents,
        "sentences_new": documents - identical,
        "chunks": documents,
        "chunks_new": documents - chunks,
        "characters": 1000,
        "seconds_ours": 0.5,
        "seconds_blingfire": 0.25,
        "differences": [],
    }


def test_the_table_gives_the_mean_and_the_worst_corpus() -> None:
    found = results(
        {
            "A": row(10, 9, 100, 100, 99, 10),  # boundaries agreeing: 99 of 101
            "B": row(4, 2, 50, 48, 46, 3),  # 46 of 52
            "Q": row(5, 5, 0, 0, 0, 5),  # one sentence each: no boundaries
        }
    )
    _, rows = bench.agreement_table(found)
    assert rows[2][4] == "n/a"
    mean, worst = rows[-2], rows[-1]
    assert mean[2] == f"{(0.9 + 0.5 + 1.0) / 3:.4f}"
    assert mean[4] == f"{(99 / 101 + 46 / 52) / 2:.4f}"
    assert worst[2] == "0.5000 (B)" and worst[5] == "0.7500 (B)"
    assert rows[1][6] == "2 of 54 / 1 of 4"


def test_the_section_lists_differences_and_what_was_not_measured() -> None:
    found = results({"A": row(1, 0, 1, 0, 0, 0)})
    found["corpora"]["A"]["differences"] = [
        {"document": "Title | part#1", "only": "ragbound", "context": "x. ‖ Y"}
    ]
    text = "\n".join(bench.sentences_markdown(found))
    assert "| A | `Title \\| part#1` | ragbound | x. ‖ Y |" in text
    assert "Not measured, doc2dial: not here" in text
    assert "ragbound 0.5 s, blingfire 0.2 s" in text
    skipped = {"skipped": {"all": "blingfire is not installed (the dev extra)"}}
    assert bench.sentences_markdown(skipped) == [
        "Not measured: blingfire is not installed (the dev extra)"
    ]
