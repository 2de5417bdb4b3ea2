"""``visible``: the one function the CLI prints user and corpus text through (issue 47, item 6)."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from ragbound.cli.common import shown, visible
from ragbound.labels import BIDI_CONTROLS

_ACTED_ON = {"Cc", "Cs", "Zl", "Zp"}


def _hidden(char: str) -> bool:
    return unicodedata.category(char) in _ACTED_ON or char in BIDI_CONTROLS


def test_controls_become_their_escapes_and_other_unicode_stays() -> None:
    assert visible("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m"
    assert visible("a\nb\tc\rd\x00e\x7f\x9b") == "a\\nb\\tc\\rd\\x00e\\x7f\\x9b"
    assert visible("\u2028\u202e\udcff") == "\\u2028\\u202e\\udcff"
    assert visible("Größe, 東京, emoji 🐝, zero-width joiner \u200d") == (
        "Größe, 東京, emoji 🐝, zero-width joiner \u200d"
    )


def test_shown_escapes_rich_markup_too() -> None:
    assert shown("[bold]\x07[/]") == "\\[bold]\\x07\\[/]"


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=())))  # lone surrogates too
def test_nothing_a_terminal_acts_on_is_left(text: str) -> None:
    out = visible(text)
    assert not any(_hidden(char) for char in out)
    out.encode("utf-8")  # printable on a UTF-8 stream: no lone surrogate left
    if not any(_hidden(char) for char in text):
        assert out == text
