"""JSON errors that name the limit, and the ASGI middleware for body size and latency.

The body limit is enforced before the app reads the body: a ``Content-Length`` above it is
refused at once; a body sent without one (chunked) is read up to the limit and refused as
soon as it passes it. Every request's latency is observed per route (unknown paths share
the label ``other``, so a scan cannot grow the metrics without bound).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from typing import Any

from fastapi.responses import JSONResponse

from ragbound.serve.metrics import Registry

Scope = dict[str, Any]
Message = dict[str, Any]


class AsciiJSONResponse(JSONResponse):
    """JSON with every non-ASCII character escaped: an error that echoes a request's text
    still renders when that text holds a lone surrogate (UTF-8 cannot encode one). What JSON
    cannot hold is made text first (:func:`json_safe`), so an error answer always renders."""

    def render(self, content: Any) -> bytes:
        safe = json_safe(content)
        return json.dumps(safe, allow_nan=False, separators=(",", ":")).encode("ascii")


def json_safe(value: Any) -> Any:
    """``value`` with what standard JSON cannot hold made text: a float NaN or infinity as
    ``"nan"``/``"inf"``, bytes decoded (bad bytes escaped), any other object as ``str()``
    (an exception in a validation error's ``ctx``, say); mappings and sequences throughout."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, Mapping):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(item) for item in value]
    return str(value)


class ApiError(Exception):
    """An HTTP error answered as ``{"error", "limit", "max"}``."""

    def __init__(self, status: int, message: str, limit: str | None = None, value=None):
        super().__init__(message)
        self.status, self.message, self.limit, self.value = status, message, limit, value

    def response(self) -> JSONResponse:
        body: dict[str, object] = {"error": self.message}
        if self.limit is not None:
            body |= {"limit": self.limit, "max": self.value}
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return AsciiJSONResponse(body, status_code=self.status, headers=headers)


class _TooLarge(Exception):
    pass


class RequestLimits:
    """ASGI middleware: the body-size limit (413), the latency and status metrics, and (with
    workers) the ``X-Ragbound-Worker`` header naming the process that answered (``worker``,
    None without workers)."""

    def __init__(self, app, *, max_body_bytes: int, worker: str | None, metrics: Registry):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.worker = worker
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}
        # which worker answered (with --workers): for operators and the tests of balancing
        worker = [] if self.worker is None else [(b"x-ragbound-worker", self.worker.encode())]

        async def send_counting(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                message = {**message, "headers": [*message.get("headers", []), *worker]}
            await send(message)

        try:
            receive = await self._limited(scope, receive)
            await self.app(scope, receive, send_counting)
        except _TooLarge:
            await self._too_large(scope, receive, send_counting)
        finally:
            self._observe(scope, status["code"], time.perf_counter() - started)

    async def _limited(self, scope: Scope, receive):
        """``receive`` with the whole body checked against the limit (buffered when chunked)."""
        limit = self.max_body_bytes
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                declared = limit + 1
            if declared > limit:
                raise _TooLarge
            return receive
        if scope.get("method") in ("GET", "HEAD"):
            return receive
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                raise _TooLarge
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return replay

    async def _too_large(self, scope: Scope, receive, send) -> None:
        limit = self.max_body_bytes
        message = f"request body larger than {limit} bytes"
        response = ApiError(413, message, "max_body_bytes", limit).response()
        await response(scope, receive, send)

    def _observe(self, scope: Scope, status: int, seconds: float) -> None:
        route = scope.get("route")
        path = getattr(route, "path", None) or "other"
        metrics = self.metrics
        metrics.observe("ragbound_request_seconds", seconds, route=path)
        metrics.inc("ragbound_requests_total", route=path, code=str(status))
