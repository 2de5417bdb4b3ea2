"""Fine search units: parsing a granularity, sentence windows, units cut from chunks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragbound.corpus import Document, chunk_document
from ragbound.corpus.units import (
    UnitParams,
    parse_granularity,
    sentence_windows,
    split_units,
    unit_params,
)
from ragbound.errors import InputError

SENTENCES = [
    "The mill grinds wheat into flour.",
    "Its wheel turns in the river.",
    "Millers once paid a tithe to the lord.",
    "The river froze in the winter of 1709.",
    "Then the mill stood still for two months.",
]


def test_parse_granularity_orders_and_deduplicates():
    assert parse_granularity("window,chunk") == ("chunk", "window")
    assert parse_granularity(" sentence , sentence ") == ("sentence",)
    assert parse_granularity(["sentence", "chunk"]) == ("chunk", "sentence")


@pytest.mark.parametrize("bad", ["page", "", ",", "chunk,pages"])
def test_parse_granularity_refuses_unknown_or_empty(bad: str):
    with pytest.raises(InputError, match="granularity"):
        parse_granularity(bad)


def test_sentence_windows_slide_by_one_sentence():
    assert sentence_windows(SENTENCES[:4], 3) == [
        " ".join(SENTENCES[0:3]),
        " ".join(SENTENCES[1:4]),
    ]
    assert sentence_windows(SENTENCES[:2], 3) == [" ".join(SENTENCES[:2])]
    assert sentence_windows([], 3) == []


@given(st.integers(min_value=0, max_value=12), st.integers(min_value=2, max_value=5))
def test_windows_cover_every_sentence_in_order(n: int, size: int):
    sentences = [f"S{i}." for i in range(n)]
    windows = sentence_windows(sentences, size)
    assert len(windows) == (max(1, n - size + 1) if n else 0)
    covered = {s for w in windows for s in w.split()}
    assert covered == set(sentences)


def test_units_point_to_the_chunk_that_holds_them():
    doc = Document(id="mill", text=" ".join(SENTENCES), source="mill.txt")
    # 14 words per chunk, 7 words overlap: sentences repeat across chunks
    chunks = chunk_document(doc, chunk_words=14, overlap=7)
    assert len(chunks) >= 3
    units = split_units(chunks, UnitParams(granularity=("chunk", "sentence", "window")))
    sentences = [u for u in units if u.granularity == "sentence"]
    # every sentence once, at the first chunk that holds it
    assert [u.text for u in sentences] == SENTENCES
    for unit in units:
        assert unit.text in chunks[unit.chunk].text
    first_row = {s: min(i for i, c in enumerate(chunks) if s in c.text) for s in SENTENCES}
    assert all(u.chunk == first_row[u.text] for u in sentences)
    # every chunk is reachable through each kind of unit
    for kind in ("sentence", "window"):
        assert {u.chunk for u in units if u.granularity == kind} == set(range(len(chunks)))


def test_units_are_numbered_from_first_row_and_chunks_only_has_none():
    doc = Document(id="mill", text=" ".join(SENTENCES), source="mill.txt")
    chunks = chunk_document(doc)
    assert split_units(chunks, UnitParams()) == []
    units = split_units(chunks, UnitParams(granularity=("sentence",)), first_row=7)
    assert {u.chunk for u in units} == {7}
    assert len(units) == len(SENTENCES)


def test_repeated_sentences_of_one_document_are_kept_once_but_other_documents_keep_theirs():
    text = "Close the gate. Feed the hens. Close the gate."
    chunks = chunk_document(Document(id="a", text=text, source="a"))
    chunks += chunk_document(Document(id="b", text="Close the gate.", source="b"))
    units = split_units(chunks, UnitParams(granularity=("sentence",)))
    assert [(u.chunk, u.text) for u in units] == [
        (0, "Close the gate."),
        (0, "Feed the hens."),
        (1, "Close the gate."),
    ]


@pytest.mark.parametrize(
    ("granularity", "window", "message"),
    [
        ("page", 3, "unknown unit"),
        ("window", 1, "at least 2"),
        ("window", 2.5, "must be an integer"),
        ("window", True, "must be an integer"),
    ],
)
def test_unit_params_refuses_bad_values(granularity: str, window: object, message: str):
    with pytest.raises(InputError, match=message):
        unit_params(granularity, window)  # type: ignore[arg-type]


def test_unit_params_lists_what_is_indexed():
    params = unit_params("sentence", 3)
    assert params.granularity == ("sentence",)
    assert params.indexed == ("chunk", "sentence")
    assert params.fine == ("sentence",)
    assert UnitParams.model_validate_json(params.model_dump_json()) == params
