"""``ragbound serve``: the gate of one knowledge base as an HTTP service."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ragbound.cli import validate
from ragbound.cli.detect import CalibratedKbArg
from ragbound.errors import InputError

LOG_QUERY_MODES = ("full", "hash", "none")


def serve(
    kb_dir: CalibratedKbArg,
    host: Annotated[
        str,
        typer.Option(help="Address to listen on; other than loopback only with --token-file."),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.", callback=validate.port)] = 8000,
    token_file: Annotated[
        Path | None,
        typer.Option(
            help="Bearer tokens, one a line: read:TOKEN (check) or admin:TOKEN (also change "
            "the tripwires).",
            callback=validate.existing_file,
        ),
    ] = None,
    log: Annotated[
        Path | None,
        typer.Option(
            help="Append every decision to this JSONL query log (durable before the answer).",
            callback=validate.output_file,
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
) -> None:
    """Serve the knowledge base's decisions over HTTP (FastAPI on uvicorn).

    POST /v1/check {"query": ...} answers the decision as JSON (action answer, abstain or
    reject, p_value, triggers, neighbours); POST /v1/check/batch {"queries": [...]} answers
    {"results": [...]}. GET/POST/DELETE /v1/tripwires list, add and remove tripwires live
    (admin token). GET /healthz, /readyz, /metrics (Prometheus) and /openapi.json.
    GET /dashboard is a live page (decision counts, p-value histogram, recent rejections,
    the shift monitor's windows) fed by GET /v1/stats (JSON); both need a read token, which a
    browser may give as the Basic-auth password.

    Without --token-file the service needs no token and binds only a loopback address. With
    it (tokens of 16 characters or more), /v1/check and /metrics need a read or admin token
    and /v1/tripwires an admin token (Authorization: Bearer TOKEN). Tripwires changed with
    ragbound tripwire add/remove are picked up too. Concurrent requests are decided in one
    embedding batch.
    With --log, each decision is a JSON line (time, query, action, p_value, score, ...)
    written and fsync-ed before the answer; the shift monitor runs on the decisions' scores
    and its state is kept beside the log (LOG.monitor.json), so a restart resumes it.
    """
    try:
        import uvicorn

        from ragbound.serve import ServeSettings, Tokens, create_app
    except ImportError as exc:
        raise InputError(
            f"ragbound serve needs the serve extra ({exc.name} is missing): "
            "pip install 'ragbound[serve]'"
        ) from None
    from ragbound.gate import Gate

    tokens = Tokens.load(token_file) if token_file is not None else None
    settings = ServeSettings(
        host=host,
        port=port,
        tokens=tokens,
        log=log,
        log_queries=log_queries,  # type: ignore[arg-type]
    )
    app = create_app(Gate.load(kb_dir), settings)
    sys.stderr.write(
        f"ragbound serve: {kb_dir} on http://{host}:{port}"
        f"{'' if tokens else ' (no tokens: loopback only)'}"
        f"{f', log {log} ({log_queries})' if log else ''}\n"
    )
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)


def register(app: typer.Typer) -> None:
    """Add ``serve`` to ``app``."""
    app.command("serve")(serve)
