"""Readings: how a conversation becomes the text the boundary test searches."""

from __future__ import annotations

import numpy as np
import pytest

from ragbound.conversation import conversation
from ragbound.detect.reading import (
    FOLLOW,
    LAST,
    READINGS,
    RECENT,
    RECENT_TURNS,
    check_reading,
    generic_turns,
    opening,
    read,
    recent_text,
)


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


def test_the_content_free_turns_ship_with_the_package() -> None:
    turns = generic_turns()
    assert "yes" in turns and len(turns) >= 20


def test_follow_with_the_bundled_embedder() -> None:
    from ragbound.embedders import load_dense_embedder

    embedder = load_dense_embedder("minilm")
    start = "How do honey bees tell each other where the flowers are?"
    cases = {
        "yes": 2,
        "And how far do they fly to find them?": 2,
        "Who won the 1998 football world cup?": 1,
        "What is the best recipe for lasagne?": 1,
    }
    for turn, turns in cases.items():
        assert read(chat(start, turn), FOLLOW, embedder.encode).turns == turns, turn
