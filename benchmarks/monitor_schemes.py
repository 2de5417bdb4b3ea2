"""The shift monitor's false-alarm schemes compared by simulation (seeded, numpy, ~1 minute).

Each simulated stream has its own calibration sample of 500 statistic values and tumbling
windows of 50 queries, tested by the exact two-sample KS test, as the monitor does. Under no
shift the queries are drawn like the calibration; after a shift, 20% of them come from
out-of-knowledge questions whose statistic is 2 standard deviations higher (a window-level
KS test at alpha = 0.05 catches such a window about half the time).

Measured per scheme: false alarms per 1,000 windows and the chance of any false alarm in a
stream of 10,000 windows under no shift; the mean number of windows before the first false
alarm (streams of 12,000 windows: a scheme that never alarms shows "> 12,000"); the median
delay (windows from the shift's first window to the first alarm, 0 = at once) for a shift
starting at window 10, 100, 1,000 and 10,000; and the power of a single shifted window at
position 1,000. Sliding windows (step 25, half overlapping) are measured under no shift only,
to show what the overlap does to the run length of the fixed-level schemes.

``python -m benchmarks.monitor_schemes`` prints the Markdown table; ``table()`` returns it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from benchmarks.doc import write_section
from ragbound.stats import ks_two_sample
from ragbound.stats.spending import window_level, windows_per_period

ALPHA = 0.05
WINDOW = 50
SLIDING_STEP = 25
CALIBRATION = 500
SHIFT_FRACTION = 0.2
SHIFT_SIZE = 2.0  # standard deviations of the statistic
STREAM_WINDOWS = 12_000
FAMILY_WINDOWS = 10_000
SHIFT_STARTS = (10, 100, 1_000, 10_000)
HORIZON = 2_000  # windows watched after a shift starts
POWER_AT = 1_000
STREAMS = 250


@dataclass(frozen=True)
class Scheme:
    """One ``--correction`` setting of the monitor. ``period`` simulates ``--period 1d`` with
    DAY windows a day; ``bound`` is the monitor's most windows per period (time windows) or
    None (count windows: the number per day is unknown to the monitor)."""

    label: str
    correction: str
    arl: float | None = None
    bound: int | None = None

    def levels(self, count: int) -> np.ndarray:
        """Per-window levels of windows 0 .. count-1 (a day = DAY consecutive windows)."""
        return np.array(
            [
                window_level(
                    self.correction,
                    ALPHA,
                    i,
                    index_in_period=i % DAY,
                    windows_per_period=self.bound,
                    arl=self.arl,
                )
                for i in range(count)
            ]
        )


DAY = 96  # windows a day: 15-minute windows, or count windows at that traffic
SCHEMES = (
    Scheme("none: alpha = 0.05 per window", "none"),
    Scheme("spending: alpha = 0.05 per stream (default)", "spending"),
    Scheme(
        "period 1d, 15-minute windows: alpha = 0.05 per day",
        "period",
        bound=windows_per_period(86_400, 900),
    ),
    Scheme("period 1d, count windows (96 a day): alpha = 0.05 per day", "period"),
    Scheme("arl 1000: >= 1,000 windows per false alarm", "arl", arl=1_000.0),
)
SLIDING = (SCHEMES[0], SCHEMES[4])


def ks_statistics(reference_sorted: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """Two-sample KS distance of each row of ``windows`` to the sorted reference (no ties)."""
    rows = np.sort(windows, axis=1)
    n = rows.shape[1]
    below = np.searchsorted(reference_sorted, rows, side="right") / reference_sorted.size
    rank = np.arange(1, n + 1) / n
    return np.maximum((rank - below).max(axis=1), (below - (rank - 1.0 / n)).max(axis=1))


@dataclass
class ExactPValues:
    """Exact KS p-values (the monitor's ``ks_two_sample``) looked up by the statistic's value.

    With n and m values the statistic is a multiple of 1/lcm(n, m), and its exact p-value
    depends only on that multiple, so each distinct value is computed once, from a window
    that has it (and the vectorised statistic is checked against scipy's on that window).
    """

    n: int
    m: int
    table: dict[int, float] = field(default_factory=dict)

    def __call__(self, reference: np.ndarray, windows: np.ndarray) -> np.ndarray:
        lattice = math.lcm(self.n, self.m)
        keys = np.rint(ks_statistics(reference, windows) * lattice).astype(np.int64)
        for key in np.unique(keys).tolist():
            if key not in self.table:
                example = windows[int(np.argmax(keys == key))]
                result = ks_two_sample(reference, example)
                assert abs(result.statistic * lattice - key) < 1e-6, "KS statistic mismatch"
                self.table[key] = result.p_value
        lookup = np.full(lattice + 1, np.nan)
        lookup[list(self.table)] = list(self.table.values())
        return lookup[keys]


def _windows(rng: np.random.Generator, count: int, step: int, shifted: bool) -> np.ndarray:
    """``count`` windows of WINDOW queries sliding by ``step`` (step = WINDOW: tumbling)."""
    queries = rng.normal(size=(count - 1) * step + WINDOW)
    if shifted:
        out_of_knowledge = rng.random(queries.size) < SHIFT_FRACTION
        queries[out_of_knowledge] += SHIFT_SIZE
    starts = np.arange(count) * step
    return queries[starts[:, None] + np.arange(WINDOW)]


def _first_alarm(alarms: np.ndarray) -> int | None:
    hits = np.flatnonzero(alarms)
    return int(hits[0]) if hits.size else None


def _null_summary(alarms: np.ndarray) -> dict:
    """alarms: (streams, windows) booleans under no shift."""
    firsts = [_first_alarm(row) for row in alarms]
    censored = [alarms.shape[1] if f is None else f + 1 for f in firsts]
    days = alarms[:, : alarms.shape[1] // DAY * DAY].reshape(alarms.shape[0], -1, DAY)
    return {
        "per_1000": float(alarms.mean() * 1000),
        "per_day": float(days.any(axis=2).mean()),
        "familywise": float(alarms[:, :FAMILY_WINDOWS].any(axis=1).mean()),
        "first_alarm_mean": float(np.mean(censored)),
        "never": float(np.mean([f is None for f in firsts])),
        # P(alarm at window i+1 | alarm at window i): the clustering that overlap brings
        "after_alarm": float((alarms[:, 1:] & alarms[:, :-1]).sum() / max(1, alarms[:, :-1].sum())),
    }


def simulate(streams: int = STREAMS, seed: int = 0) -> dict:
    """Every figure of the table, as a dict (see the module docstring)."""
    rng = np.random.default_rng(seed)
    pvalues = ExactPValues(WINDOW, CALIBRATION)
    levels = {s.label: s.levels(STREAM_WINDOWS) for s in SCHEMES}
    null = {s.label: [] for s in SCHEMES}
    sliding = {s.label: [] for s in SLIDING}
    delays = {s.label: {start: [] for start in SHIFT_STARTS} for s in SCHEMES}
    shifted_pool = []
    for _ in range(streams):
        reference = np.sort(rng.normal(size=CALIBRATION))
        p_null = pvalues(reference, _windows(rng, STREAM_WINDOWS, WINDOW, shifted=False))
        p_shift = pvalues(reference, _windows(rng, HORIZON, WINDOW, shifted=True))
        p_slide = pvalues(reference, _windows(rng, STREAM_WINDOWS, SLIDING_STEP, shifted=False))
        shifted_pool.append(p_shift)
        for scheme in SCHEMES:
            level = levels[scheme.label]
            null[scheme.label].append(p_null <= level)
            for start in SHIFT_STARTS:
                delays[scheme.label][start].append(
                    _first_alarm(p_shift <= level[start : start + HORIZON])
                )
        for scheme in SLIDING:
            sliding[scheme.label].append(p_slide <= levels[scheme.label])
    pool = np.concatenate(shifted_pool)
    return {
        "streams": streams,
        "seed": seed,
        "schemes": {
            s.label: {
                **_null_summary(np.array(null[s.label])),
                "level_at_power": float(levels[s.label][POWER_AT]),
                "power": float(np.mean(pool <= levels[s.label][POWER_AT])),
                "median_delay": {
                    start: _median_delay(delays[s.label][start]) for start in SHIFT_STARTS
                },
            }
            for s in SCHEMES
        },
        "sliding": {s.label: _null_summary(np.array(sliding[s.label])) for s in SLIDING},
    }


def _median_delay(delays: list[int | None]) -> float | None:
    """Median windows to the first alarm; None when half the streams never alarm in HORIZON."""
    ordered = sorted(HORIZON if d is None else d for d in delays)
    middle = ordered[len(ordered) // 2]
    return None if middle >= HORIZON else float(middle)


def _delay_text(delay: float | None) -> str:
    return f"> {HORIZON:,}" if delay is None else f"{delay:g}"


def _first_text(summary: dict) -> str:
    """Mean windows to the first false alarm; a lower bound when some streams had none."""
    if summary["never"] == 1.0:
        return f"> {STREAM_WINDOWS:,}"
    if summary["never"] > 0:
        return f">= {summary['first_alarm_mean']:,.0f} ({summary['never']:.1%} had none)"
    return f"{summary['first_alarm_mean']:,.0f}"


def table(results: dict | None = None) -> str:
    """The Markdown table of ``simulate()`` (run now when ``results`` is None)."""
    results = results or simulate()
    starts = " | ".join(f"delay, shift at {s:,}" for s in SHIFT_STARTS)
    lines = [
        f"| scheme | false alarms / 1,000 windows | P(false alarm in a day of {DAY}) "
        f"| P(any false alarm in {FAMILY_WINDOWS:,}) | windows to 1st false alarm | {starts} "
        f"| level at window {POWER_AT:,} | power there |",
        "|---" * (8 + len(SHIFT_STARTS)) + "|",
    ]
    for label, row in results["schemes"].items():
        delays = " | ".join(_delay_text(row["median_delay"][s]) for s in SHIFT_STARTS)
        lines.append(
            f"| {label} | {row['per_1000']:.2f} | {row['per_day']:.3f} | {row['familywise']:.2f} "
            f"| {_first_text(row)} "
            f"| {delays} | {row['level_at_power']:.2g} | {row['power']:.2f} |"
        )
    for label, row in results["sliding"].items():
        blanks = " | ".join("-" for _ in SHIFT_STARTS)
        lines.append(
            f"| {label}; sliding windows (step {SLIDING_STEP}) | {row['per_1000']:.2f} "
            f"| {row['per_day']:.3f} | {row['familywise']:.2f} | {_first_text(row)} | {blanks} "
            "| - | - |"
        )
    return "\n".join(lines) + "\n" + _caption(results)


def _caption(results: dict) -> str:
    clustering = "; ".join(
        f"{label.split(':')[0]}: {row['after_alarm']:.2f} tumbling, "
        f"{results['sliding'][label]['after_alarm']:.2f} sliding"
        for label, row in results["schemes"].items()
        if label in results["sliding"]
    )
    return (
        f"\n{results['streams']} simulated streams (seed {results['seed']}): calibration of "
        f"{CALIBRATION} statistic values, windows of {WINDOW} queries, exact two-sample KS; "
        f"after a shift {SHIFT_FRACTION:.0%} of the queries score {SHIFT_SIZE:g} sd higher. "
        f"Delays are medians in windows after the first shifted one, over a horizon of "
        f"{HORIZON:,} windows. Sliding windows come twice as often per query, so the same rate "
        f"per window is twice the rate per query; P(false alarm right after a false alarm): "
        f"{clustering}.\n"
    )


TITLE = "Shift monitor: false-alarm schemes over long streams (simulation)"


def main() -> None:
    """Print the table and write it as the ``monitor-schemes`` section of docs/benchmarks.md."""
    text = table()
    print(text)
    print(f"written to {write_section('monitor-schemes', TITLE, text)}")


if __name__ == "__main__":
    main()
