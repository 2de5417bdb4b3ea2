"""A tripwire floor calibrated on in-knowledge questions (docs/tripwires.md, "the calibrated
floor"): the lowest floor at which the rule calls at most a ``share`` of the calibration's
questions forbidden, which bounds the share of new in-knowledge questions called forbidden
(exchangeability), for ten tripwires as for thousands. Similarities are on the search's own
scale (cosine, or a framework's relevance).
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
any n >= 1 / share - 1 (99 for 1%); more make the floor steadier: the share it lets through
is Beta(n + 1 - r, r) about its bound (r the conformal rank), its 95th percentile 1.39% at
n = 2000 and 1.82% at 500 for 1%."""


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
