"""Does the calibration fit the traffic? The share of decided queries flagged, beside alpha.

Answered queries all have p > alpha, so the share counted is over every decided query. A
fitting calibration flags ``k / (n + 1)`` of in-knowledge queries (``k = floor(alpha (n + 1))``,
n calibration questions) and more of the others, so the share is at least about that whatever
the traffic; well below it (``lower_tail_p``, a beta-binomial tail), the calibration's
questions sit farther from the corpus than the users' and out-of-knowledge queries slip
through. Over the last ``FIT_WINDOW`` decisions of this process; docs/service.md says more.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Sequence

from pydantic import BaseModel, Field

from ragbound.gate import Decision
from ragbound.serve.metrics import Registry
from ragbound.stats.beta_binomial import beta_binomial_cdf

FIT_WINDOW = 1000
FIT_LEVEL = 0.01
"""``lower_tail_p`` at or below this: fewer queries flagged than a fitting calibration allows."""


class FitShown(BaseModel):
    """The share of the last decided queries whose p-value is at most alpha, beside alpha."""

    n: int = Field(description="decided queries in the window (at most window)")
    window: int
    flagged: int = Field(description="of them, p-value <= alpha")
    share: float | None = Field(description="flagged / n (null before the first decision)")
    alpha: float | None
    expected_at_least: float | None = Field(
        description="k / (n_calibration + 1), k = floor(alpha (n_calibration + 1)): the share "
        "of in-knowledge queries a fitting calibration flags; out-of-knowledge ones add to it"
    )
    lower_tail_p: float | None = Field(
        description="P(so few flagged | every p-value valid): small = the null is looser "
        "than the traffic"
    )
    below: bool = Field(description=f"lower_tail_p <= {FIT_LEVEL}: fewer flagged than alpha")
    n_calibration: int | None = Field(None, description="the calibration's size")


class FitWatch:
    """The flagged share over a sliding window, exported to ``registry`` and shown on the
    dashboard. Fed by the decision thread, read by the event loop: one lock."""

    def __init__(self, registry: Registry, window: int = FIT_WINDOW):
        self.registry = registry
        self.window = window
        self._lock = threading.Lock()
        self._flags: deque[bool] = deque(maxlen=window)
        self._alpha: float | None = None
        self._n_calibration: int | None = None

    def record(self, decisions: Sequence[Decision]) -> None:
        """Count a batch's p-values at or below alpha and update the gauges."""
        with self._lock:
            for decision in decisions:
                flagged = decision.test.p_value <= decision.test.alpha
                self._flags.append(flagged)
                self._alpha = decision.test.alpha
                self._n_calibration = decision.test.n_calibration
                self.registry.inc("ragbound_p_at_most_alpha_total", int(flagged))
            n, flagged_now = len(self._flags), sum(self._flags)
            alpha, rank = self._alpha, _flag_rank(self._alpha, self._n_calibration)
            expected = _expected(rank, self._n_calibration)
        self.registry.set("ragbound_p_at_most_alpha_share", flagged_now / n if n else math.nan)
        self.registry.set("ragbound_p_at_most_alpha_window", n)
        self.registry.set("ragbound_alpha", math.nan if alpha is None else alpha)
        self.registry.set(
            "ragbound_p_at_most_alpha_expected", math.nan if expected is None else expected
        )

    def snapshot(self) -> FitShown:
        """The window now, with the lower tail of its flagged count."""
        with self._lock:
            n, flagged = len(self._flags), sum(self._flags)
            alpha, n_cal = self._alpha, self._n_calibration
        return fit_shown(n, self.window, flagged, alpha, n_cal)


def fit_shown(
    n: int, window: int, flagged: int, alpha: float | None, n_cal: int | None
) -> FitShown:
    """``flagged`` of the last ``n`` decisions at ``alpha``, with the lower tail of the count."""
    rank = _flag_rank(alpha, n_cal)
    tail = None if rank is None or n_cal is None else _lower_tail(flagged, n, rank, n_cal)
    return FitShown(
        n=n,
        window=window,
        flagged=flagged,
        share=flagged / n if n else None,
        alpha=alpha,
        expected_at_least=_expected(rank, n_cal),
        lower_tail_p=tail,
        below=tail is not None and tail <= FIT_LEVEL,
        n_calibration=n_cal,
    )


def merged_fit(parts: Sequence[FitShown]) -> FitShown:
    """The workers' windows as one: their decisions and flags added up."""
    known = [p for p in parts if p.alpha is not None] or list(parts)
    return fit_shown(
        sum(p.n for p in parts),
        sum(p.window for p in parts),
        sum(p.flagged for p in parts),
        known[0].alpha,
        known[0].n_calibration,
    )


def _flag_rank(alpha: float | None, n_calibration: int | None) -> int | None:
    """k: a conformal p-value is at most alpha when the score passes the k-th largest of the
    n calibration scores (None: unknown, or no score can reach alpha)."""
    if alpha is None or not n_calibration:
        return None
    k = math.floor(alpha * (n_calibration + 1) + 1e-9)
    return k if k >= 1 else None


def _expected(rank: int | None, n_calibration: int | None) -> float | None:
    """k / (n_cal + 1): the share of exchangeable in-knowledge queries flagged."""
    return None if rank is None or n_calibration is None else rank / (n_calibration + 1)


def _lower_tail(flagged: int, n: int, k: int, n_calibration: int) -> float | None:
    """P(at most ``flagged`` of ``n`` valid queries flagged): the flag probability of an
    exchangeable query is Beta(k, n_cal + 1 - k) given the calibration, so the count is
    BetaBinomial(n, k, n_cal + 1 - k); out-of-knowledge queries only raise it."""
    if not n:
        return None
    return beta_binomial_cdf(flagged, n, k, n_calibration + 1 - k)
