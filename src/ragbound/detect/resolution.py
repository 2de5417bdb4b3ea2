"""How finely a calibration of n questions can test at a level: conformal p-values move in steps.

A conformal p-value against n calibration scores is one of 1/(n+1), 2/(n+1), ..., 1, so a new
question is flagged at level ``alpha`` when it scores above all calibration questions but
``m - 1`` of them, ``m = floor(alpha (n + 1))``:

- ``m = 0`` (n < 1/alpha - 1): nothing can ever be flagged;
- ``m`` small: the critical value is the m-th highest calibration score, so one odd question
  moves it. The share of in-knowledge questions flagged is ``m / (n + 1)`` on average (at most
  alpha, as conformal promises), but from one calibration set to another it follows
  Beta(m, n + 1 - m) (Vovk 2012, training-conditional validity): its relative spread (standard
  deviation over mean) is about ``1 / sqrt(m)``, 100% at m = 1.

:func:`resolution` says which, and how many questions keep the spread within
``MAX_SPREAD`` (one standard deviation within +-50% of the mean: m >= 4, so n >= 4/alpha - 1,
79 questions at alpha = 0.05). Two tests sharing alpha (the boundary test and the
answerability test) each run at their share, which needs more.
"""

from __future__ import annotations

import math
import warnings

from pydantic import BaseModel, Field, computed_field

MAX_SPREAD = 0.5
"""The largest relative spread (standard deviation / mean) of the share flagged from one
calibration set to another that a calibration passes without a warning."""
POWERLESS = "calibration queries cannot flag anything"
"""The words of the warning when nothing can be flagged (tests filter warnings on them)."""


class Resolution(BaseModel):
    """What a calibration of ``n`` questions can mean at ``level`` (see the module)."""

    n: int = Field(description="calibration questions behind the p-values")
    alpha: float = Field(description="the significance level asked for")
    level: float = Field(
        description="the level the test runs at: alpha, or its share when the answerability "
        "test shares it"
    )
    step: float = Field(description="1 / (n + 1): the smallest p-value, and its step")
    flaggable: int = Field(description="m = floor(level (n + 1)): calibration ranks at the level")
    attained: float = Field(
        description="m / (n + 1): the share of in-knowledge questions flagged, on average"
    )
    spread: float | None = Field(
        description="relative standard deviation of that share from one calibration set to "
        "another (None: nothing can be flagged)"
    )
    needed: int = Field(description=f"questions that keep the spread within {MAX_SPREAD:.0%}")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def can_flag(self) -> bool:
        """Some score can reach the level."""
        return self.flaggable > 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def coarse(self) -> bool:
        """Too few questions for the level to mean what it says."""
        return self.spread is None or self.spread > MAX_SPREAD

    def message(self) -> str | None:
        """One warning in words (None: the calibration is fine at this level)."""
        if not self.coarse:
            return None
        shared = "" if self.level == self.alpha else f" (each test's share of {self.alpha:g})"
        at = f"alpha={self.level:.4g}{shared}"
        if not self.can_flag:
            return (
                f"{self.n} {POWERLESS} at {at}: the smallest p-value is 1/{self.n + 1}; use "
                f"at least {math.ceil(1 / self.level - 1 - 1e-9)} queries (and "
                f"{self.needed} for a steady false-positive rate)"
            )
        above = "all" if self.flaggable == 1 else f"all but {self.flaggable - 1}"
        return (
            f"{self.n} calibration questions are few for {at}: p-values move in steps of "
            f"1/{self.n + 1}, so a question is flagged only when it scores above {above} of "
            f"them; the share of in-knowledge questions flagged is {self.attained:.3g} on "
            f"average and varies by +-{self.spread or 0:.0%} from one calibration set to "
            f"another; use at least {self.needed} questions to keep it within "
            f"+-{MAX_SPREAD:.0%}"
        )


def flaggable(level: float, n: int) -> int:
    # a float's slack: 0.05 * 20 is 1.0000000000000002 or 0.9999999999999999
    return math.floor(level * (n + 1) + 1e-9)


def _spread(m: int, n: int) -> float | None:
    """Standard deviation over mean of Beta(m, n + 1 - m)."""
    if m < 1:
        return None
    return math.sqrt((n + 1 - m) / (m * (n + 2)))


def _needed(level: float) -> int:
    """The fewest questions whose spread at ``level`` is within MAX_SPREAD."""
    n = max(1, math.floor(1 / (MAX_SPREAD**2 * level)) - 2)
    while True:
        spread = _spread(flaggable(level, n), n)
        if spread is not None and spread <= MAX_SPREAD:
            return n
        n += 1


def resolution(n: int, alpha: float, level: float | None = None) -> Resolution:
    """The resolution of ``n`` calibration questions at ``level`` (default ``alpha``)."""
    level = alpha if level is None else level
    m = flaggable(level, n)
    return Resolution(
        n=n,
        alpha=alpha,
        level=level,
        step=1 / (n + 1),
        flaggable=m,
        attained=m / (n + 1),
        spread=_spread(m, n),
        needed=_needed(level),
    )


def warn_if_coarse(n: int, alpha: float, level: float | None = None, stacklevel: int = 3) -> None:
    """A UserWarning when ``n`` questions are too few for ``level`` (see the module)."""
    message = resolution(n, alpha, level).message()
    if message is not None:
        warnings.warn(message, UserWarning, stacklevel=stacklevel + 1)
