"""Identifiers and short free text that ragbound keeps and writes out again.

A tripwire's id and topic end up in HTTP headers (``X-Ragbound-Triggers``), log lines,
terminal tables and the dashboard page; its note and source in the same places but headers.
What is stored must be writable to all of them as it is, so these characters are refused in
an identifier (:func:`check_label`) and flattened in free text (:func:`one_line`):

- control characters (Unicode category Cc: ``\\x00``-``\\x1f``, ``\\x7f``-``\\x9f``, so CR,
  LF, tab, escape, NUL), which end or forge a header or a log line, or drive a terminal;
- line and paragraph separators (U+2028, U+2029), line ends to many readers;
- lone surrogates, which UTF-8 cannot encode;
- bidirectional formatting (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C), which
  make a page or a terminal show the text in another order than it is.
"""

from __future__ import annotations

import re
import unicodedata

from ragbound.errors import InputError

REFUSED_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f" + "".join(map(chr, range(0x202A, 0x202F))) + "\u2066\u2067\u2068\u2069"
)
_SPACES = re.compile(r"\s+")


def _refused(char: str) -> bool:
    return unicodedata.category(char) in REFUSED_CATEGORIES or char in BIDI_CONTROLS


def label_problem(value: str) -> str | None:
    """What makes ``value`` unfit to store as an identifier (the first refused character and
    its position), or None."""
    for position, char in enumerate(value):
        if _refused(char):
            kind = "a bidirectional control" if char in BIDI_CONTROLS else "a control character"
            return f"holds {kind} (U+{ord(char):04X} at character {position + 1})"
    return None


def check_label(value: str, what: str) -> str:
    """``value`` if it can be stored as an identifier; InputError naming ``what`` and the
    character otherwise."""
    problem = label_problem(value)
    if problem is not None:
        raise InputError(
            f"{what} {value[:80]!r} {problem}: ids and topics are written to headers, log "
            "lines and pages, so they may hold no control characters"
        )
    return value


def one_line(text: str) -> str:
    """``text`` on one line: every run of white space (line ends and tabs included) one
    space, other refused characters dropped, the ends stripped."""
    spaced = _SPACES.sub(" ", text)  # \s: Unicode white space, U+2028 and U+2029 too
    return "".join(char for char in spaced if not _refused(char)).strip()
