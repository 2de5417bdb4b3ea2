"""How a conversation is read into the one text the knowledge-boundary test searches with.

A follow-up ("How can I apply for these benefits?") is inside the knowledge only given the turns
before it, and a topic switch must still look out of knowledge. The readings (docs/conversations.md
has the rules and why the p-values stay valid): ``last`` (the last user turn alone), ``recent``
(the last :data:`RECENT_TURNS` user turns joined), ``follow`` (the default: the last turn joined
with the turns of its *segment* it follows or returns to, else alone; small talk marked),
``follow-mean`` (``follow``'s text, but the words-weighted mean of the joined turns' vectors
searched) and ``rewrite`` (an LLM's standalone question, :mod:`ragbound.conversations.rewrite`).
The reading is chosen from the conversation's own texts, never from the knowledge base's
similarities, so choosing it does not look at the statistic it feeds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, partial
from importlib import resources

import numpy as np

from ragbound.conversations.model import Conversation, Query
from ragbound.corpus.queries import MAX_QUERY_CHARS

LAST = "last"
RECENT = "recent"
FOLLOW = "follow"
FOLLOW_MEAN = "follow-mean"
REWRITE = "rewrite"
READINGS: tuple[str, ...] = (FOLLOW, FOLLOW_MEAN, RECENT, LAST, REWRITE)
DEFAULT_READING = FOLLOW
RECENT_TURNS = 3
"""User turns joined by ``recent`` (and by ``follow`` when the last turn follows)."""
FOLLOW_SIMILARITY = 0.15
"""Cosine at and above which the last turn follows an earlier turn or the last answer."""
GENERIC_SIMILARITY = 0.3
"""Cosine at and above which the last turn is a content-free turn ("yes", "what else?")."""
RETURN_SIMILARITY = 0.3
"""Cosine at and above which a turn returns to a turn of an older segment: stricter than
:data:`FOLLOW_SIMILARITY`, since it is met by the best of up to :data:`LOOKBACK` turns and
skips the turns between (two unrelated questions reach 0.15-0.2 with MiniLM)."""
LOOKBACK = 8
"""User turns before the last one that a return to the topic may reach back to."""
SMALL_TALK_SIMILARITY = 0.6
"""Cosine at and above which a short turn is small talk ("thanks!" against "thanks")."""
SMALL_TALK_CHARS = 40
"""Longest turn read as small talk: "Hi, how do I renew my licence?" asks something."""
REFERRING_WORDS = 6
"""Longest turn (in words) whose pronoun is read as pointing back (longer turns name their
subject; "Is it legal to own a rifle?" opens a topic with a dummy "it")."""
ANSWER_CHARS = 300
"""Characters of the assistant's last answer compared with the last turn (its opening says
what it is about; a long answer would cost a long embedding at every turn)."""
SEPARATOR = " "
LAST_WEIGHT = 1.0
"""``follow-mean``: the decided turn's weight in the mean, per word (each earlier turn's word
weighs 1). Measured on doc2dial (3 seeds): 2 caught more far switches (0.935 against 0.911)
but flagged more in-knowledge follow-ups (0.122 against 0.097); 0.5 flagged more of both."""

# Why a word list: pronouns and the conjunctions that continue a question are a closed class of
# function words that a sentence embedding averages away ("And what are its weaknesses?" is
# 0.14 from the BM25 question it points to), and they are what makes such a turn mean nothing
# alone. English only; in another language these turns follow when they are close to an
# earlier turn or to the assistant's answer, as before.
_OPENS = re.compile(r"^(and|but|also|so|or|then|what about|how about|same for)\b")
_POINTS_BACK = re.compile(
    r"\b(it|its|itself|that one|this one|the other|the same|those|these|they|them|their"
    r"|that|this)\b"
)

Vectors = Callable[[list[str]], np.ndarray]
"""Unit embeddings of texts, (n, dimension): the knowledge base's query embedder, cached."""


@dataclass(frozen=True)
class Read:
    """What the test searched for one query: ``text``, made by ``reading`` from the last
    ``turns`` user turns (1: the last turn alone); ``small_talk``: the decided turn is a
    greeting, thanks or "ok" (``follow`` readings only); ``vector``: the unit vector searched
    instead of ``text``'s embedding (``follow-mean``'s mean of the joined turns' vectors; None:
    ``text`` is embedded); ``joined``: the user turns ``text`` joins (0-based, oldest first;
    empty: the decided turn alone)."""

    text: str
    reading: str
    turns: int
    small_talk: bool = False
    joined: tuple[int, ...] = ()
    vector: np.ndarray | None = field(default=None, compare=False, repr=False)


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
    return joined(list(chat.user_turns[-turns:]), max_chars)


def joined(turns: list[str], max_chars: int = MAX_QUERY_CHARS) -> tuple[str, int]:
    """``turns`` joined, oldest first, and how many were kept: the oldest are left out while
    the text would be longer than ``max_chars``."""
    kept = list(turns)
    while len(kept) > 1 and len(SEPARATOR.join(kept)) > max_chars:
        kept.pop(0)
    return SEPARATOR.join(kept), len(kept)


def read(item: Query, reading: str = DEFAULT_READING, vectors: Vectors | None = None) -> Read:
    """The text to search for ``item`` under ``reading`` (a query string: itself). ``follow``
    without ``vectors`` (a lexical knowledge base) reads as ``recent``; ``rewrite`` is the
    caller's LLM call, refused here."""
    if isinstance(item, str):
        return Read(item, reading, 1)
    if reading in (FOLLOW, FOLLOW_MEAN) and vectors is not None:
        return follow_read(item, vectors, mean=reading == FOLLOW_MEAN)
    if item.turn_index == 0 or reading == LAST:
        return Read(item.last_user, reading, 1)
    if reading == REWRITE:
        raise ValueError("the rewrite reading needs an LLM: use ragbound.conversations.rewrite")
    text, turns = recent_text(item)
    return Read(text, reading, turns)


def follow_read(chat: Conversation, vectors: Vectors, mean: bool = False) -> Read:
    """The ``follow`` reading of ``chat`` (``mean``: ``follow-mean``'s). The earlier turns and
    whether each followed come from the cache ``vectors`` (the gate's
    :class:`~ragbound.conversations.turns.TurnVectors`); new texts are embedded only as needed,
    cheapest first (measured 2.5x a query's p50, against 3.0x embedding them all at once)."""
    found = _follow_read(chat, vectors)
    if not mean:
        return found
    if not found.joined:
        return replace(found, reading=FOLLOW_MEAN)
    texts = [chat.user_turns[i] for i in found.joined]
    rows = vectors(texts)  # cached, the decided turn too
    return replace(found, reading=FOLLOW_MEAN, vector=mean_vector(rows, turn_weights(texts)))


def turn_weights(texts: Sequence[str]) -> np.ndarray:
    """Each joined turn's weight in ``follow-mean``'s mean (oldest first): its words (at
    least 1), the decided turn's times :data:`LAST_WEIGHT`. Words, as a mean-pooled encoder
    embeds a join as about the mean of its tokens (doc2dial, 3 seeds: in-knowledge follow-ups
    flagged 0.097 weighted by words, 0.175 each turn weighing 1)."""
    weights = np.array([max(len(t.split()), 1) for t in texts], dtype=np.float32)
    weights[-1] *= LAST_WEIGHT
    return weights


def mean_vector(rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The unit vector along the ``weights``-weighted sum of the unit vectors ``rows``. Of
    rows each near a chunk, the mean is as near: its cosine to that chunk is at least the
    weighted mean of theirs (when that is positive), the sum's norm being at most the
    weights' sum."""
    total = np.asarray(weights, dtype=np.float32) @ np.asarray(rows, dtype=np.float32)
    norm = float(np.linalg.norm(total))
    return total / norm if norm > 0 else total


def _follow_read(chat: Conversation, vectors: Vectors) -> Read:
    turns = chat.user_turns
    last = len(turns) - 1
    if last == 0:
        talk = is_small_talk(turns[0], vectors([turns[0]])[0], vectors)
        return Read(turns[0], FOLLOW, 1, small_talk=talk)
    start = max(0, last - LOOKBACK)
    answers = chat.user_answers
    # the earlier turns in one call when they are not cached yet (a chat seen for the first
    # time); their answers only as needed, when a turn's link is not kept (``_links``)
    vectors(list(turns[start:last]))
    segments = _segments(turns, answers, start, last, vectors)
    current = segments[-1][-(RECENT_TURNS - 1) :]
    text = turns[last]
    if refers_back(text):
        return _joined(turns, current, last)
    vec = vectors([text])[0]
    talk = is_small_talk(text, vec, vectors)
    said = partial(_answer, answers[last], vectors)
    if talk or _follows(text, vec, [turns[i] for i in current], said, vectors):
        return _joined(turns, current, last, small_talk=talk)
    older = [i for segment in segments[:-1] for i in segment]
    back = _returns_to(vec, older, turns, vectors)
    if back is None:
        return Read(text, FOLLOW, 1)
    segment = next(s for s in segments if back in s)
    return _joined(turns, [i for i in segment if i <= back][-(RECENT_TURNS - 1) :], last)


def _joined(
    turns: Sequence[str], before: Sequence[int], last: int, small_talk: bool = False
) -> Read:
    """The read of turn ``last`` joined with the turns ``before`` (indices, oldest first)."""
    text, n = joined([turns[i] for i in before] + [turns[last]])
    kept = (*before, last)[-n:] if n > 1 else ()
    return Read(text, FOLLOW, n, small_talk=small_talk, joined=kept)


def _answer(answer: str | None, vectors: Vectors) -> np.ndarray | None:
    """The vector of an answer's opening (None: no answer)."""
    said = opening(answer or "", ANSWER_CHARS)
    return vectors([said])[0] if said else None


def _segments(
    turns: Sequence[str],
    answers: Sequence[str | None],
    start: int,
    last: int,
    vectors: Vectors,
) -> list[list[int]]:
    """The user turns ``start`` .. ``last - 1`` cut into segments (indices, oldest first): a
    turn that does not follow the recent turns of its segment (nor the answer before it)
    starts a new one. Vectors from the cache."""
    segments = [[start]]
    for i in range(start + 1, last):
        recent = tuple(turns[j] for j in segments[-1][-(RECENT_TURNS - 1) :])
        if _links(turns[i], recent, answers[i], vectors):
            segments[-1].append(i)
        else:
            segments.append([i])
    return segments


def _links(text: str, recent: tuple[str, ...], answer: str | None, vectors: Vectors) -> bool:
    """Whether an earlier turn ``text`` followed the turns ``recent`` (or small talk): kept in
    ``vectors.links`` when it has one (the gate's cache), since a chat asks again at every
    later turn."""
    memo = getattr(vectors, "links", None)
    key = (text, recent, answer)
    known = memo.get(key) if memo is not None else None
    if known is not None:
        return known
    vec = vectors([text])[0]
    said = partial(_answer, answer, vectors)
    found = is_small_talk(text, vec, vectors) or _follows(text, vec, recent, said, vectors)
    if memo is not None:
        memo[key] = found
    return found


def _follows(
    text: str,
    vec: np.ndarray,
    earlier: Sequence[str],
    answer: Callable[[], np.ndarray | None],
    vectors: Vectors,
) -> bool:
    """Whether the turn ``text`` (vector ``vec``) follows the turns ``earlier`` or the answer
    before it (``answer()``: its vector or None, called last so as to embed it only when the
    rest does not settle it)."""
    if refers_back(text):
        return True
    if earlier and float((vectors(list(earlier)) @ vec).max()) >= FOLLOW_SIMILARITY:
        return True
    if float((vectors(list(generic_turns())) @ vec).max()) >= GENERIC_SIMILARITY:
        return True
    said = answer()
    return said is not None and float(said @ vec) >= FOLLOW_SIMILARITY


def _returns_to(
    vec: np.ndarray, older: Sequence[int], turns: Sequence[str], vectors: Vectors
) -> int | None:
    """The turn of an older segment the last turn (vector ``vec``) is closest to, if at or
    above :data:`RETURN_SIMILARITY` (None otherwise)."""
    if not older:
        return None
    similarity = vectors([turns[i] for i in older]) @ vec
    best = int(np.argmax(similarity))
    return older[best] if float(similarity[best]) >= RETURN_SIMILARITY else None


def refers_back(text: str) -> bool:
    """Whether ``text`` points back to what was said before: it opens with a conjunction
    ("and", "but", "what about", ...), or it is short (at most :data:`REFERRING_WORDS`
    words) and holds a pronoun ("its", "that one", "them", ...). English function words."""
    lowered = text.lower().strip()
    if _OPENS.search(lowered):
        return True
    return len(lowered.split()) <= REFERRING_WORDS and bool(_POINTS_BACK.search(lowered))


def is_small_talk(text: str, vec: np.ndarray, vectors: Vectors) -> bool:
    """Whether ``text`` (vector ``vec``) is small talk: at most :data:`SMALL_TALK_CHARS`
    characters and within :data:`SMALL_TALK_SIMILARITY` of a line of ``small_talk.txt``
    (embedded by ``vectors``, cached)."""
    if len(text) > SMALL_TALK_CHARS:
        return False
    lines = vectors(list(small_talk_turns()))
    return float((lines @ vec).max()) >= SMALL_TALK_SIMILARITY


def opening(text: str, chars: int) -> str:
    """The first ``chars`` characters of ``text``, cut at a space when there is one."""
    if len(text) <= chars:
        return text
    cut = text[:chars]
    return cut.rsplit(" ", 1)[0] if " " in cut else cut


@cache
def generic_turns() -> tuple[str, ...]:
    """The content-free turns ``follow`` compares the last turn with (one a line), small
    talk included."""
    return _lines("generic_turns.txt") + small_talk_turns()


@cache
def small_talk_turns() -> tuple[str, ...]:
    """Greetings, thanks and acknowledgements (one a line): the turns read as small talk."""
    return _lines("small_talk.txt")


def _lines(name: str) -> tuple[str, ...]:
    text = resources.files(__package__).joinpath(name).read_text("utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip())
