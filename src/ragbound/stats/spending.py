"""False-alarm control for a monitor that tests one window after another of an endless stream.

Each scheme gives window i a level: the window alarms when its p-value is at or below it.
Every guarantee below holds when each window's p-value is super-uniform under no shift
(P(p <= a) <= a), whatever the dependence between windows (sliding windows, a shared
calibration sample), because each one is a union bound or a sum of expectations.

- ``spending``: window i (0-based, over the whole stream) at alpha * 6 / (pi^2 (i+1)^2).
  The levels sum to alpha, so P(any false alarm in the whole stream) <= alpha. The level
  decays like 1/i^2: window 1,000 is tested at 3e-8 for alpha = 0.05, so a late shift goes
  unseen.
- ``period``: alpha is spent afresh in every period of log time (a UTC calendar day, an
  hour), so P(any false alarm in a given period) <= alpha, and power no longer decays with
  the length of the stream. When a period holds at most m windows (time windows: at most
  floor(period / step) + 1 start in it) each is tested at alpha / m, the tightest even split.
  When the number is not known in advance (windows of a query count, whose number per day
  follows the traffic), window j of the period gets the restarted sequence
  alpha * 6 / (pi^2 (j+1)^2), which falls to alpha * 6 / (pi^2 m^2) after m windows.
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


def period_level(alpha: float, index_in_period: int, windows_per_period: int | None) -> float:
    """Level of the window of rank ``index_in_period`` (0-based) in its period.

    alpha / m when a period holds at most m = ``windows_per_period`` windows; the spending
    sequence alpha * 6 / (pi^2 (j+1)^2) restarted each period when that number is unknown
    (None). Either way the levels of one period sum to at most alpha.

    >>> period_level(0.05, 3, 100)
    0.0005
    >>> period_level(0.05, 3, None) == alpha_spending(0.05, 3)
    True
    """
    index = _check_index(index_in_period, "index_in_period")
    if windows_per_period is None:
        return alpha_spending(alpha, index)
    windows = _check_index(windows_per_period, "windows_per_period", minimum=1)
    if index >= windows:
        raise ValueError(
            f"index_in_period must be < windows_per_period = {windows}, got {index_in_period}"
        )
    return check_open_unit(alpha, "alpha") / windows


def windows_per_period(period_seconds: float, step_seconds: float) -> int:
    """Most windows that can start within one period when consecutive windows start
    ``step_seconds`` apart: floor(period / step) + 1 (a hair of slack absorbs the rounding
    of a start time accumulated over many steps).

    >>> windows_per_period(86_400, 900), windows_per_period(3_600, 86_400)
    (97, 1)
    """
    period = check_positive(period_seconds, "period_seconds")
    step = check_positive(step_seconds, "step_seconds")
    return math.floor(period / step * (1.0 + 1e-9)) + 1


def period_floor(alpha: float, windows: int) -> float:
    """The restarted spending sequence's lowest level in a period of ``windows`` windows.

    >>> round(period_floor(0.05, 96) * 1e6, 3)  # 96 windows of 50 queries in a day
    3.298
    """
    count = _check_index(windows, "windows", minimum=1)
    return alpha_spending(alpha, count - 1)


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
    windows_per_period: int | None = None,
    arl: float | None = None,
) -> float:
    """The level of one window under ``scheme`` (one of ``SCHEMES``).

    ``window_index`` counts windows over the whole stream; ``index_in_period`` counts them
    within the current period (``period`` needs it; ``windows_per_period`` bounds them when
    known, see ``period_level``); ``arl`` is in windows (``arl`` needs it).

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
        return period_level(alpha, index_in_period, windows_per_period)
    if scheme == "arl":
        if arl is None:
            raise ValueError("the arl scheme needs arl (windows per false alarm)")
        return arl_level(arl)
    return check_open_unit(alpha, "alpha")
