"""How a conversation is read into the one text the knowledge-boundary test searches with.

A follow-up ("How can I apply for these benefits?") is inside the knowledge only given the turns
before it; decided alone it looks out of knowledge. A topic switch ("Who won the 1998 world
cup?" after questions about the documents) must still look out of knowledge. A *reading* maps
a conversation to the text searched:

- ``last``: the last user turn alone (what a single-message gate does);
- ``recent``: the last :data:`RECENT_TURNS` user turns joined, oldest first;
- ``follow`` (the default): ``recent`` when the last turn *follows* the conversation, else
  ``last``. A turn follows when it is close (cosine, in the embedder's space) to one of the
  user turns before it within the window or to the assistant's last answer, or when it is
  close to one of a few content-free turns ("yes", "what else?", ...; the file
  ``generic_turns.txt`` beside this module) that say nothing without their context.
- ``rewrite``: an LLM rewrites the last turn into a standalone question
  (:mod:`ragbound.detect.rewrite`; opt-in, it costs an LLM call per turn).

**Why the p-values stay valid.** The reading is chosen from the conversation's own texts and
never from the knowledge base's similarities, so choosing it does not look at the statistic
it feeds. Of a single question every reading is the question itself, so a calibration made of
standalone questions is the null of first turns unchanged. For a later turn the test holds
the read text to that null: valid when the read text of an in-knowledge turn is no further
from the knowledge than a standalone in-knowledge question (the join restores what the
follow-up leaves implicit). That is an assumption about phrasing, measured on held-out
dialogues (``make bench-conversations``), not a theorem. Calibrating on logged conversations
(every user turn read the same way) makes the null exchangeable with new turns again, which
removes the assumption.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from ragbound.conversation import Conversation, Query
from ragbound.corpus.queries import MAX_QUERY_CHARS

LAST = "last"
RECENT = "recent"
FOLLOW = "follow"
REWRITE = "rewrite"
READINGS: tuple[str, ...] = (FOLLOW, RECENT, LAST, REWRITE)
DEFAULT_READING = FOLLOW
RECENT_TURNS = 3
"""User turns joined by ``recent`` (and by ``follow`` when the last turn follows)."""
FOLLOW_SIMILARITY = 0.15
"""Cosine at and above which the last turn follows an earlier turn or the last answer."""
GENERIC_SIMILARITY = 0.3
"""Cosine at and above which the last turn is a content-free turn ("yes", "what else?")."""
ANSWER_CHARS = 300
"""Characters of the assistant's last answer compared with the last turn (its opening says
what it is about; a long answer would cost a long embedding at every turn)."""
SEPARATOR = " "

Vectors = Callable[[list[str]], np.ndarray]
"""Unit embeddings of texts, (n, dimension): the knowledge base's query embedder, cached."""


@dataclass(frozen=True)
class Read:
    """What the test searched for one query: ``text``, made by ``reading`` from the last
    ``turns`` user turns (1: the last turn alone)."""

    text: str
    reading: str
    turns: int


def check_reading(name: str) -> str:
    """``name`` if it is a known reading; ValueError naming the choices otherwise."""
    if name not in READINGS:
        raise ValueError(f"unknown reading {name!r}: choose one of {', '.join(READINGS)}")
    return name


def recent_text(
    chat: Conversation, turns: int = RECENT_TURNS, max_chars: int = MAX_QUERY_CHARS
) -> tuple[str, int]:
    """The last ``turns`` user turns joined, oldest first, and how many there were; older
    turns are left out while the text would be longer than ``max_chars``."""
    recent = list(chat.user_turns[-turns:])
    while len(recent) > 1 and len(SEPARATOR.join(recent)) > max_chars:
        recent.pop(0)
    return SEPARATOR.join(recent), len(recent)


def read(item: Query, reading: str = DEFAULT_READING, vectors: Vectors | None = None) -> Read:
    """The text to search for ``item`` under ``reading``.

    A query string, and a conversation's first turn, are read as themselves under every
    reading. ``follow`` needs ``vectors`` (the query embedder) to tell whether the last turn
    follows; without it (a lexical knowledge base) it reads as ``recent``. ``rewrite`` is
    resolved by the caller (an LLM call) and is refused here.
    """
    if isinstance(item, str):
        return Read(item, reading, 1)
    if item.turn_index == 0 or reading == LAST:
        return Read(item.last_user, reading, 1)
    if reading == REWRITE:
        raise ValueError("the rewrite reading needs an LLM: use ragbound.detect.rewrite")
    if reading == FOLLOW and vectors is not None and not follows(item, vectors):
        return Read(item.last_user, reading, 1)
    text, turns = recent_text(item)
    return Read(text, reading, turns)


def follows(chat: Conversation, vectors: Vectors) -> bool:
    """Whether the last user turn follows the conversation: close to a user turn before it
    (within :data:`RECENT_TURNS`), to a content-free turn, or to the assistant's last answer.
    Reads the texts only, never the knowledge base. Checked in that order and embedded only
    as needed: the earlier turns and the content-free ones come from the cache, so a turn
    that follows them costs one new embedding (the answer is embedded only when they do not
    settle it)."""
    last = vectors([chat.last_user])[0]
    earlier = list(chat.user_turns[-RECENT_TURNS:-1])
    if earlier and float((vectors(earlier) @ last).max()) >= FOLLOW_SIMILARITY:
        return True
    if float((vectors(list(generic_turns())) @ last).max()) >= GENERIC_SIMILARITY:
        return True
    answer = opening(chat.previous_answer() or "", ANSWER_CHARS)
    return bool(answer) and float(vectors([answer])[0] @ last) >= FOLLOW_SIMILARITY


def opening(text: str, chars: int) -> str:
    """The first ``chars`` characters of ``text``, cut at a space when there is one."""
    if len(text) <= chars:
        return text
    cut = text[:chars]
    return cut.rsplit(" ", 1)[0] if " " in cut else cut


@cache
def generic_turns() -> tuple[str, ...]:
    """The content-free turns ``follow`` compares the last turn with (one a line)."""
    text = resources.files(__package__).joinpath("generic_turns.txt").read_text("utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip())
