"""Prometheus metrics in the text exposition format (0.0.4), written here: no dependency.

Counters, gauges and histograms with labels, under one lock (the event loop and the decision
thread update them together). With workers, each process publishes its
:meth:`Registry.snapshot` and :func:`merged` adds them up.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Literal

from ragbound.gate import ACTIONS, CAUSES

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
P_VALUE_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)

Labels = tuple[tuple[str, str], ...]
GaugeMerge = Literal["all", "min", "max"]


class Registry:
    """Named metrics and their samples; ``render()`` gives the ``/metrics`` text."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._help: dict[str, tuple[str, str]] = {}  # name -> (type, help)
        self._values: dict[str, dict[Labels, float]] = {}
        self._buckets: dict[str, tuple[float, ...]] = {}
        self._hist: dict[str, dict[Labels, list[float]]] = {}  # counts per bucket, sum, count
        self._merge: dict[str, GaugeMerge] = {}

    def counter(self, name: str, help_text: str) -> None:
        self._declare(name, "counter", help_text)

    def gauge(self, name: str, help_text: str, merge: GaugeMerge = "all") -> None:
        """``merge``: how processes' values combine (see :func:`merged`)."""
        self._declare(name, "gauge", help_text)
        self._merge[name] = merge

    def histogram(self, name: str, help_text: str, buckets: Sequence[float]) -> None:
        self._declare(name, "histogram", help_text)
        self._buckets[name] = tuple(sorted(buckets))
        self._hist[name] = {}

    def _declare(self, name: str, kind: str, help_text: str) -> None:
        self._help[name] = (kind, help_text)
        self._values.setdefault(name, {})

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        key = _key(labels)
        with self._lock:
            values = self._values[name]
            values[key] = values.get(key, 0.0) + amount

    def set(self, name: str, value: float, **labels: str) -> None:
        with self._lock:
            self._values[name][_key(labels)] = value

    def observe(self, name: str, value: float, **labels: str) -> None:
        buckets = self._buckets[name]
        key = _key(labels)
        with self._lock:
            row = self._hist[name].setdefault(key, [0.0] * (len(buckets) + 2))
            for i, bound in enumerate(buckets):
                if value <= bound:
                    row[i] += 1
            row[-2] += value
            row[-1] += 1

    def snapshot(self) -> dict:
        """Everything, as plain JSON, for :func:`merged` in another process."""
        with self._lock:
            return {
                "help": {
                    name: [*kind_help, self._merge.get(name)]
                    for name, kind_help in self._help.items()
                },
                "buckets": {name: list(b) for name, b in self._buckets.items()},
                "values": {
                    n: [[list(map(list, k)), v] for k, v in d.items()]
                    for n, d in self._values.items()
                },
                "hist": {
                    n: [[list(map(list, k)), list(r)] for k, r in d.items()]
                    for n, d in self._hist.items()
                },
            }

    def add_sample(self, name: str, key: Labels, value: float, worker: str) -> None:
        """Add process ``worker``'s sample of counter or gauge ``name`` (see :func:`merged`)."""
        values = self._values[name]
        merge = self._merge.get(name, "all")
        if self._help[name][0] == "counter":
            values[key] = values.get(key, 0.0) + value
        elif merge == "all":
            values[tuple(sorted((*key, ("worker", worker))))] = value
        elif key not in values or math.isnan(values[key]):
            values[key] = value
        elif not math.isnan(value):
            values[key] = min(values[key], value) if merge == "min" else max(values[key], value)

    def render(self) -> str:
        """The exposition text: HELP and TYPE, then the samples (histograms cumulative)."""
        out: list[str] = []
        with self._lock:
            for name, (kind, help_text) in self._help.items():
                out.append(f"# HELP {name} {help_text}")
                out.append(f"# TYPE {name} {kind}")
                if kind == "histogram":
                    out += self._render_histogram(name)
                else:
                    out += [
                        f"{name}{_labels(key)} {_number(value)}"
                        for key, value in sorted(self._values[name].items())
                    ]
        return "\n".join(out) + "\n"

    def _render_histogram(self, name: str) -> list[str]:
        lines = []
        buckets = self._buckets[name]
        for key, row in sorted(self._hist[name].items()):
            for bound, count in zip(buckets, row, strict=False):
                lines.append(f"{name}_bucket{_labels(key, le=_number(bound))} {_number(count)}")
            lines.append(f"{name}_bucket{_labels(key, le='+Inf')} {_number(row[-1])}")
            lines.append(f"{name}_sum{_labels(key)} {_number(row[-2])}")
            lines.append(f"{name}_count{_labels(key)} {_number(row[-1])}")
        return lines


def merged(snapshots: dict[str, dict]) -> Registry:
    """One registry holding the processes' snapshots (by process name) added up: counters and
    histograms summed; a gauge by its merge mode (``min`` / ``max`` over the values that are
    not NaN, NaN when none is; ``all``: each process's sample labelled ``worker=NAME``)."""
    total = Registry()
    for worker, snapshot in sorted(snapshots.items()):
        for name, (kind, help_text, merge) in snapshot["help"].items():
            if name not in total._help:
                total._declare(name, kind, help_text)
                total._merge[name] = merge or "all"
                if kind == "histogram":
                    total._buckets[name] = tuple(snapshot["buckets"][name])
                    total._hist[name] = {}
            for key, value in snapshot["values"].get(name, []):
                total.add_sample(name, _tuple_key(key), value, worker)
            for key, row in snapshot["hist"].get(name, []):
                old = total._hist[name].setdefault(_tuple_key(key), [0.0] * len(row))
                total._hist[name][_tuple_key(key)] = [a + b for a, b in zip(old, row, strict=True)]
    return total


def _tuple_key(key: list) -> Labels:
    return tuple((str(name), str(value)) for name, value in key)


def _key(labels: dict[str, str]) -> Labels:
    return tuple(sorted((name, str(value)) for name, value in labels.items()))


def _labels(key: Labels, **extra: str) -> str:
    pairs = [*key, *extra.items()]
    if not pairs:
        return ""
    return "{" + ",".join(f'{name}="{_escape(value)}"' for name, value in pairs) + "}"


def _escape(value: str) -> str:
    """A label value as the text format writes it; a lone surrogate (a topic a store gave)
    as ``?``, so that the page always encodes as UTF-8."""
    value = value.encode("utf-8", "replace").decode("utf-8")
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if float(value).is_integer() else repr(float(value))


def service_registry() -> Registry:
    """The service's metrics, declared so that ``/metrics`` lists them before any request."""
    registry = Registry()
    registry.histogram(
        "ragbound_request_seconds", "Request latency by route, seconds.", LATENCY_BUCKETS
    )
    registry.counter("ragbound_requests_total", "Requests by route and status code.")
    registry.counter("ragbound_decisions_total", "Decisions by action.")
    registry.counter(
        "ragbound_decisions_by_cause_total",
        "Decisions by cause: in_knowledge (answer), out_of_knowledge or unanswerable "
        "(abstain), forbidden (reject).",
    )
    registry.histogram("ragbound_p_value", "P-values of the decided queries.", P_VALUE_BUCKETS)
    registry.histogram(
        "ragbound_answerability_p_value",
        "Answerability-test p-values of the decided queries it ran on.",
        P_VALUE_BUCKETS,
    )
    registry.counter("ragbound_tripwire_hits_total", "Tripwires that fired, by topic.")
    registry.histogram("ragbound_batch_queries", "Queries per embedding batch.", BATCH_BUCKETS)
    declare_monitor(registry)
    registry.gauge(
        "ragbound_ready", "1 when the model is loaded and calibrated (every worker), else 0.", "min"
    )
    registry.gauge(
        "ragbound_canary_largest_move",
        "The canaries' largest similarity move since calibration at their last search.",
        "max",
    )
    registry.gauge(
        "ragbound_calibration_approximate",
        "1 when the calibration's questions are all synthetic (p-values approximate: no real "
        "questions), else 0.",
        "max",
    )
    _declare_fit(registry)
    for action in ACTIONS:
        registry.inc("ragbound_decisions_total", 0, action=action)
    for cause in CAUSES:
        registry.inc("ragbound_decisions_by_cause_total", 0, cause=cause)
    registry.set("ragbound_canary_largest_move", math.nan)
    registry.set("ragbound_ready", 0)
    registry.set("ragbound_calibration_approximate", math.nan)
    return registry


def declare_monitor(registry: Registry) -> Registry:
    """The shift monitor's metrics (the service's, or a supervisor's alone), before any
    window: 0 windows, NaN p-value."""
    registry.gauge(
        "ragbound_monitor_last_p_value", "The shift monitor's last window p-value.", "max"
    )
    registry.counter("ragbound_monitor_windows_total", "Shift-monitor windows tested.")
    registry.counter("ragbound_monitor_alarms_total", "Shift-monitor windows that alarmed.")
    for name in ("ragbound_monitor_windows_total", "ragbound_monitor_alarms_total"):
        registry.inc(name, 0)
    registry.set("ragbound_monitor_last_p_value", math.nan)
    return registry


def _declare_fit(registry: Registry) -> None:
    """The flagged share against alpha (:mod:`ragbound.serve.fit`), listed before any
    decision: NaN until the first."""
    registry.counter(
        "ragbound_p_at_most_alpha_total",
        "Decided queries whose p-value is at most alpha (flagged by the boundary test).",
    )
    registry.gauge(
        "ragbound_p_at_most_alpha_share",
        "Share of the last decided queries with p-value <= alpha; below alpha beyond noise, "
        "the calibration is looser than the traffic.",
    )
    registry.gauge("ragbound_p_at_most_alpha_window", "Decided queries behind that share.")
    registry.gauge("ragbound_alpha", "The decisions' alpha.", "max")
    registry.gauge(
        "ragbound_p_at_most_alpha_expected",
        "The share of in-knowledge queries a fitting calibration flags (alpha rounded down to "
        "the calibration's size); out-of-knowledge queries add to it.",
        "max",
    )
    registry.inc("ragbound_p_at_most_alpha_total", 0)
    registry.set("ragbound_p_at_most_alpha_window", 0)
    for name in (
        "ragbound_p_at_most_alpha_share",
        "ragbound_alpha",
        "ragbound_p_at_most_alpha_expected",
    ):
        registry.set(name, math.nan)
