"""A tripwire floor calibrated on in-knowledge questions: a bound on ordinary questions
called forbidden that holds for ten tripwires as for thousands.

A floor derived from the tripwire set alone (its nearest-other similarities) is only as
tight as the set is dense: ten tripwires spread over ten topics give a floor near 0.27, and
vague short questions ("How do I tune it?") clear it. The calibrated floor reads the
knowledge's own questions instead (the calibration's, :class:`Reference`): for each, the
highest floor at which the rule would still call it forbidden (its *critical floor*,
:func:`~ragbound.stats.tripwire.critical_floor`), and then the floor just above the
``ceil((n + 1) * (1 - share))``-th smallest of them. A new in-knowledge question exchangeable
with the n reference questions is then called forbidden with probability at most ``bound``
(``share`` when n >= 1 / share - 1, else 1 / (n + 1): too few questions for the share asked).
The scale is the search's own (cosine, or a framework's relevance), since the reference
questions are searched as every query is.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ragbound.stores import Hits

MAX_REFERENCE = 2000
"""Reference questions kept (evenly spaced over a longer calibration). The bound holds for
any n >= 1 / share - 1 (99 for 1%); more questions make the floor itself steadier: the
share a calibrated floor lets through on new in-knowledge questions is Beta(n + 1 - r, r)
about its bound (r the conformal rank), its 95th percentile 1.39% at n = 2000, 1.57% at
1000 and 1.82% at 500 for 1%. A saved calibration keeps the questions' vectors
(:class:`~ragbound.detect.calibration.ReferenceVectors`, 4 bytes x dimension each: 3.1 MB
at 2000 x 384), so the cap costs an embedding only at save and in the fallback (a
calibration saved before they were kept, or knowledge searched by text)."""


@dataclass(frozen=True)
class CalibratedFloor:
    """A floor calibrated on ``n`` reference questions: ``value`` (-inf: the rule fires on
    too few of them to need one), and ``bound``, the share of in-knowledge questions it lets
    the rule call forbidden at most (exchangeability with the reference)."""

    value: float
    bound: float
    n: int


def calibrated_floor(critical: np.ndarray, share: float) -> CalibratedFloor:
    """The lowest floor that keeps the reference questions' rule firing at ``share`` (the
    conformal rank), from their critical floors (higher = closer to being forbidden; -inf:
    the rule never fires on it). The rule fires at floor f on a question exactly when f <= its
    critical floor, so the floor is the next float above the rank's value.

    >>> f = calibrated_floor(np.array([0.2, -np.inf, 0.5, 0.3]), 0.25)  # rank ceil(3.75) = 4
    >>> round(f.value, 6), round(f.bound, 6), f.n
    (0.5, 0.2, 4)
    >>> calibrated_floor(np.array([-np.inf, -np.inf]), 0.01).value
    -inf
    """
    if not 0 < share < 1:
        raise ValueError(f"share must be in (0, 1), got {share}")
    scores = np.sort(np.asarray(critical, dtype=np.float64).ravel())
    n = scores.size
    if n == 0:
        raise ValueError("a calibrated floor needs at least one reference question")
    # the conformal rank, clamped to n: with fewer than 1 / share - 1 questions the largest
    # is the best there is, and the bound says what it guarantees instead
    rank = min(math.ceil((n + 1) * (1 - share) - 1e-9), n)
    threshold = float(scores[rank - 1])
    value = float(np.nextafter(threshold, np.inf)) if np.isfinite(threshold) else -np.inf
    return CalibratedFloor(value=value, bound=1 - rank / (n + 1), n=n)


def reference_texts(texts: Sequence[str]) -> list[str]:
    """The questions a :class:`Reference` keeps of ``texts``: the non-blank ones, evenly
    spaced down to :data:`MAX_REFERENCE` (a kept list is kept as it is).

    >>> reference_texts(["a", " ", "b", "c"])
    ['a', 'b', 'c']
    """
    kept = [t for t in texts if t.strip()]
    step = math.ceil(len(kept) / MAX_REFERENCE) if kept else 1
    return kept[::step]


class Reference:
    """In-knowledge questions a floor is calibrated on (a calibration's questions), prepared
    for the knowledge once: validated and embedded on first use (or given: the vectors a
    saved calibration kept, :attr:`ragbound.detect.Guard.reference`), and their knowledge
    hits kept per depth. Shared by every tripwire test of one gate, so a new tripwire set costs a
    tripwire search of these questions, never their embedding."""

    def __init__(self, texts: Sequence[str], source: str = "", vectors: np.ndarray | None = None):
        """``vectors``: what a vector search takes for :func:`reference_texts` of ``texts``,
        embedded before (a saved calibration's, :meth:`searched` of the same knowledge):
        nothing is embedded then."""
        self.texts = reference_texts(texts)
        if vectors is not None and len(vectors) != len(self.texts):
            raise ValueError(f"{len(vectors)} vectors for {len(self.texts)} reference questions")
        self.source = source  # e.g. the calibration id, shown in the floor's description
        self._lock = threading.Lock()
        self._searched: object | None = vectors
        self._hits: dict[int, Hits] = {}

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def vectors(self) -> np.ndarray | None:
        """The questions' vectors once embedded or given (None: not yet, or searched by text)."""
        with self._lock:
            found = self._searched
        return found if isinstance(found, np.ndarray) else None

    @property
    def prepared(self) -> bool:
        """Whether what the search takes is ready (given, or made by a first search)."""
        with self._lock:
            return self._searched is not None

    def searched(self, kb) -> object:
        """What ``kb``'s store searches for these questions (their vectors, or the texts):
        embedded at the first call unless given."""
        with self._lock:
            if self._searched is None:
                self._searched = kb.prepare(self.texts).searched
            return self._searched

    def hits(self, kb, k: int) -> Hits:
        """``kb``'s top ``k`` of these questions (searched once per depth)."""
        searched = self.searched(kb)
        with self._lock:
            found = self._hits.get(k)
        if found is None:
            found = kb.store.search(searched, k)
            with self._lock:
                self._hits[k] = found
        return found
