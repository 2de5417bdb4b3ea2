"""ragbound's English function-word list: what it holds and what it leaves to the content."""

from __future__ import annotations

from importlib import resources

from ragbound.corpus.function_words import english_function_words


def _listed_lines() -> list[str]:
    text = resources.files("ragbound.corpus").joinpath("function_words.txt").read_text("utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and line[0] != "#"]


def test_the_list_is_lower_case_words_each_listed_once() -> None:
    lines = _listed_lines()
    assert len(lines) == len(set(lines)) == len(english_function_words())
    assert all(word.isalpha() and word == word.lower() and len(word) >= 2 for word in lines)


def test_it_holds_the_closed_classes_and_contraction_stems() -> None:
    words = english_function_words()
    for word in ("the", "which", "whose", "between", "although", "would", "themselves", "don"):
        assert word in words
    # "we've" and "they'll" leave "ve" and "ll" once a tokenizer drops one-letter pieces
    assert {"ve", "ll", "re", "doesn", "isn"} <= words


def test_content_and_number_words_are_left_out() -> None:
    words = english_function_words()
    for word in ("system", "fire", "computer", "bill", "interest", "two", "first", "hundred"):
        assert word not in words
