"""False-alarm control for a monitor that tests one window after another of an endless stream.

Each scheme gives window i a level: the window alarms when its p-value is at or below it.
Every guarantee below holds when each window's p-value is super-uniform under no shift
(P(p <= a) <= a), whatever the dependence between windows (sliding windows, a shared
calibration sample), because each one is a union bound or a sum of expectations.

- ``spending``: window i (0-based, over the whole stream) at alpha * 6 / (pi^2 (i+1)^2).
  The levels sum to alpha, so P(any false alarm in the whole stream) <= alpha. The level
  decays like 1/i^2: window 1,000 is tested at 3e-8 for alpha = 0.05, so a late shift goes
  unseen.
- ``period``: the same sequence restarted in every period (a calendar day, or a block of m
  windows), i indexing the windows of the current period. P(any false alarm in a given
  period) <= alpha, and the level never falls below alpha * 6 / (pi^2 m^2) when a period
  holds at most m windows: power no longer decays with the length of the stream.
- ``arl``: every window at 1 / arl. The expected number of false alarms among n windows is
  at most n / arl, i.e. on average at least ``arl`` windows per false alarm (the in-control
  average run length, ARL0). For independent windows the wait for the first false alarm is
  geometric with mean >= arl; overlapping windows make false alarms come in clusters, so the
  first one comes later on average while the long-run rate is unchanged.
- ``none``: every window at alpha (expect alpha x n false alarms among n windows).
"""

from __future__ import annotations

import math

from ragbound.stats._validate import check_choice, check_open_unit, check_positive

SCHEMES: tuple[str, ...] = ("spending", "period", "arl", "none")
_ZETA_2 = math.pi**2 / 6.0  # sum of 1 / (i+1)^2 over i >= 0


def _check_index(value: int, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def alpha_spending(alpha: float, window_index: int) -> float:
    """Level of window ``window_index`` (0, 1, 2, ...) in an endless stream of tests.

    alpha * 6 / (pi^2 (i+1)^2): the levels sum to alpha over infinitely many windows, so by
    the union bound the chance of any false alarm over the whole stream is at most alpha,
    without knowing in advance how many windows there will be.

    >>> round(alpha_spending(0.05, 0), 5)
    0.0304
    """
    alpha = check_open_unit(alpha, "alpha")
    index = _check_index(window_index, "window_index")
    return alpha / (_ZETA_2 * (index + 1) ** 2)


def period_floor(alpha: float, windows_per_period: int) -> float:
    """Lowest level of the ``period`` scheme when a period holds at most m windows.

    >>> round(period_floor(0.05, 96) * 1e6, 3)  # one day of 15-minute windows
    3.298
    """
    windows = _check_index(windows_per_period, "windows_per_period", minimum=1)
    return alpha_spending(alpha, windows - 1)


def arl_level(arl: float) -> float:
    """Per-window level 1 / arl of the ``arl`` scheme (arl in windows, > 1).

    >>> arl_level(1000)
    0.001
    """
    windows = check_positive(arl, "arl")
    if windows <= 1.0:
        raise ValueError(f"arl must be > 1 window, got {arl!r}")
    return 1.0 / windows


def period_key(position: float, length: float) -> int:
    """Which period ``position`` falls in: floor(position / length).

    ``position`` is a window counter (periods of ``length`` windows) or epoch seconds
    (periods of ``length`` seconds, aligned on the epoch, so "1d" is a UTC calendar day).

    >>> period_key(86_399.0, 86_400.0), period_key(86_400.0, 86_400.0)
    (0, 1)
    """
    length = check_positive(length, "period length")
    if not math.isfinite(position):
        raise ValueError(f"position must be finite, got {position!r}")
    return math.floor(position / length)


def window_level(
    scheme: str,
    alpha: float,
    window_index: int,
    *,
    index_in_period: int | None = None,
    arl: float | None = None,
) -> float:
    """The level of one window under ``scheme`` (one of ``SCHEMES``).

    ``window_index`` counts windows over the whole stream; ``index_in_period`` counts them
    within the current period (``period`` needs it); ``arl`` is in windows (``arl`` needs it).

    >>> window_level("period", 0.05, 1000, index_in_period=0) == alpha_spending(0.05, 0)
    True
    """
    check_choice(scheme, SCHEMES, "scheme")
    index = _check_index(window_index, "window_index")
    if scheme == "spending":
        return alpha_spending(alpha, index)
    if scheme == "period":
        if index_in_period is None:
            raise ValueError("the period scheme needs index_in_period")
        return alpha_spending(alpha, index_in_period)
    if scheme == "arl":
        if arl is None:
            raise ValueError("the arl scheme needs arl (windows per false alarm)")
        return arl_level(arl)
    return check_open_unit(alpha, "alpha")
