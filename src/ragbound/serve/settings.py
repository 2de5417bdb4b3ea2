"""What one service runs with: where it listens, who may call it, its limits and its log."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ragbound.conversations.model import MAX_CONVERSATION_CHARS, MAX_MESSAGES
from ragbound.errors import InputError
from ragbound.serve.auth import Tokens
from ragbound.serve.gateway import GatewaySettings, check_count, check_seconds
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
    """What the HTTP server bounds before the app sees a request, in each process
    (:mod:`ragbound.serve.connections`); sizes in bytes, times in seconds.

    The request target (414), the head and its header count (431); the head's time from the
    connection's start, the body's ``body_timeout_s`` after its head plus 1 s per
    ``body_min_rate`` bytes received (408); ``keep_alive_s`` idle between requests;
    ``send_timeout_s`` a client taking none of the reply; ``max_connections`` open (503 beyond).
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
            check_count(name, getattr(self, name))
        for name in ("head_timeout_s", "body_timeout_s", "keep_alive_s", "send_timeout_s"):
            check_seconds(name, getattr(self, name))


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

    ``tokens`` None: no authentication (loopback hosts only). ``log``: the query log;
    ``monitor_state``: the shift monitor's state (default beside the log). ``gateway``: also
    serve the LLM gateway (None: no gateway). ``threads``: the embedder's CPU threads (None:
    the library's default). ``canary_minutes``: between searches of the calibration's canaries
    (0: only at start); ``force``: a moved canary keeps the service ready. ``allowed_hosts``:
    ``Host`` names answered besides loopback ones (:mod:`ragbound.serve.hosts`). ``workers``:
    processes behind the port; ``worker``: set in each of them. ``alpha``: the level decisions
    are made at (None: the calibration's, :meth:`Guard.use_alpha`).
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
