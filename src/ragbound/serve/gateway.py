"""The drop-in LLM gateway: ``POST /v1/chat/completions`` in front of an OpenAI-compatible server.

The gate decides the last user message of each chat request:

- ``reject`` (forbidden) / ``abstain`` (out of knowledge): the gateway answers itself with a
  completion whose text is the refusal or the "I don't know" reply; the upstream server is
  never called;
- ``answer``: the request goes to the upstream server with the retrieved chunks added to the
  system prompt (a template with a ``{context}`` field), or unchanged in pass-through mode.

Either way the full :class:`~ragbound.gate.Decision` is in the response's ``ragbound`` field
(in the first chunk of a stream) and its summary in ``X-Ragbound-*`` headers, so an OpenAI
client that knows nothing of ragbound still works, and one that does can read why.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from ragbound.errors import InputError
from ragbound.gate import Decision
from ragbound.gate_texts import DEFAULT_ABSTENTION, DEFAULT_CONTEXT_TEMPLATE, DEFAULT_REFUSAL
from ragbound.serve.models import Text

DECISION_FIELD = "ragbound"
SSE_DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True)
class GatewaySettings:
    """Where ``answer`` requests go and what the gateway says itself.

    ``upstream``: the OpenAI-compatible base URL (``http://host:port/v1``); chat requests go to
    ``{upstream}/chat/completions``. ``api_key``: sent upstream as a bearer token (None: no
    header). ``context_template``: a text with one ``{context}`` field added to the system
    prompt on ``answer`` (None: pass-through, the request is forwarded unchanged).
    ``timeout_s``: how long the upstream may take (seconds, per read while streaming).
    """

    upstream: str
    api_key: str | None = None
    refusal: str = DEFAULT_REFUSAL
    abstention: str = DEFAULT_ABSTENTION
    context_template: str | None = DEFAULT_CONTEXT_TEMPLATE
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if not self.upstream.startswith(("http://", "https://")):
            raise InputError(f"upstream must be an http:// or https:// URL, got {self.upstream!r}")
        if self.context_template is not None:
            check_context_template(self.context_template)

    @property
    def completions_url(self) -> str:
        return self.upstream.rstrip("/") + "/chat/completions"


def check_context_template(template: str) -> str:
    """``template`` if it has exactly the one field ``{context}``; InputError otherwise."""
    try:
        template.format(context="")
    except (KeyError, IndexError, ValueError) as exc:
        raise InputError(
            "the context template may hold only the field {context} (write other braces "
            f"doubled, {{{{ and }}}}): {type(exc).__name__} {exc}"
        ) from None
    if "{context}" not in template:
        raise InputError("the context template has no {context} field for the chunks")
    return template


class ContentPart(BaseModel):
    """One part of a message's content; only ``text`` parts are decided, all are forwarded."""

    model_config = ConfigDict(extra="allow")
    type: Text
    text: Text | None = None


class ChatMessage(BaseModel):
    """One OpenAI chat message; fields other than ``role`` and ``content`` pass through."""

    model_config = ConfigDict(extra="allow")
    role: Text
    content: Text | list[ContentPart] | None = None


class ChatRequest(BaseModel):
    """An OpenAI chat-completions request; every other field is forwarded as sent."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [{"model": "local", "messages": [{"role": "user", "content": "Why?"}]}]
        },
    )
    model: Text | None = Field(None, description="passed to the upstream server as given")
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False


def last_user_text(request: ChatRequest) -> str:
    """The text of the last ``user`` message (text parts joined); InputError without one."""
    for message in reversed(request.messages):
        if message.role != "user":
            continue
        if isinstance(message.content, str):
            return message.content
        parts = [p.text or "" for p in message.content or [] if p.type == "text"]
        if any(part.strip() for part in parts):
            return "\n".join(parts)
        raise InputError("the last user message has no text to decide")
    raise InputError("the chat has no user message to decide")


def with_context(request: ChatRequest, decision: Decision, template: str) -> dict[str, Any]:
    """The request body to forward: the decision's chunks added to the system prompt (the
    first message when it is a system message, else a new first message)."""
    body = request.model_dump(exclude_unset=True)
    context = template.format(context=decision.context_text())
    messages = body["messages"]
    first = messages[0] if messages else None
    if first is not None and first["role"] == "system" and isinstance(first.get("content"), str):
        first["content"] = f"{first['content']}\n\n{context}"
    else:
        messages.insert(0, {"role": "system", "content": context})
    return body


def decision_headers(decision: Decision) -> dict[str, str]:
    """The decision's summary as ``X-Ragbound-*`` headers (ASCII only: no query text)."""
    headers = {
        "X-Ragbound-Action": decision.action,
        "X-Ragbound-P-Value": f"{decision.test.p_value:.6g}",
        "X-Ragbound-Calibration": decision.calibration_id,
    }
    if decision.tripwire_set:
        headers["X-Ragbound-Tripwire-Set"] = decision.tripwire_set
    triggers = decision.tripwires.triggers if decision.tripwires is not None else []
    ids = ",".join(t.id for t in triggers if t.id.isascii())
    if ids:
        headers["X-Ragbound-Triggers"] = ids
    return headers


def decision_json(decision: Decision) -> dict[str, Any]:
    return decision.model_dump(mode="json")


# ------------------------------------------------------------- the gateway's own replies
def own_completion(request: ChatRequest, decision: Decision, text: str) -> dict[str, Any]:
    """A whole ``chat.completion`` answering ``text`` (a refusal or an abstention)."""
    return {
        **_envelope(request, "chat.completion"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        DECISION_FIELD: decision_json(decision),
    }


async def own_stream(request: ChatRequest, decision: Decision, text: str) -> AsyncIterator[bytes]:
    """The same reply as server-sent ``chat.completion.chunk`` events, then ``[DONE]``."""
    envelope = _envelope(request, "chat.completion.chunk")
    first = {
        **envelope,
        "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}
        ],
        DECISION_FIELD: decision_json(decision),
    }
    last = {**envelope, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    yield _event(first)
    yield _event(last)
    yield SSE_DONE


def _envelope(request: ChatRequest, kind: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-ragbound-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": request.model or "ragbound",
    }


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


# ------------------------------------------------------------------------ upstream
class UpstreamError(Exception):
    """The upstream server could not be reached, or answered with an error.

    ``status``: the status to answer the caller (the upstream's own 4xx/5xx, or 502/504);
    ``body``: the upstream's JSON error when it sent one.
    """

    def __init__(self, status: int, message: str, body: Any = None):
        super().__init__(message)
        self.status = status
        self.body = body


class Upstream:
    """The HTTP client for the upstream server (one connection pool for the service)."""

    def __init__(self, settings: GatewaySettings):
        self.settings = settings
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        timeout = httpx.Timeout(settings.timeout_s, connect=10.0)
        self.client = httpx.AsyncClient(headers=headers, timeout=timeout)

    async def close(self) -> None:
        await self.client.aclose()

    async def complete(self, body: dict[str, Any], decision: Decision) -> dict[str, Any]:
        """The upstream's completion for ``body``, with the decision in its ``ragbound`` field."""
        reply = await self._send(body)
        try:
            payload = json.loads(await reply.aread())
        except ValueError:
            raise UpstreamError(502, "the upstream server's reply is not JSON") from None
        finally:
            await reply.aclose()
        if not isinstance(payload, dict):
            raise UpstreamError(502, "the upstream server's reply is not a JSON object")
        return {**payload, DECISION_FIELD: decision_json(decision)}

    async def stream(self, body: dict[str, Any], decision: Decision) -> AsyncIterator[bytes]:
        """Open the upstream stream now (so its errors become this request's status) and
        return an iterator relaying its events, the decision added to the first data event."""
        reply = await self._send({**body, "stream": True})

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for event in _with_decision(reply.aiter_lines(), decision):
                    yield event
            finally:
                await reply.aclose()

        return relay()

    async def _send(self, body: dict[str, Any]) -> httpx.Response:
        """The upstream's open reply (the caller closes it); errors become UpstreamError."""
        url = self.settings.completions_url
        try:
            reply = await self.client.send(
                self.client.build_request("POST", url, json=body), stream=True
            )
        except httpx.TimeoutException:
            raise UpstreamError(504, f"the upstream server {url} timed out") from None
        except httpx.TransportError as exc:
            raise UpstreamError(502, f"the upstream server {url} is unreachable ({exc})") from None
        if reply.status_code < 400:
            return reply
        raw = await reply.aread()
        await reply.aclose()
        try:
            error_body = json.loads(raw)
        except ValueError:
            error_body = None
        text = raw[:300].decode(errors="replace")
        raise UpstreamError(
            reply.status_code,
            f"the upstream server answered {reply.status_code}: {text}",
            error_body,
        )


async def _with_decision(lines: AsyncIterator[str], decision: Decision) -> AsyncIterator[bytes]:
    """Server-sent events relayed line by line; the first JSON ``data:`` event gains the
    decision. Blank lines (event ends) and other fields pass unchanged."""
    pending = True
    async for line in lines:
        if pending and line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            try:
                payload = json.loads(line[5:])
            except ValueError:
                payload = None
            if isinstance(payload, dict):
                payload[DECISION_FIELD] = decision_json(decision)
                line = "data: " + json.dumps(payload, separators=(",", ":"))
                pending = False
        yield line.encode() + b"\n"
