"""Starting a service: the settings ``ragbound serve`` assembles from its options, and
:func:`launch`, which refuses what it can (a port in use, a foreign ``--log``) before the model
loads, then serves."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ragbound.errors import InputError
from ragbound.gate import DEFAULT_CONTEXT_K, Gate
from ragbound.gate_texts import DEFAULT_CONTEXT_TEMPLATE
from ragbound.records import read_text
from ragbound.serve.gateway import (
    DEFAULT_UPSTREAM_TIMEOUT_S,
    GatewaySettings,
    check_context_template,
    check_reply_template,
)
from ragbound.serve.settings import Rotation, ServeSettings

if TYPE_CHECKING:
    from ragbound.conversations.rewrite import Rewriter


def context_budget(chunks: int | None, chars: int | None) -> dict[str, int | None]:
    """The context budget's settings that were given (None: the default; 0 characters: no
    budget), as :class:`GatewaySettings` fields."""
    budget: dict[str, int | None] = {}
    if chunks is not None:
        budget["context_chunks"] = chunks
    if chars is not None:
        budget["context_chars"] = chars or None
    return budget


def gateway_settings(
    upstream: str | None,
    key_file: Path | None,
    template_file: Path | None,
    pass_through: bool,
    replies: dict[str, str],
    budget: dict[str, int | None],
    timeout_s: float | None = None,
) -> GatewaySettings | None:
    """The gateway's settings (None without ``upstream``): the API key is ``key_file``'s first
    line, the context template ``template_file`` (default: the built-in one; none with
    ``pass_through``), the ``replies`` are checked templates, ``budget`` is
    :func:`context_budget`'s, ``timeout_s`` None the default. InputError naming a bad option."""
    if upstream is None:
        if key_file or template_file or pass_through or budget or timeout_s is not None:
            raise InputError(
                "--upstream-key-file, --upstream-timeout, --context-template, --context-chunks, "
                "--context-chars and --pass-through need --upstream"
            )
        return None
    if pass_through and (template_file is not None or budget):
        raise InputError(
            "--pass-through forwards chats unchanged: drop --context-template, "
            "--context-chunks and --context-chars"
        )
    for name, text in replies.items():  # refused at start, naming the option
        check_reply_template(text, f"--{name}")
    template = read_text(template_file) if template_file is not None else DEFAULT_CONTEXT_TEMPLATE
    try:
        check_context_template(template)
    except InputError as exc:
        raise InputError(f"{template_file}: {exc}") from None
    return GatewaySettings(
        upstream=upstream,
        api_key=_first_line(key_file) if key_file is not None else None,
        context_template=None if pass_through else template,
        timeout_s=DEFAULT_UPSTREAM_TIMEOUT_S if timeout_s is None else timeout_s,
        **replies,
        **budget,  # type: ignore[arg-type]
    )


def _first_line(path: Path) -> str:
    lines = read_text(path).strip().splitlines()
    if not lines or not lines[0].strip():
        raise InputError(f"{path}: empty; expected the upstream's API key on the first line")
    return lines[0].strip()


def log_rotation(log: Path | None, max_bytes: int | None, daily: bool) -> Rotation:
    """When the query log starts a new file; InputError for a rotation without a log."""
    if log is None and (max_bytes is not None or daily):
        raise InputError("--log-max-bytes and --log-rotate rotate the --log: give --log")
    return Rotation(max_bytes=max_bytes, daily=daily)


def gate_loader(
    kb_dir: Path,
    settings: ServeSettings,
    *,
    reading: str | None = None,
    tripwire_instructions: bool = False,
    rewriter: Rewriter | None = None,
) -> Callable[[], Gate]:
    """How each process loads its gate: with as many neighbours as the gateway may add to a
    prompt (and ``/v1/decide`` returns), ``reading`` None: the calibration's."""
    gateway = settings.gateway
    context_k = max(DEFAULT_CONTEXT_K, gateway.context_chunks if gateway else 0)

    def load() -> Gate:
        return Gate.load(
            kb_dir,
            force=settings.force,
            context_k=context_k,
            reading=reading,
            tripwire_instructions=tripwire_instructions,
            rewriter=rewriter,
        )

    return load


def launch(
    kb_dir: Path,
    load_gate: Callable[[], Gate],
    settings: ServeSettings,
    *,
    tracing: bool = False,
) -> None:
    """Serve ``kb_dir``'s gate until stopped: tracing on, the file handles reserved, the port
    bound and the ``--log`` checked before any model loads, then one line on stderr saying
    what is served, and the app (in ``settings.workers`` processes when more than one)."""
    from ragbound.serve.app import create_app
    from ragbound.serve.listen import bind_sockets, reserve_file_handles, serve_on
    from ragbound.serve.querylog import check_query_log

    if tracing:
        import ragbound.tracing as spans

        spans.enable()
    reserve_file_handles(settings.connections)  # inherited by the workers
    sockets = bind_sockets(settings.host, settings.port)
    if settings.log is not None:
        check_query_log(settings.log)
    started = _started_line(kb_dir, settings, tracing)
    if settings.workers > 1:
        from ragbound.detect.guard import Guard
        from ragbound.serve.workers import serve_workers

        sys.stderr.write(started)
        serve_workers(
            load_gate, lambda: Guard.open(kb_dir, force=settings.force), settings, sockets
        )
        return
    app = create_app(load_gate(), settings)
    sys.stderr.write(started)
    serve_on(app, sockets, settings.host, settings.port, settings.connections)


def _started_line(kb_dir: Path, settings: ServeSettings, tracing: bool) -> str:
    """The line a started service writes: where it listens, and what it runs with."""
    log, gateway = settings.log, settings.gateway
    return (
        f"ragbound serve: {kb_dir} on http://{settings.host}:{settings.port}"
        f"{'' if settings.tokens else ' (no tokens: loopback only)'}"
        f"{f', {settings.workers} workers' if settings.workers > 1 else ''}"
        f"{f', log {log} ({settings.log_queries})' if log else ''}"
        f"{f', gateway to {gateway.upstream}' if gateway else ''}"
        f"{', tracing' if tracing else ''}\n"
    )
