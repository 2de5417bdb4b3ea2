"""ragbound's sentence splitter: its rules, its agreement with blingfire (the splitter it
replaced) on texts written here, and on the real corpus zoo (skipped without ../shared/data)."""

from __future__ import annotations

import pytest

from benchmarks import sentences as bench
from ragbound.corpus.sentences import SPLITTER, split_sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        (" \n\t ", []),
        ("No stop at the end", ["No stop at the end"]),
        ("One.  Two\nlines.\n\nThree!", ["One.", "Two lines.", "Three!"]),
        ("Is it? Yes. It is.", ["Is it?", "Yes.", "It is."]),
        ("Really? no.", ["Really? no."]),
        ("It fell in 2020. 2021 was calm.", ["It fell in 2020. 2021 was calm."]),
        ("Stop.Start", ["Stop.Start"]),
        ("A value of 3.5. The next.", ["A value of 3.5.", "The next."]),
        ("See Fig. 2 and Table 1. Then go.", ["See Fig. 2 and Table 1.", "Then go."]),
        ("Smith et al. found it. We did too.", ["Smith et al. found it.", "We did too."]),
        ("Smith et al. The end.", ["Smith et al.", "The end."]),
        ("Dr. Smith came. Mrs. Jones left.", ["Dr. Smith came.", "Mrs. Jones left."]),
        ("J. R. R. Tolkien wrote it.", ["J. R. R. Tolkien wrote it."]),
        ("It was A. The B. side.", ["It was A.", "The B. side."]),
        ("Use e.g. Python. It works.", ["Use e.g. Python.", "It works."]),
        ("The U.S. Army came. It left.", ["The U.S. Army came.", "It left."]),
        ("Mail x@example.com. Replies come.", ["Mail x@example.com. Replies come."]),
        ("Open http://x.org/a. Pages load.", ["Open http://x.org/a.", "Pages load."]),
        ("It ran 5 min. Next we ate.", ["It ran 5 min.", "Next we ate."]),
        ("It ran 5 min. Samples were cold.", ["It ran 5 min. Samples were cold."]),
        ('He said "Go." She went.', ['He said "Go."', "She went."]),
        ("It ended (at last). The end.", ["It ended (at last).", "The end."]),
        ("It ended. (The end.)", ["It ended.", "(The end.)"]),
        ("It ended. (the end)", ["It ended. (the end)"]),
        ("Steps. (1) Mix. (ii) stir.", ["Steps.", "(1) Mix.", "(ii) stir."]),
        ("Steps. b) mix it.", ["Steps.", "b) mix it."]),
        ("Listed: 1. First thing.", ["Listed: 1.", "First thing."]),
        ("It is done. [12] Then more.", ["It is done. [12]", "Then more."]),
        ("It is done.\n\n[12] Then more.", ["It is done.", "[12] Then more."]),
        ("It is done. [1] [2] Then more.", ["It is done.", "[1] [2] Then more."]),
        ("It is done . ) Then more .", ["It is done .", ") Then more ."]),
        ("Done. **Bold.** Plain.", ["Done.", "**Bold.**", "Plain."]),
        ("Done.\n\n## Heading\n\nText.", ["Done.", "## Heading Text."]),
        ("Done. • Next item.", ["Done.", "• Next item."]),
        ("Wait\u2026 Then it came.", ["Wait\u2026", "Then it came."]),
    ],
)
def test_rules(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_sentences_give_back_the_words_in_order() -> None:
    text = "  First line\nof text. Second\t(one). Third? [4] Fourth!  "
    assert " ".join(split_sentences(text)) == " ".join(text.split())


def test_the_name_chunking_records() -> None:
    assert SPLITTER == "ragbound"


# texts of the kinds the zoo holds, on which both splitters put the same boundaries
AGREED = [
    "Background: Smoking raises risk. Methods: We enrolled 120 patients (mean age 54.3 years). "
    "Results: The rate fell from 12% to 8% (p < 0.05). Conclusions: It works.",
    "The virus binds ACE2 [12]. Its spike protein (S) was described by Li et al. in 2003. "
    "Fig. 3 shows the structure. However, e.g. SARS-CoV differs.",
    "Call 1-800-772-1213 between 8 a.m. and 7 p.m. on weekdays. You can also apply online. "
    'Choose "Apply for benefits." Then follow the steps.',
    "The album was released in the U.S. on May 5 . It reached No. 1 . `` It is great , '' "
    "a critic wrote .",
    "Did you lose your card? Report it now! We will send a new one within 7 days.",
    "Samples were kept at 4 °C for 30 min. The supernatant was removed by Dr. Smith.",
]


def test_agrees_with_blingfire_on_texts_written_here() -> None:
    pytest.importorskip("blingfire")
    for text in AGREED:
        assert split_sentences(text) == bench.blingfire_sentences(text), text


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The sentences benchmark's comparison on every zoo corpus present."""
    pytest.importorskip("blingfire")
    results = bench.measure(tmp_path_factory.mktemp("sentences"))
    if not results["corpora"]:
        pytest.skip(f"no corpus of the zoo here: {results['skipped']}")
    return results


def test_agrees_with_blingfire_on_the_real_corpora(zoo: dict) -> None:
    """Measured 0.997 or more of boundaries agreeing on every corpus, and identical chunks on
    all but 6 of 10,216 documents (docs/benchmarks.md, "Sentence splitting")."""
    documents = differing = 0
    for name, row in zoo["corpora"].items():
        share = bench.shares(row)
        assert share["boundaries"] is None or share["boundaries"] >= 0.995, name
        assert share["chunks"] is not None and share["chunks"] >= 0.95, name
        documents += row["documents"]
        differing += row["documents"] - row["chunks_identical"]
    assert differing <= 0.002 * documents
