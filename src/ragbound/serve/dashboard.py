"""The live dashboard: bounded state fed by the decision thread, its JSON, and the page.

``GET /v1/stats`` answers :meth:`DashboardState.snapshot`; ``GET /dashboard`` answers one
self-contained page (``dashboard.html``) polling it, under a content-security policy that
allows only its own inline code, by a nonce fresh per response. The page holds no data.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from importlib import resources
from typing import Literal

from pydantic import BaseModel, Field

from ragbound.detect.calibration import APPROXIMATE, NullQuestions
from ragbound.gate import ACTIONS, CAUSES, Decision
from ragbound.results import WindowResult
from ragbound.serve.fit import FitShown, merged_fit
from ragbound.serve.querylog import shown_query
from ragbound.serve.settings import LogQueries
from ragbound.tripwires import TripwireVerdict

RECENT_DECISIONS = 200
RECENT_FORBIDDEN = 50
P_VALUE_BINS = 20
NONCE_MARK = "__NONCE__"


class TriggerShown(BaseModel):
    id: str
    topic: str
    similarity: float = Field(description="cosine similarity, higher = closer")
    rank: int = Field(description="1-based rank in the merged top k")


class ForbiddenShown(BaseModel):
    """A forbidden query (its action: reject) and the tripwires that made it so."""

    time: float = Field(description="Unix time, seconds")
    query: str | None = Field(description="as the query log keeps it: full, sha256:HEX or null")
    p_value: float
    rule: str | None
    triggers: list[TriggerShown]


class PValueHistogram(BaseModel):
    """The p-values of the last decisions in equal bins over [0, 1] (the last bin closed)."""

    n: int
    edges: list[float]
    counts: list[int]
    reference: Literal["uniform"] = Field(
        "uniform", description="the calibration's p-value distribution, uniform by construction"
    )
    expected_per_bin: float = Field(description="n / bins: the uniform reference line")


class WindowShown(BaseModel):
    window: int
    end: str = Field(description="ISO 8601 UTC time of the window's last query")
    n: int
    statistic: float = Field(description="KS distance to the calibration queries")
    p_value: float
    alpha: float = Field(description="the window's level after the false-alarm correction")
    alarm: bool


class Timeline(BaseModel):
    window_size: int
    windows: list[WindowShown] = Field(description="oldest first")
    alarms: int


class Stats(BaseModel):
    """The body of ``GET /v1/stats``."""

    ready: bool
    time: float = Field(description="Unix time of this answer, seconds")
    started: float
    alpha: float | None = Field(description="the decisions' alpha (null before the first)")
    counts: dict[str, int] = Field(description="decisions by action since the start")
    causes: dict[str, int] = Field(
        default_factory=dict,
        description="decisions by cause since the start: in_knowledge (answer), "
        "out_of_knowledge or unanswerable (abstain), forbidden (reject)",
    )
    total: int
    p_values: PValueHistogram
    forbidden: list[ForbiddenShown] = Field(description="newest first")
    monitor: Timeline | None = Field(description="null: no shift monitor")
    fit: FitShown | None = Field(
        None, description="the share of the last decided queries flagged, beside alpha"
    )
    questions: NullQuestions | None = Field(
        None, description="where the calibration's questions came from (null before loading)"
    )
    approximate: bool = Field(
        False, description=f"{APPROXIMATE} (the calibration's questions are all synthetic)"
    )


class DashboardState:
    """What the dashboard shows, bounded: counts, the last decisions, the last forbidden ones
    (a query shown as the query log keeps it, ``log_queries``). One lock: updated by the
    decision thread, read by the event loop."""

    def __init__(self, log_queries: LogQueries = "full"):
        self.log_queries = log_queries
        self.started = time.time()
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._causes: Counter[str] = Counter()
        self._p_values: deque[float] = deque(maxlen=RECENT_DECISIONS)
        self._forbidden: deque[ForbiddenShown] = deque(maxlen=RECENT_FORBIDDEN)
        self._alpha: float | None = None

    def record(self, decisions: Sequence[Decision]) -> None:
        """Count a batch's decisions and keep the latest ones."""
        now = time.time()
        with self._lock:
            for decision in decisions:
                self._counts[decision.action] += 1
                self._causes[decision.cause] += 1
                self._p_values.append(decision.test.p_value)
                self._alpha = decision.test.alpha
                if decision.tripwires is not None and decision.tripwires.forbidden:
                    self._forbidden.append(self._shown(decision, decision.tripwires, now))

    def _shown(self, decision: Decision, tripwires: TripwireVerdict, now: float) -> ForbiddenShown:
        return ForbiddenShown(
            time=now,
            query=shown_query(decision.query, self.log_queries),
            p_value=decision.test.p_value,
            rule=tripwires.rule,
            triggers=[TriggerShown(**t.model_dump()) for t in tripwires.triggers],
        )

    def snapshot(
        self,
        ready: bool,
        windows: Sequence[WindowResult] | None,
        window_size: int,
        *,
        fit: FitShown | None = None,
        questions: NullQuestions | None = None,
    ) -> Stats:
        """``windows``: the shift monitor's recent windows (None: there is no monitor);
        ``fit`` the flagged share (:mod:`ragbound.serve.fit`); ``questions`` the calibration's
        (None: not loaded yet)."""
        with self._lock:
            counts = {action: self._counts[action] for action in ACTIONS}
            causes = {cause: self._causes[cause] for cause in CAUSES}
            p_values = list(self._p_values)
            forbidden = list(reversed(self._forbidden))
            alpha = self._alpha
        return Stats(
            ready=ready,
            time=time.time(),
            started=self.started,
            alpha=alpha,
            counts=counts,
            causes=causes,
            total=sum(counts.values()),
            p_values=_histogram(p_values),
            forbidden=forbidden,
            monitor=None if windows is None else timeline(windows, window_size),
            fit=fit,
            questions=questions,
            approximate=questions is not None and questions.approximate,
        )


def merged_stats(parts: Sequence[Stats], monitor: Timeline | None) -> Stats:
    """The service's dashboard data from its workers' (``parts``, this worker's first):
    counts and p-value bins added up, forbidden queries newest first, and the supervisor's
    shift monitor."""
    counts = {action: sum(p.counts.get(action, 0) for p in parts) for action in ACTIONS}
    causes = {cause: sum(p.causes.get(cause, 0) for p in parts) for cause in CAUSES}
    bins = [sum(column) for column in zip(*(p.p_values.counts for p in parts), strict=True)]
    n = sum(bins)
    forbidden = sorted((f for p in parts for f in p.forbidden), key=lambda f: -f.time)
    fits = [p.fit for p in parts if p.fit is not None]
    return parts[0].model_copy(
        update={
            "ready": all(p.ready for p in parts),
            "started": min(p.started for p in parts),
            "counts": counts,
            "causes": causes,
            "total": sum(counts.values()),
            "p_values": parts[0].p_values.model_copy(
                update={"n": n, "counts": bins, "expected_per_bin": n / P_VALUE_BINS}
            ),
            "forbidden": forbidden[:RECENT_FORBIDDEN],
            "monitor": monitor,
            "fit": merged_fit(fits) if fits else None,
        }
    )


def timeline(windows: Sequence[WindowResult], window_size: int) -> Timeline:
    """The shift monitor's windows as the dashboard shows them (oldest first)."""
    shown = [WindowShown(**w.model_dump()) for w in windows]
    return Timeline(window_size=window_size, windows=shown, alarms=sum(w.alarm for w in shown))


def _histogram(p_values: list[float]) -> PValueHistogram:
    counts = [0] * P_VALUE_BINS
    for p in p_values:
        counts[min(int(p * P_VALUE_BINS), P_VALUE_BINS - 1)] += 1
    return PValueHistogram(
        n=len(p_values),
        edges=[i / P_VALUE_BINS for i in range(P_VALUE_BINS + 1)],
        counts=counts,
        expected_per_bin=len(p_values) / P_VALUE_BINS,
    )


def new_nonce() -> str:
    return secrets.token_urlsafe(18)


def content_security_policy(nonce: str) -> str:
    """Only the page's own inline script and style run; it may fetch only from this origin."""
    return (
        "default-src 'none'; "
        f"script-src 'nonce-{nonce}'; "
        f"style-src 'nonce-{nonce}'; "
        "connect-src 'self'; "
        "img-src data:; "
        "base-uri 'none'; "
        "form-action 'none'; "
        "frame-ancestors 'none'"
    )


def page(nonce: str) -> str:
    """The dashboard's HTML with ``nonce`` on its one ``<style>`` and one ``<script>``."""
    template = resources.files("ragbound.serve").joinpath("dashboard.html").read_text("utf-8")
    return template.replace(NONCE_MARK, nonce)
