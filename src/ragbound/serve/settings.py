"""What one service runs with: where it listens, who may call it, its limits and its log."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ragbound.conversations.model import MAX_CONVERSATION_CHARS, MAX_MESSAGES
from ragbound.errors import InputError
from ragbound.serve.auth import Tokens
from ragbound.serve.gateway import GatewaySettings
from ragbound.serve.hosts import allowed_name, is_loopback

LogQueries = Literal["full", "hash", "none"]
LOG_QUERY_MODES: tuple[LogQueries, ...] = ("full", "hash", "none")


@dataclass(frozen=True)
class Limits:
    """Request limits; a request beyond one is refused with the limit's name.

    ``max_body_bytes``: request body (413); ``max_query_chars``: one query, or the user turn
    a conversation is decided at (422); ``max_batch``: queries or conversations in one
    ``/v1/decide/batch`` request (413); ``request_timeout_s``: a decision not ready by then is
    answered 503; ``max_messages`` and ``max_conversation_chars``: messages, and characters of
    text over all of them, in one conversation (413).
    """

    max_body_bytes: int = 1 << 20
    max_query_chars: int = 2_000
    max_batch: int = 64
    request_timeout_s: float = 10.0
    max_messages: int = MAX_MESSAGES
    max_conversation_chars: int = MAX_CONVERSATION_CHARS


@dataclass(frozen=True)
class Connections:
    """What the HTTP server bounds before the app sees a request (:mod:`ragbound.serve.
    connections`); each process (worker) holds its own connections.

    ``max_url_bytes``: the request target (414); ``max_head_bytes``: the request line and
    headers together, and ``max_headers``: their count (431). ``head_timeout_s``: seconds from a
    connection's start (or a kept-alive connection's next first byte) to the head's end;
    ``body_timeout_s`` and ``body_min_rate``: a body has ``body_timeout_s`` seconds after its
    head, plus one second per ``body_min_rate`` bytes received (both 408, then closed; time
    while the server itself stops reading does not count). ``keep_alive_s``: a connection idle
    between requests is closed after it. ``send_timeout_s``: a client that takes none of the
    reply for that long while the server waits to write is cut off (a slow reader that takes
    some is not). ``max_connections``: open connections; one beyond is answered 503 with
    ``Retry-After`` and closed.
    """

    max_url_bytes: int = 8 << 10
    max_head_bytes: int = 32 << 10
    max_headers: int = 100
    head_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    body_min_rate: int = 1 << 10
    keep_alive_s: float = 5.0
    send_timeout_s: float = 60.0
    max_connections: int = 1000

    def __post_init__(self) -> None:
        counts = ("max_url_bytes", "max_head_bytes", "max_headers", "body_min_rate")
        for name in (*counts, "max_connections"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("head_timeout_s", "body_timeout_s", "keep_alive_s", "send_timeout_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value < math.inf):  # NaN fails too
                raise InputError(f"{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True)
class Batching:
    """Concurrent requests are decided together: the batcher waits at most ``max_wait_ms``
    after the first pending query for others, and decides at most ``max_queries`` at once."""

    max_wait_ms: float = 3.0
    max_queries: int = 64


@dataclass(frozen=True)
class Rotation:
    """When the query log starts a new file (:mod:`ragbound.logseries`): past ``max_bytes``
    (None: no limit) and/or at each new UTC day (``daily``)."""

    max_bytes: int | None = None
    daily: bool = False

    def __post_init__(self) -> None:
        if self.max_bytes is not None and self.max_bytes < 1:
            raise InputError(f"log max_bytes must be >= 1, got {self.max_bytes}")


@dataclass(frozen=True)
class WorkerRole:
    """One process of a service run with several workers: ``name`` (its index) and the
    folder where the processes publish their metrics and dashboard state."""

    name: str
    shared: Path


@dataclass(frozen=True)
class ServeSettings:
    """Everything ``create_app`` needs besides the gate.

    ``tokens`` None: no authentication (only allowed on a loopback host). ``log``: the query
    log (JSONL, one line per decision, durable before the answer). ``monitor_window``: queries
    per shift-monitor window; ``monitor_state``: where the monitor's state is kept (default
    beside the log). ``gateway``: also serve ``POST /v1/chat/completions`` in front of an
    OpenAI-compatible server (None: no gateway). ``threads``: torch's CPU threads for the
    embedder (None: torch's default). ``canary_minutes``: minutes between searches of the
    calibration's canaries (:mod:`ragbound.detect.canary`; 0: only at start). ``force``: a
    moved canary is reported (``/readyz``, ``/metrics``, stderr) but keeps the service ready.
    ``rotation``: when the log starts a new file. ``allowed_hosts``: ``Host`` names answered
    besides loopback ones (:mod:`ragbound.serve.hosts`); the check is on without tokens, and
    with tokens once names are given.
    ``workers``: processes behind the port (:mod:`ragbound.serve.workers`); ``worker``: set in
    each of them, the name it publishes under and the folder the processes share.
    ``alpha``: the significance level decisions are made at (None: the calibration's), both
    tests' when the answerability test shares it (:meth:`Guard.use_alpha`).
    ``connections``: what the HTTP server bounds before the app (:class:`Connections`).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    tokens: Tokens | None = None
    log: Path | None = None
    log_queries: LogQueries = "full"
    limits: Limits = field(default_factory=Limits)
    connections: Connections = field(default_factory=Connections)
    batching: Batching = field(default_factory=Batching)
    monitor_window: int = 50
    monitor_state: Path | None = None
    gateway: GatewaySettings | None = None
    threads: int | None = None
    canary_minutes: float = 10.0
    force: bool = False
    workers: int = 1
    worker: WorkerRole | None = None
    rotation: Rotation = field(default_factory=Rotation)
    allowed_hosts: tuple[str, ...] = ()
    alpha: float | None = None

    def __post_init__(self) -> None:
        alpha = self.alpha
        number = isinstance(alpha, int | float) and not isinstance(alpha, bool)
        if alpha is not None and not (number and 0 < alpha < 1):  # NaN fails too
            raise InputError(f"alpha must be a number between 0 and 1 (exclusive), got {alpha!r}")
        object.__setattr__(
            self, "allowed_hosts", tuple(dict.fromkeys(map(allowed_name, self.allowed_hosts)))
        )
        if self.workers < 1:
            raise InputError(f"workers must be >= 1, got {self.workers}")
        if not self.canary_minutes >= 0:
            raise InputError(f"canary_minutes must be >= 0, got {self.canary_minutes}")
        if self.log_queries not in LOG_QUERY_MODES:
            raise InputError(
                f"log_queries must be one of {list(LOG_QUERY_MODES)}, got {self.log_queries!r}"
            )
        if self.tokens is None and not is_loopback(self.host):
            raise InputError(
                f"refusing to listen on {self.host} without --token-file: without tokens the "
                "service only binds a loopback address (127.0.0.1, ::1, localhost)"
            )

    def checked_hosts(self) -> frozenset[str] | None:
        """The ``Host`` names admitted besides loopback ones: ``allowed_hosts`` and the
        address listened on (unless every address, ``0.0.0.0`` or ``::``); None: ``Host`` is
        not checked (tokens, and no ``allowed_hosts``)."""
        if self.tokens is not None and not self.allowed_hosts:
            return None
        bound = allowed_name(self.host)
        return frozenset(self.allowed_hosts) | ({bound} - {"0.0.0.0", "::"})

    def state_path(self) -> Path | None:
        """The monitor's state file: given, else ``<log>.monitor.json`` (None without a log)."""
        if self.monitor_state is not None:
            return self.monitor_state
        return None if self.log is None else self.log.with_name(self.log.name + ".monitor.json")
