"""English function words (articles, pronouns, prepositions, conjunctions, auxiliary verbs):
words that carry grammar rather than a topic, left out where words are matched by meaning
(the answerability test's question words, the keyword filter's TF-IDF). The list is
ragbound's own, in ``function_words.txt`` beside this module."""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def english_function_words() -> frozenset[str]:
    """The lower-case English function words of ``function_words.txt``."""
    text = resources.files(__package__).joinpath("function_words.txt").read_text("utf-8")
    lines = (line.strip() for line in text.splitlines())
    return frozenset(line for line in lines if line and not line.startswith("#"))
