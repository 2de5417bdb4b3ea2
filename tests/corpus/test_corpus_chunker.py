"""Tests of sentence splitting and chunking, including a property test of the packer."""

from __future__ import annotations

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragbound.corpus import (
    Chunk,
    ChunkingParams,
    Document,
    chunk_document,
    chunk_documents,
    split_sentences,
)
from ragbound.corpus.chunker import pack_sentences
from ragbound.errors import InputError

VOCABULARY = ["apple", "river", "stone", "cloud", "garden", "window", "lamp", "forest", "music"]


def doc_of(
    *sentences: str, doc_id: str = "d1", metadata: dict[str, object] | None = None
) -> Document:
    """A document whose text is the given sentences."""
    return Document(id=doc_id, text=" ".join(sentences), source="s.txt", metadata=metadata or {})


def sentence(n_words: int, word: str = "river") -> str:
    """A sentence of n_words words that the splitter keeps whole."""
    return " ".join(["The"] + [word] * (n_words - 1)) + "."


def is_run_of_sentences(text: str, sentences: list[str]) -> bool:
    """True if text is a contiguous run of whole sentences joined by spaces."""
    return any(
        text == " ".join(sentences[i:j])
        for i in range(len(sentences))
        for j in range(i + 1, len(sentences) + 1)
    )


# --- split_sentences -------------------------------------------------------------------------


def test_split_sentences_keeps_abbreviations_and_normalises_whitespace() -> None:
    text = "Dr. Smith went to Washington.   He  said\thello!\n\nDid it   work?  "
    assert split_sentences(text) == [
        "Dr. Smith went to Washington.",
        "He said hello!",
        "Did it work?",
    ]


def test_split_sentences_of_empty_text() -> None:
    assert split_sentences("") == []
    assert split_sentences(" \n\t ") == []


# --- chunk_document --------------------------------------------------------------------------


def test_short_document_is_one_chunk() -> None:
    doc = doc_of("A short one.", "Another short one.", metadata={"lang": "en"})
    (chunk,) = chunk_document(doc, chunk_words=50, overlap=10)
    assert chunk.text == "A short one. Another short one."
    assert (chunk.doc_id, chunk.source, chunk.position, chunk.n_words) == ("d1", "s.txt", 0, 6)
    assert chunk.metadata == {"lang": "en"}


def test_chunks_hold_whole_sentences_within_the_limit() -> None:
    sentences = [sentence(n) for n in (4, 6, 3, 5, 7, 2, 4)]
    chunks = chunk_document(doc_of(*sentences), chunk_words=10, overlap=0)
    assert len(chunks) > 1
    for chunk in chunks:
        assert chunk.n_words <= 10
        assert is_run_of_sentences(chunk.text, sentences)
    # no overlap: the chunks concatenate back to the document
    assert " ".join(c.text for c in chunks) == " ".join(sentences)
    assert [c.position for c in chunks] == list(range(len(chunks)))


def test_overlap_repeats_trailing_whole_sentences() -> None:
    s1, s2, s3, s4 = sentence(5, "apple"), sentence(3, "stone"), sentence(4, "lamp"), sentence(5)
    chunks = chunk_document(doc_of(s1, s2, s3, s4), chunk_words=12, overlap=4)
    assert [c.text for c in chunks] == [f"{s1} {s2} {s3}", f"{s3} {s4}"]


def test_overlap_takes_as_many_trailing_sentences_as_fit() -> None:
    s = [sentence(2, w) for w in ("apple", "stone", "lamp", "cloud", "music")]
    chunks = chunk_document(doc_of(*s), chunk_words=6, overlap=4)
    assert [c.text for c in chunks] == [" ".join(s[0:3]), " ".join(s[1:4]), " ".join(s[2:5])]


def test_overlap_is_dropped_when_next_sentence_would_not_fit() -> None:
    s1, s2 = sentence(4, "apple"), sentence(8, "stone")
    chunks = chunk_document(doc_of(s1, s2), chunk_words=10, overlap=5)
    assert [c.text for c in chunks] == [s1, s2]


def test_long_sentence_is_cut_into_overlapping_windows() -> None:
    words = ["Long", *(f"w{i}" for i in range(1, 25))]
    long = " ".join(words) + "."
    before, after = sentence(3, "apple"), sentence(3, "stone")
    chunks = chunk_document(doc_of(before, long, after), chunk_words=10, overlap=3)
    texts = [c.text for c in chunks]
    assert texts[0] == before
    assert texts[-1] == after
    windows = [t.split() for t in texts[1:-1]]
    assert all(len(w) <= 10 for w in windows)
    assert windows[0] == words[:10]
    assert windows[1][:3] == windows[0][-3:]  # word overlap between windows
    covered = [word for window in windows for word in window]
    assert set(covered) == {*words[:-1], "w24."}


def test_zero_overlap_windows() -> None:
    long = " ".join(["river"] * 20) + "."
    chunks = chunk_document(doc_of(long), chunk_words=5, overlap=0)
    assert [c.n_words for c in chunks] == [5, 5, 5, 5]


def test_empty_document_has_no_chunks() -> None:
    assert chunk_document(Document(id="e", text="  ", source="e.txt")) == []


def test_chunk_ids_are_stable_and_distinct() -> None:
    doc = doc_of(*(sentence(4, w) for w in VOCABULARY))
    first = chunk_document(doc, chunk_words=8, overlap=4)
    second = chunk_document(doc.model_copy(), chunk_words=8, overlap=4)
    assert [c.id for c in first] == [c.id for c in second]
    assert len({c.id for c in first}) == len(first)
    assert all(len(c.id) == 16 and int(c.id, 16) >= 0 for c in first)
    other = chunk_document(doc.model_copy(update={"id": "d2"}), chunk_words=8, overlap=4)
    assert not {c.id for c in first} & {c.id for c in other}


def test_chunk_id_is_the_documented_hash() -> None:
    import hashlib

    (chunk,) = chunk_document(doc_of("Hello there."), chunk_words=10, overlap=0)
    expected = hashlib.sha256(b"d1\x000\x00Hello there.").hexdigest()[:16]
    assert chunk.id == expected


def test_chunk_documents_concatenates_in_order() -> None:
    docs = [doc_of(sentence(3), doc_id="a"), doc_of(sentence(3), sentence(3), doc_id="b")]
    chunks = chunk_documents(docs, chunk_words=3, overlap=0)
    assert [(c.doc_id, c.position) for c in chunks] == [("a", 0), ("b", 0), ("b", 1)]


@pytest.mark.parametrize(
    ("chunk_words", "overlap", "message"),
    [
        (0, 0, "chunk_words must be at least 1"),
        (10, 10, "overlap must be at least 0 and smaller than chunk_words"),
        (10, -1, "overlap must be at least 0"),
        (10.5, 2, "chunk_words must be an integer"),
        (True, 0, "chunk_words must be an integer"),
    ],
)
def test_bad_parameters(chunk_words: object, overlap: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        chunk_document(doc_of("Text."), chunk_words=chunk_words, overlap=overlap)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=message):
        chunk_documents([], chunk_words=chunk_words, overlap=overlap)  # type: ignore[arg-type]


def test_chunking_params_validate_and_round_trip() -> None:
    params = ChunkingParams(chunk_words=100, overlap=20)
    assert ChunkingParams.model_validate_json(params.model_dump_json()) == params
    assert params.model_dump() == {"chunk_words": 100, "overlap": 20, "splitter": "ragbound"}
    assert ChunkingParams() == ChunkingParams(chunk_words=200, overlap=40)
    with pytest.raises(InputError, match="overlap must be at least 0 and smaller than"):
        ChunkingParams(chunk_words=10, overlap=10)
    with pytest.raises(InputError, match="chunk_words must be at least 1"):
        ChunkingParams(chunk_words=0)
    with pytest.raises(pydantic.ValidationError, match="overlap"):
        ChunkingParams.model_validate_json('{"chunk_words": 10, "overlap": 10}')


def test_chunking_params_of_an_older_splitter_say_to_index_again() -> None:
    """A manifest written when blingfire split the sentences does not load as if it matched."""
    stored = '{"chunk_words": 200, "overlap": 40, "splitter": "blingfire"}'
    with pytest.raises(pydantic.ValidationError, match=r"'blingfire'.*index the documents again"):
        ChunkingParams.model_validate_json(stored)


def test_pack_sentences_is_what_chunk_document_packs() -> None:
    sentences = [sentence(n) for n in (4, 6, 3, 5, 7, 2, 4)]
    chunks = chunk_document(doc_of(*sentences), chunk_words=10, overlap=4)
    assert pack_sentences(sentences, chunk_words=10, overlap=4) == [c.text for c in chunks]
    with pytest.raises(InputError, match="overlap must be at least 0"):
        pack_sentences(sentences, chunk_words=10, overlap=10)


# --- property test ---------------------------------------------------------------------------

sentences_strategy = st.lists(
    st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=30).map(
        lambda words: " ".join([words[0].capitalize(), *words[1:]]) + "."
    ),
    min_size=0,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(
    generated=sentences_strategy,
    chunk_words=st.integers(min_value=1, max_value=40),
    overlap_fraction=st.floats(min_value=0.0, max_value=0.99),
)
def test_chunker_properties(
    generated: list[str], chunk_words: int, overlap_fraction: float
) -> None:
    overlap = int(overlap_fraction * chunk_words)
    doc = doc_of(*generated)
    sentences = split_sentences(doc.text)
    assert sentences == generated
    chunks = chunk_document(doc, chunk_words=chunk_words, overlap=overlap)
    assert all(isinstance(c, Chunk) and 1 <= c.n_words <= chunk_words for c in chunks)
    assert [c.position for c in chunks] == list(range(len(chunks)))
    for s in sentences:
        n = len(s.split())
        if n <= chunk_words:
            assert any(s in c.text for c in chunks)
        else:  # every word position of an oversize sentence lands in some window
            assert sum(c.n_words for c in chunks) >= n
    for chunk in chunks:
        whole = is_run_of_sentences(chunk.text, sentences)
        cut = any(chunk.text in s and len(s.split()) > chunk_words for s in sentences)
        assert whole or cut
    if overlap == 0:  # without overlap the chunks give back the document, word for word
        assert " ".join(c.text for c in chunks).split() == doc.text.split()
    # progress: the number of chunks is bounded by the input size
    total_words = sum(len(s.split()) for s in sentences)
    assert len(chunks) <= len(sentences) + total_words
