"""ragbound's sentence splitter: a few rules over whitespace-separated tokens, in pure Python.

Its rules:

- Line breaks and runs of whitespace count as one space; sentences come back with their
  whitespace collapsed, so joining them with spaces gives the text's words back in order.
- A sentence can end after a token whose last character, before any closing quotes or
  brackets, is ``.``, ``!``, ``?`` or ``…``.
- It ends there when the next word begins with a capital (or caseless) letter, looked for
  past quotes, brackets, bullets, dashes and Markdown marks (``**``, ``#``); when a list
  marker follows (``(1)``, ``(ii)``, ``b)``, ``2.``); or when nothing but such marks is
  left. Before a digit or a lower-case word it does not end.
- A bare period after an abbreviation (a common one such as ``Dr.``, ``Fig.``, ``et al.``,
  ``vs.``, ``mg``; a single capital initial ``J.``; a dotted one such as ``e.g.``, ``U.S.``
  or ``example.com``) ends a sentence only before a word that often starts one (``The``,
  ``We``, ``However`` ...). A token ending in a digit (``3.5.``) is never an abbreviation.
- A footnote mark such as ``[12]`` one space after the end stays with that sentence.

``python -m benchmarks.run sentences`` measures how far the rules agree with blingfire on the
corpus zoo (docs/benchmarks.md, "Sentence splitting").
"""

from __future__ import annotations

import re
from typing import Literal

# the splitter's name, as ChunkingParams (and so every index manifest) records it
SplitterName = Literal["ragbound"]
SPLITTER: SplitterName = "ragbound"

_STOPS = frozenset(".!?…")
_CLOSERS = ")]}\"'\N{RIGHT DOUBLE QUOTATION MARK}\N{RIGHT SINGLE QUOTATION MARK}»*"  # *: Markdown
_OPENERS = "([{\"'\N{LEFT DOUBLE QUOTATION MARK}\N{LEFT SINGLE QUOTATION MARK}«"
# what may stand before the first word of a sentence and is looked past to find that word
_LEADING_MARKS = _OPENERS + _CLOSERS + "•†‡-\N{EN DASH}\N{EM DASH}#"
_LIST_MARKER = re.compile(r"\((?:\d{1,3}|[a-z]|[ivx]{1,4})\)|\d{1,3}[.)]|[a-z]\)")
_FOOTNOTE = re.compile(r"\[\d{1,3}\]")
_SPACE = re.compile(r"(\s+)")
# the last characters of a token after which a sentence can end
_MAY_END = _STOPS | frozenset(_CLOSERS)

_ABBREVIATIONS = frozenset(
    word
    for line in (
        "Dr Mr Mrs Ms Prof prof St Sr Jr Mt Gen Gov Sen Rep Col Lt Maj Sgt Capt Rev Hon Pres",
        "Inc Ltd Co Corp Bros Dept Univ Assoc Inst Fed Pub Pvt",
        "al etc vs cf ca approx resp incl viz ibid spp sp eds ed Med Ref ref",
        "Fig Figs fig figs Tab Eq Eqs eq pp Vol vol No Nos no Ch ch Sec sec",
        "Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec",
        "mm cm ml mg min hr hrs yr yrs mo wk wks ft lb lbs",
    )
    for word in line.split()
)

# words that often open a sentence: after an abbreviation, a capitalised word that is not
# one of these is more likely a name ("Dr. Smith", "et al. Nature") than a new sentence
_STARTERS = frozenset(
    word
    for line in (
        "The A An This That These Those It He She We They I You His Her Its Our Their My Your",
        "In On At For With From By To Of As If When While After Before Although Though Because",
        "Since But And Or Nor So Yet However Moreover Furthermore Thus Therefore Here There Then",
        "Now All Some Many Most Each Every No None Both Neither Other Another Such One Two Three",
        "First Second Is Are Have Had Do Does Did Can Should Will What Which Who Why How Where",
        "Not Also Only Even Among Between During Under Over Through Upon Within Without About",
        "Despite Using Finally Unlike Like Whether Until Once Yes Please Similarly Consequently",
        "Instead Indeed Further Hence Besides Meanwhile Today Specifically Any Several More Just",
        "Never Often Sometimes Let Next",
    )
    for word in line.split()
)


def split_sentences(text: str) -> list[str]:
    """Split text into sentences by the rules above; collapse whitespace, drop empty ones.

    >>> split_sentences("Dr. Smith went home.  He slept (see Fig. 2).\\nThe end")
    ['Dr. Smith went home.', 'He slept (see Fig. 2).', 'The end']
    """
    tokens, spaces = _tokens(text)
    sentences: list[str] = []
    start = 0
    for i, token in enumerate(tokens[:-1]):
        if token[-1] in _MAY_END and _ends_sentence(tokens, spaces, i):
            sentences.append(" ".join(tokens[start : i + 1]))
            start = i + 1
    if start < len(tokens):
        sentences.append(" ".join(tokens[start:]))
    return sentences


def _tokens(text: str) -> tuple[list[str], list[str]]:
    """The text's whitespace-separated tokens and the whitespace between each two."""
    parts = _SPACE.split(text.strip())
    return ([], []) if parts == [""] else (parts[0::2], parts[1::2])


def _ends_sentence(tokens: list[str], spaces: list[str], i: int) -> bool:
    """Does a sentence end after ``tokens[i]`` (which is not the last token)?"""
    stop = _stop(tokens, spaces, i)
    if stop is None or _footnote_follows(tokens, spaces, i):
        return False
    word = _next_word(tokens, i + 1)
    if stop == "period" and _is_abbreviation(tokens[i].rstrip(".").lstrip(_OPENERS)):
        return word.rstrip(",;:") in _STARTERS
    if _starts_list_item(tokens, i + 1) or _FOOTNOTE.fullmatch(tokens[i + 1]):
        return True
    return not word or (word[0].isalpha() and not word[0].islower())


def _stop(tokens: list[str], spaces: list[str], i: int) -> Literal["period", "other"] | None:
    """How ``tokens[i]`` may end a sentence: "period" (a bare final period, which an
    abbreviation can own), "other" (``!``, ``?``, ``…``, a stop before closing marks, a
    footnote kept after a stop) or None (it cannot)."""
    token = tokens[i]
    if _FOOTNOTE.fullmatch(token):
        kept = i > 0 and _footnote_follows(tokens, spaces, i - 1)
        return "other" if kept and _stop(tokens, spaces, i - 1) else None
    core = token.rstrip(_CLOSERS)
    if not core or core[-1] not in _STOPS:
        return None
    return "period" if core == token and token.endswith(".") else "other"


def _footnote_follows(tokens: list[str], spaces: list[str], i: int) -> bool:
    """Is ``tokens[i + 1]`` one footnote mark, one space after ``tokens[i]``, that belongs to
    the sentence before it? (A run of marks, or one after a line break, starts the next.)"""
    if i + 1 >= len(tokens) or not _FOOTNOTE.fullmatch(tokens[i + 1]) or spaces[i] != " ":
        return False
    return i + 2 == len(tokens) or not _FOOTNOTE.fullmatch(tokens[i + 2])


def _next_word(tokens: list[str], start: int) -> str:
    """The first word from ``tokens[start]`` on, leading quotes, brackets, bullets, dashes and
    Markdown marks removed ("" when only such marks are left)."""
    for j in range(start, len(tokens)):
        word = tokens[j].lstrip(_LEADING_MARKS)
        if word:
            return word
    return ""


def _starts_list_item(tokens: list[str], j: int) -> bool:
    """Is ``tokens[j]`` a list marker: (1), (ii), b), 2. or, spaced out, ( 1 )?"""
    if _LIST_MARKER.fullmatch(tokens[j]):
        return True
    spaced = tokens[j] == "(" and j + 2 < len(tokens) and tokens[j + 2] == ")"
    return spaced and _LIST_MARKER.fullmatch(f"({tokens[j + 1]})") is not None


def _is_abbreviation(stem: str) -> bool:
    """Is ``stem`` (a token before its final period) an abbreviation? Units count after a
    slash ("mg/min"); a dotted name counts unless it is a path ("x.org/a")."""
    if not stem or not stem[-1].isalpha():
        return False
    last = stem.rsplit("/", 1)[-1]
    if last in _ABBREVIATIONS or (len(last) == 1 and last.isupper()):
        return True
    return "/" not in stem and "." in stem and stem.rsplit(".", 1)[-1].isalpha()
