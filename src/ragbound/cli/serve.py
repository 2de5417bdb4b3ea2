"""``ragbound serve``: the gate of one knowledge base as an HTTP service."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from ragbound.cli import validate
from ragbound.cli.common import rewriter_for
from ragbound.cli.options import CalibratedKbArg, DecisionAlphaOpt, ReadingOpt, RewriteLlmOpt
from ragbound.errors import InputError
from ragbound.gate_texts import DEFAULT_ABSTENTION, DEFAULT_REFUSAL, DEFAULT_UNANSWERABLE

LOG_QUERY_MODES = ("full", "hash", "none")
TEMPLATE_HELP = (
    " A template: {cause}, {reason}, {p_value}, {alpha}, {trigger_ids} and {topics} are "
    "filled from the decision (other braces doubled; docs/service.md)."
)


def _in_panel(panel: str) -> Callable[..., Any]:
    """An option of ``serve --help``'s panel ``panel``: its help, then its validator."""

    def option(help: str, callback: Callable[[Any], Any] | None = None) -> Any:
        return typer.Option(help=help, callback=callback, rich_help_panel=panel)

    return option


_connection = _in_panel("Connections")
_gateway_option = _in_panel("Gateway")


def serve(
    kb_dir: CalibratedKbArg,
    host: Annotated[
        str,
        typer.Option(help="Address to listen on; other than loopback only with --token-file."),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.", callback=validate.port)] = 8000,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            help="A Host name the service answers to besides localhost, 127.0.0.1 and [::1] "
            "(repeat it). Against DNS rebinding, a service without --token-file answers 421 "
            "to any other Host; with --token-file, giving names turns the check on.",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            help="Bearer tokens, one a line: read:TOKEN (decide) or admin:TOKEN (also change "
            "the tripwires).",
            callback=validate.existing_file,
        ),
    ] = None,
    log: Annotated[
        Path | None,
        typer.Option(
            help="Append every decision to this JSONL query log (durable before the answer; "
            "a batch the disk refuses is answered 503, and /readyz says 503 until a write "
            "succeeds).",
            callback=validate.output_file,
        ),
    ] = None,
    log_max_bytes: Annotated[
        str | None,
        typer.Option(
            help="Start a new --log file before it passes this size (100MB, 1GiB): the full "
            "one becomes LOG.000001, LOG.000002, ...; shift --queries LOG reads them all.",
            callback=validate.byte_size,
        ),
    ] = None,
    log_rotate: Annotated[
        str | None,
        typer.Option(
            help="daily: start a new --log file at each new UTC day (with or without "
            "--log-max-bytes).",
            callback=validate.choice("daily"),
        ),
    ] = None,
    log_queries: Annotated[
        str,
        typer.Option(
            help="What the log keeps of each query: full (text; readable by ragbound shift), "
            "hash (sha256:...) or none.",
            callback=validate.choice(*LOG_QUERY_MODES),
        ),
    ] = "full",
    threads: Annotated[
        int,
        typer.Option(
            help="CPU threads each worker's embedder (ONNX Runtime or torch) may use. 1 by "
            "default: a thread per core oversubscribes a machine shared with other work; raise "
            "it on a machine the service has to itself.",
            callback=validate.positive_int,
        ),
    ] = 1,
    workers: Annotated[
        int,
        typer.Option(
            help="Processes behind the one port, each with its own model; they share the "
            "--log (whole lines), the tripwires (a change through any is used by all within a "
            "second), the shift monitor (run by the supervisor on the log) and /metrics.",
            callback=validate.positive_int,
        ),
    ] = 1,
    canary_minutes: Annotated[
        float,
        typer.Option(
            callback=validate.non_negative_number,
            help="Minutes between searches of the calibration's canaries (a few calibration "
            "queries and their recorded similarities): a move makes /readyz not ready; 0: only "
            "at start.",
        ),
    ] = 10.0,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Serve even when the calibration was made against another knowledge base or "
            "search, or its canaries have moved (/readyz stays ready and shows the move).",
        ),
    ] = False,
    alpha: DecisionAlphaOpt = None,
    max_connections: Annotated[
        int | None,
        _connection(
            "Open connections each process (worker) holds; one more is answered 503 "
            "with Retry-After: 1 and closed [default: 1000]. The soft limit on open files is "
            "raised to fit it.",
            validate.positive_int,
        ),
    ] = None,
    max_head_bytes: Annotated[
        str | None,
        _connection(
            "The largest request head (request line and headers), answered 431 past it "
            "as soon as that much is read [default: 32KiB].",
            validate.byte_size,
        ),
    ] = None,
    max_url_bytes: Annotated[
        str | None,
        _connection(
            "The longest request target (path and query), answered 414 past it [default: 8KiB].",
            validate.byte_size,
        ),
    ] = None,
    max_headers: Annotated[
        int | None,
        _connection(
            "The most header fields in a request, answered 431 past it [default: 100].",
            validate.positive_int,
        ),
    ] = None,
    head_timeout: Annotated[
        float | None,
        _connection(
            "Seconds a request head may take, from the connection's start (or the first "
            "byte of a kept-alive connection's next request): past it 408 and closed; a "
            "connection that sent nothing is closed [default: 10].",
            validate.positive_number,
        ),
    ] = None,
    body_timeout: Annotated[
        float | None,
        _connection(
            "Seconds a request body may take after its head, plus one per "
            "--body-min-rate bytes received: past it 408 and closed [default: 10].",
            validate.positive_number,
        ),
    ] = None,
    body_min_rate: Annotated[
        str | None,
        _connection(
            "Bytes a second a long body must keep arriving at, on average, after "
            "--body-timeout [default: 1KiB].",
            validate.byte_size,
        ),
    ] = None,
    keep_alive_timeout: Annotated[
        float | None,
        _connection(
            "Seconds a connection may stay idle between requests [default: 5].",
            validate.positive_number,
        ),
    ] = None,
    send_timeout: Annotated[
        float | None,
        _connection(
            "Seconds a client may take none of a reply while the service waits to send "
            "it: past it the connection is cut (a slow reader that takes some, a stream's "
            "consumer, is not) [default: 60].",
            validate.positive_number,
        ),
    ] = None,
    reading: ReadingOpt = None,
    llm: RewriteLlmOpt = None,
    tripwire_instructions: Annotated[
        bool,
        typer.Option(
            "--tripwire-instructions",
            help="The tripwires also meet a conversation's system and developer messages "
            "(every user turn always meets them).",
        ),
    ] = False,
    tracing: Annotated[
        bool,
        typer.Option(
            "--tracing",
            help="Export OpenTelemetry spans of each decision (embed, search, statistic, "
            "tripwires; the upstream call in the gateway) with its action and p-value, never "
            "the query's text: over OTLP, configured by the standard OTEL_EXPORTER_OTLP_* "
            "variables (OTEL_TRACES_EXPORTER=console: to stderr). Needs the tracing extra "
            "and opentelemetry-exporter-otlp.",
        ),
    ] = False,
    upstream: Annotated[
        str | None,
        _gateway_option(
            "Also serve POST /v1/chat/completions and /v1/responses (translated to chat "
            "completions) as a gateway to this OpenAI-compatible base URL (e.g. "
            "http://127.0.0.1:8080/v1).",
            validate.http_url,
        ),
    ] = None,
    upstream_key_file: Annotated[
        Path | None,
        _gateway_option(
            "A file whose first line is the upstream's API key (sent as a bearer token).",
            validate.existing_file,
        ),
    ] = None,
    upstream_timeout: Annotated[
        float | None,
        _gateway_option(
            "Seconds the upstream may stay silent: to connect (at most 10), to answer, "
            "then between two reads of its reply (a reply that is not streamed comes whole at "
            "the end). Past it the call answers 504, and a stream that began ends with an "
            "error event [default: 300].",
            validate.positive_number,
        ),
    ] = None,
    context_template: Annotated[
        Path | None,
        _gateway_option(
            "A text file with a {context} field: added to the system prompt on answer "
            "(default: 'Answer from these passages of the knowledge base:' and the chunks).",
            validate.existing_file,
        ),
    ] = None,
    pass_through: Annotated[
        bool,
        _gateway_option(
            "Forward answered chats unchanged, without the retrieved chunks.",
        ),
    ] = False,
    context_chunks: Annotated[
        int | None,
        _gateway_option(
            "The most retrieved chunks added to the prompt on answer, nearest first [default: 5].",
            validate.positive_int,
        ),
    ] = None,
    context_chars: Annotated[
        int | None,
        _gateway_option(
            "The most characters of chunk text added to the prompt (about 4 a token): "
            "whole chunks while they fit, the first cut at a sentence end if it alone does "
            "not; 0: no budget [default: 4000].",
            validate.non_negative_int,
        ),
    ] = None,
    refusal: Annotated[
        str,
        _gateway_option(
            "The gateway's reply to a forbidden query (reject)." + TEMPLATE_HELP,
            validate.non_empty,
        ),
    ] = DEFAULT_REFUSAL,
    abstention: Annotated[
        str,
        _gateway_option(
            "The gateway's reply to an abstain out of knowledge (cause out_of_knowledge)."
            + TEMPLATE_HELP,
            validate.non_empty,
        ),
    ] = DEFAULT_ABSTENTION,
    unanswerable: Annotated[
        str,
        _gateway_option(
            "The gateway's reply to an abstain on a question in scope whose answer the "
            "retrieved chunks do not hold (cause unanswerable: calibrate --answerability)."
            + TEMPLATE_HELP,
            validate.non_empty,
        ),
    ] = DEFAULT_UNANSWERABLE,
) -> None:
    """Serve the knowledge base's decisions over HTTP (FastAPI on uvicorn; docs/service.md).

    POST /v1/decide {"query": ...} answers the decision as JSON (action answer, abstain or
    reject, its cause, the boundary test, the answerability test where it ran, the
    tripwires and the neighbours); POST /v1/decide/batch {"queries": [...]} answers
    {"results": [...]}. GET/POST/DELETE /v1/tripwires list, add and remove tripwires live
    (admin token). GET /healthz, /readyz, /metrics (Prometheus), /openapi.json, and
    /dashboard, a live page fed by GET /v1/stats (read token). With --upstream, the
    gateway's replies hold a summary of the decision (their ragbound field, X-Ragbound-*
    headers), never a chunk's or a tripwire's text.

    Without --token-file the service needs no token, binds only a loopback address and
    answers only a loopback Host (or one given with --allowed-host; 421 otherwise). With
    it (tokens of 16 characters or more), /v1/decide and /metrics need a read or admin token
    and /v1/tripwires an admin token (Authorization: Bearer TOKEN). Tripwires changed with
    ragbound tripwire add/remove, or by another replica in an attached Chroma or Qdrant
    collection, are picked up within seconds (docs/deploy.md). Concurrent requests are
    decided in one embedding batch.

    With --log, each decision is a JSON line (time, query, action, cause, p_value, score, ...)
    written and fsync-ed before the answer; the shift monitor runs on the decisions' scores
    and its state is kept beside the log (LOG.monitor.json), so a restart resumes it. A --log
    file that ragbound serve did not write is refused, as is a port already in use, before
    the model loads.
    """
    try:
        from ragbound.serve import ServeSettings, Tokens
        from ragbound.serve.launch import (
            context_budget,
            gate_loader,
            gateway_settings,
            launch,
            log_rotation,
        )
        from ragbound.serve.settings import Connections
    except ImportError as exc:
        raise InputError(
            f"ragbound serve needs the serve extra ({exc.name} is missing): "
            "pip install 'ragbound[serve]'"
        ) from None

    tokens = Tokens.load(token_file) if token_file is not None else None
    gateway = gateway_settings(
        upstream,
        upstream_key_file,
        context_template,
        pass_through,
        {"refusal": refusal, "abstention": abstention, "unanswerable": unanswerable},
        context_budget(context_chunks, context_chars),
        upstream_timeout,
    )
    rewriter = rewriter_for(reading, llm) if reading is not None else None
    if llm is not None and reading is None:
        raise InputError("--llm is for the rewrite reading: give --reading rewrite")
    bounds = {
        "max_connections": max_connections,
        "max_head_bytes": max_head_bytes,
        "max_url_bytes": max_url_bytes,
        "max_headers": max_headers,
        "head_timeout_s": head_timeout,
        "body_timeout_s": body_timeout,
        "body_min_rate": body_min_rate,
        "keep_alive_s": keep_alive_timeout,
        "send_timeout_s": send_timeout,
    }
    given = {name: value for name, value in bounds.items() if value is not None}
    settings = ServeSettings(
        host=host,
        port=port,
        tokens=tokens,
        log=log,
        log_queries=log_queries,  # type: ignore[arg-type]
        gateway=gateway,
        threads=threads,
        canary_minutes=canary_minutes,
        force=force,
        workers=workers,
        rotation=log_rotation(log, log_max_bytes, log_rotate == "daily"),  # type: ignore[arg-type]
        allowed_hosts=tuple(allowed_host or ()),
        alpha=alpha,
        connections=Connections(**given),  # type: ignore[arg-type]
    )
    load_gate = gate_loader(
        kb_dir,
        settings,
        reading=reading,
        tripwire_instructions=tripwire_instructions,
        rewriter=rewriter,
    )
    launch(kb_dir, load_gate, settings, tracing=tracing)


def register(app: typer.Typer) -> None:
    """Add ``serve`` to ``app``."""
    app.command("serve")(serve)
