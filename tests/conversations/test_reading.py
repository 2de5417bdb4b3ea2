"""Readings: how a conversation becomes the text the boundary test searches."""

from __future__ import annotations

import numpy as np
import pytest

from ragbound.conversations.model import conversation
from ragbound.conversations.reading import (
    FOLLOW,
    FOLLOW_MEAN,
    LAST,
    LOOKBACK,
    READINGS,
    RECENT,
    RECENT_TURNS,
    check_reading,
    generic_turns,
    mean_vector,
    opening,
    read,
    recent_text,
    refers_back,
    small_talk_turns,
)
from ragbound.conversations.turns import TurnVectors, read_batch, read_texts
from ragbound.errors import InputError


def chat(*turns: str):
    messages = []
    for turn in turns:
        messages += [{"role": "user", "content": turn}, {"role": "assistant", "content": "Ok."}]
    return conversation(messages[:-1])


class Words:
    """Unit vectors from the words of a text (a bag of words): a hand-made space in which
    which turns are close is plain to read; the real embedder is tested below."""

    def __init__(self):
        self.words: dict[str, int] = {}

    def __call__(self, texts: list[str]) -> np.ndarray:
        rows = []
        for text in texts:
            row = np.zeros(512)
            for word in text.lower().replace("?", "").split():
                row[self.words.setdefault(word, len(self.words))] += 1
            rows.append(row / np.linalg.norm(row))
        return np.stack(rows)


@pytest.mark.parametrize("reading", [FOLLOW, RECENT, LAST])
def test_a_query_and_a_first_turn_are_read_as_themselves(reading: str) -> None:
    assert read("Why do bees dance?", reading).text == "Why do bees dance?"
    first = read(chat("Why do bees dance?"), reading, Words())
    assert (first.text, first.turns) == ("Why do bees dance?", 1)


def test_last_reads_the_last_turn_and_recent_joins_the_recent_turns() -> None:
    talk = chat("one", "two", "three", "four")
    assert read(talk, LAST).text == "four"
    joined = read(talk, RECENT)
    assert joined.text == "two three four" and joined.turns == RECENT_TURNS


def test_recent_leaves_out_old_turns_that_would_pass_the_length_limit() -> None:
    talk = chat("a" * 60, "b" * 60, "c" * 10)
    text, turns = recent_text(talk, max_chars=80)
    assert (text, turns) == ("b" * 60 + " " + "c" * 10, 2)


def test_follow_joins_a_related_turn_and_reads_an_unrelated_one_alone() -> None:
    words = Words()
    follow_up = read(chat("how do bees dance", "why do bees dance"), FOLLOW, words)
    switch = read(chat("how do bees dance", "cheapest flight Paris"), FOLLOW, words)
    assert follow_up.turns == 2 and switch.turns == 1
    assert switch.text == "cheapest flight Paris"


def test_follow_joins_a_content_free_turn() -> None:
    assert read(chat("how do bees dance", "yes"), FOLLOW, Words()).turns == 2


def test_a_turn_that_refers_back_follows_whatever_its_words() -> None:
    talk = chat("how do bees dance", "And what are its weaknesses?")
    assert read(talk, FOLLOW, Words()).text == "how do bees dance And what are its weaknesses?"
    assert refers_back("and on the 5 GHz one?") and refers_back("Which is faster, that one?")
    # a longer turn names its subject: its dummy "it" does not point back
    assert not refers_back("Is it legal to own a rifle in the state of Texas?")
    assert not refers_back("Who won the 2018 World Cup?")


def test_a_turn_following_an_off_topic_turn_is_joined_with_it_alone() -> None:
    talk = chat("how do bees dance", "capital of peru", "capital of france")
    found = read(talk, FOLLOW, Words())
    assert (found.text, found.turns) == ("capital of peru capital of france", 2)


def test_a_return_to_the_topic_is_joined_with_the_turns_it_returns_to() -> None:
    talk = chat(
        "how do bees dance",
        "why do bees sleep",
        "capital of peru",
        "cheap flights lima",
        "bees again: bees sleep",
    )
    found = read(talk, FOLLOW, Words())
    assert found.text == "how do bees dance why do bees sleep bees again: bees sleep"
    assert found.turns > 1
    # beyond the lookback the old topic is forgotten
    far_back = chat("how do bees dance", *[f"topic{i} word{i}" for i in range(LOOKBACK)], "bees")
    assert read(far_back, FOLLOW, Words()).turns == 1


def test_the_segments_of_a_history_are_kept_between_turns() -> None:
    words = Words()
    words.links = {}  # what the gate's turn cache holds
    talk = chat("how do bees dance", "capital of peru", "capital of france")
    found = read(talk, FOLLOW, words)
    assert words.links == {("capital of peru", ("how do bees dance",), "Ok."): False}
    assert read(talk, FOLLOW, words) == found


def test_small_talk_is_marked_at_any_turn() -> None:
    words = Words()
    first = read(chat("thank you"), FOLLOW, words)
    later = read(chat("how do bees dance", "thank you"), FOLLOW, words)
    question = read(chat("how do bees dance"), FOLLOW, words)
    assert first.small_talk and first.turns == 1
    assert later.small_talk and later.text == "how do bees dance thank you"
    assert not question.small_talk
    assert not read(chat("thank you", "how do bees dance"), LAST, words).small_talk


def test_follow_without_vectors_reads_as_recent() -> None:
    assert read(chat("a b", "c d"), FOLLOW).text == "a b c d"


def test_a_long_answer_is_compared_by_its_opening() -> None:
    assert opening("bees dance to show the way", 12) == "bees dance"
    assert opening("short", 12) == "short"
    assert opening("x" * 20, 12) == "x" * 12


def test_an_unknown_reading_is_refused() -> None:
    assert check_reading(FOLLOW) == FOLLOW and set(READINGS) >= {FOLLOW, RECENT, LAST}
    with pytest.raises(ValueError, match="unknown reading 'mine'"):
        check_reading("mine")


def test_the_content_free_turns_and_small_talk_ship_with_the_package() -> None:
    turns = generic_turns()
    assert "yes" in turns and len(turns) >= 20
    assert "hi there" in small_talk_turns() and set(small_talk_turns()) <= set(turns)


def test_follow_with_the_bundled_embedder() -> None:
    from ragbound.embedders import load_dense_embedder

    embedder = load_dense_embedder("minilm")
    start = "How do honey bees tell each other where the flowers are?"
    cases = {
        "yes": 2,
        "And how far do they fly to find them?": 2,
        "Who won the 1998 football world cup?": 1,
        "What is the best recipe for lasagne?": 1,
        "And what are its enemies?": 2,
    }
    for turn, turns in cases.items():
        assert read(chat(start, turn), FOLLOW, embedder.encode).turns == turns, turn
    for talk in ("hi there", "thanks!", "ok", "Good morning!"):
        assert read(chat(talk), FOLLOW, embedder.encode).small_talk, talk
    for asked in ("Hi, how do bees find flowers?", "Thanks. Why do bees dance?"):
        assert not read(chat(asked), FOLLOW, embedder.encode).small_talk, asked


class Counted(Words):
    """:class:`Words` as an embedder (``encode``, ``encode_one``) that keeps every text it
    embedded, so a test can tell which texts a reading paid an embedding for."""

    def __init__(self):
        super().__init__()
        self.embedded: list[str] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        self.embedded += texts
        return self(texts)

    def encode_one(self, text: str) -> np.ndarray:
        return self.encode([text])[0]


def test_follow_mean_reads_follows_text_and_searches_the_word_weighted_mean() -> None:
    words = Words()
    talk = chat("how do bees dance in the hive", "why do bees dance")
    joined, meant = read(talk, FOLLOW, words), read(talk, FOLLOW_MEAN, words)
    assert (meant.text, meant.turns, meant.joined) == (joined.text, joined.turns, (0, 1))
    assert meant.reading == FOLLOW_MEAN and joined.vector is None
    rows = words(list(talk.user_turns))
    expected = (7 * rows[0] + 4 * rows[1]) / np.linalg.norm(7 * rows[0] + 4 * rows[1])
    np.testing.assert_allclose(meant.vector, expected, atol=1e-6)
    alone = read(chat("how do bees dance", "cheapest flight Paris"), FOLLOW_MEAN, words)
    assert alone.turns == 1 and alone.vector is None  # searched by its text's embedding


@pytest.mark.parametrize("turn", ["why do bees dance", "And what are its weaknesses?"])
def test_follow_mean_embeds_the_decided_turn_alone_where_follow_embeds_the_join_too(
    turn: str,
) -> None:
    history = ["how do bees dance in the hive", "do bees dance at night"]
    paid = {}
    for reading in (FOLLOW, FOLLOW_MEAN):
        embedder = Counted()
        vectors = TurnVectors(embedder)
        read_batch([chat(*history)], reading, vectors, prepare=None)  # the chat so far
        embedder.embedded.clear()
        read_batch([chat(*history, turn)], reading, vectors, prepare=None)
        paid[reading] = embedder.embedded
    assert paid[FOLLOW_MEAN] == [turn]
    assert paid[FOLLOW][-1] == " ".join([*history, turn])  # a second pass, the longer


def test_a_batch_searches_each_reads_own_vector_and_embeds_the_others_texts() -> None:
    vectors = TurnVectors(Counted())
    items = [chat("how do bees dance", "why do bees dance"), chat("cheapest flight Paris")]
    found = read_batch(items, FOLLOW_MEAN, vectors, prepare=None)
    np.testing.assert_allclose(found.prepared.vectors[0], found.reads[0].vector)
    np.testing.assert_allclose(found.prepared.vectors[1], vectors(["cheapest flight Paris"])[0])
    assert list(found.texts) == ["how do bees dance why do bees dance", "cheapest flight Paris"]


def test_the_mean_is_as_near_a_chunk_as_its_turns_are_on_average() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        rows = rng.normal(size=(3, 16))
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        chunk = rows.mean(axis=0) + rng.normal(scale=0.3, size=16)
        chunk /= np.linalg.norm(chunk)
        weights = rng.uniform(1, 20, size=3)
        average = float(weights @ (rows @ chunk) / weights.sum())
        if average > 0:
            assert float(mean_vector(rows, weights) @ chunk) >= average - 1e-9


def test_a_calibration_of_read_texts_refuses_follow_mean() -> None:
    # follow-mean searches vectors: its texts' embeddings would not be the null it meets
    with pytest.raises(InputError, match="follow-mean searches a mean of turn vectors"):
        read_texts(None, [chat("how do bees dance", "why")], FOLLOW_MEAN)
