"""The drop-in LLM gateway: ``POST /v1/chat/completions`` in front of an OpenAI-compatible server.

Each chat is decided as one conversation at its last user message: ``reject`` and ``abstain``
are answered here with the cause's reply template filled, ``answer`` goes upstream with the
retrieved chunks in the system prompt (within a budget). The decision's summary rides in the
reply's ``ragbound`` field and ``X-Ragbound-*`` headers (docs/service.md, "A drop-in LLM gateway").
``/v1/responses`` (:mod:`ragbound.serve.responses`) replies through a shape with
:class:`ChatShape`'s methods.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from ragbound.corpus.chunker import split_sentences
from ragbound.errors import InputError
from ragbound.gate import DEFAULT_CONTEXT_K, Decision, fired_topics
from ragbound.gate_texts import (
    DEFAULT_ABSTENTION,
    DEFAULT_CONTEXT_TEMPLATE,
    DEFAULT_REFUSAL,
    DEFAULT_UNANSWERABLE,
)
from ragbound.records import standard_json
from ragbound.serve.bodies import lone_surrogate
from ragbound.serve.models import MessagePart, Text
from ragbound.serve.shown import fired_ids

DECISION_FIELD = "ragbound"
SSE_DONE = b"data: [DONE]\n\n"
DEFAULT_CONTEXT_CHARS: int | None = 4_000
"""Characters of chunk text the gateway adds, at most (None: no budget): about 1,000 tokens
of English, three of the sample corpus's 200-word chunks, so that with the question and an
answer the prompt fits a 2,048-token context window (docs/service.md gives the cost)."""
HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in "%,")
"""What a header value keeps as it is (:func:`header_value`)."""
MAX_HEADER_CHARS = 1_024
"""Characters of one ``X-Ragbound-*`` header value, at most (:func:`header_list`): with the
others short, the reply's head stays within the 4-8 KiB a proxy such as nginx buffers for it by
default, far below the 100 KiB httpx (the ``openai`` client's transport) reads."""
CUT_MARK = "+{n} more"
"""The last item of a header value cut to :data:`MAX_HEADER_CHARS`: ``n`` items left out."""
DEFAULT_UPSTREAM_TIMEOUT_S = 300.0
"""Seconds the upstream may stay silent (``--upstream-timeout``): a reply that is not streamed
comes whole at the end of its generation, which on a CPU-run model can take minutes."""
CONNECT_TIMEOUT_S = 10.0
"""Seconds to connect to the upstream, at most (less when the upstream timeout is less)."""


@dataclass(frozen=True)
class GatewaySettings:
    """Where ``answer`` requests go and what the gateway says itself.

    ``upstream``: the OpenAI-compatible base URL (``http://host:port/v1``). ``api_key``: sent
    upstream as a bearer token (None: none). ``context_template``: holds ``{context}``, added
    to the system prompt on ``answer`` (None: pass-through). ``refusal``, ``abstention``,
    ``unanswerable``: the reply templates by cause (:data:`REPLY_FIELDS`). ``timeout_s``:
    seconds the upstream may stay silent. ``context_chunks``, ``context_chars``: the context's
    budget (:func:`budgeted_context`; None chars: no budget).
    """

    upstream: str
    api_key: str | None = None
    refusal: str = DEFAULT_REFUSAL
    abstention: str = DEFAULT_ABSTENTION
    unanswerable: str = DEFAULT_UNANSWERABLE
    context_template: str | None = DEFAULT_CONTEXT_TEMPLATE
    timeout_s: float = DEFAULT_UPSTREAM_TIMEOUT_S
    context_chunks: int = DEFAULT_CONTEXT_K
    context_chars: int | None = DEFAULT_CONTEXT_CHARS

    def __post_init__(self) -> None:
        if not self.upstream.startswith(("http://", "https://")):
            raise InputError(f"upstream must be an http:// or https:// URL, got {self.upstream!r}")
        if self.context_template is not None:
            check_context_template(self.context_template)
        for name in ("refusal", "abstention", "unanswerable"):
            check_reply_template(getattr(self, name), name)
        check_seconds("timeout_s", self.timeout_s)
        check_count("context_chunks", self.context_chunks)
        if self.context_chars is not None:
            check_count("context_chars", self.context_chars)

    def forwarded(self, request: ChatRequest, decision: Decision) -> dict[str, Any]:
        """The body sent upstream on ``answer``: with the context, or as sent (pass-through);
        either way without the earlier turns found forbidden (``Decision.upstream_messages``)."""
        if self.context_template is None:
            body = request.model_dump(exclude_unset=True)
        else:
            context = budgeted_context(decision, self.context_chunks, self.context_chars)
            body = with_context(request, context, self.context_template)
        body["messages"] = decision.upstream_messages(body["messages"])
        return body

    def own_text(self, decision: Decision) -> str | None:
        """The gateway's own reply to ``decision``, its cause's template filled; None for
        ``in_knowledge`` (the upstream answers)."""
        replies: dict[str, str] = {
            "forbidden": self.refusal,
            "out_of_knowledge": self.abstention,
            "unanswerable": self.unanswerable,
        }
        template = replies.get(decision.cause)
        return None if template is None else template.format(**reply_fields(decision))

    @property
    def completions_url(self) -> str:
        return self.upstream.rstrip("/") + "/chat/completions"


def check_count(name: str, value: object) -> None:
    """InputError naming ``name`` unless ``value`` is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be an integer >= 1, got {value!r}")


def check_seconds(name: str, value: object) -> None:
    """InputError naming ``name`` unless ``value`` is a finite number of seconds > 0."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (number and math.isfinite(value) and value > 0):  # type: ignore[arg-type]
        raise InputError(f"{name} must be a finite number of seconds > 0, got {value!r}")


REPLY_FIELDS: dict[str, str] = {
    "cause": "forbidden, out_of_knowledge or unanswerable",
    "reason": "the decision's reason, one line (it names the tripwires' topics on reject)",
    "p_value": "the boundary test's p-value, a number ({p_value:.3f} formats it)",
    "alpha": "the level it ran at, a number",
    "trigger_ids": "the ids of the tripwires that fired, comma-separated (empty unless reject)",
    "topics": "their topics, comma-separated (empty unless reject)",
}
"""The fields a refusal or abstention template may hold, and what each is."""
_SAMPLE_FIELDS: dict[str, object] = {
    "cause": "forbidden",
    "reason": "forbidden: tripwire rule rank<=1 fired (topic)",
    "p_value": 0.5,
    "alpha": 0.05,
    "trigger_ids": "tw-000000000000",
    "topics": "topic",
}


def reply_fields(decision: Decision) -> dict[str, object]:
    """The values of :data:`REPLY_FIELDS` for ``decision``."""
    return {
        "cause": decision.cause,
        "reason": decision.reason,
        "p_value": decision.test.p_value,
        "alpha": decision.test.alpha,
        "trigger_ids": ",".join(fired_ids(decision)),
        "topics": ",".join(fired_topics(decision)),
    }


def check_reply_template(template: str, name: str = "reply") -> str:
    """``template`` if every field in it is one of :data:`REPLY_FIELDS` and formats; an
    InputError naming ``name`` and the fields otherwise."""
    fields = ", ".join("{" + field + "}" for field in REPLY_FIELDS)
    try:
        template.format(**_SAMPLE_FIELDS)
    except KeyError as exc:
        raise InputError(
            f"the {name} template has an unknown field {{{exc.args[0]}}}; its fields are "
            f"{fields} (write other braces doubled, {{{{ and }}}})"
        ) from None
    except (IndexError, ValueError) as exc:
        raise InputError(
            f"the {name} template does not format ({exc}); its fields are {fields} (write "
            "other braces doubled, {{ and }})"
        ) from None
    return template


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


class ChatMessage(BaseModel):
    """One OpenAI chat message; fields other than ``role`` and ``content`` pass through."""

    model_config = ConfigDict(extra="allow")
    role: Text
    content: Text | list[MessagePart] | None = None


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


def conversation_id(fields: Mapping[str, Any] | None) -> str | None:
    """``metadata.conversation_id`` of a request's fields, when it is a string."""
    metadata = (fields or {}).get("metadata")
    chat_id = metadata.get("conversation_id") if isinstance(metadata, Mapping) else None
    return chat_id if isinstance(chat_id, str) and chat_id.strip() else None


def budgeted_context(decision: Decision, chunks: int, chars: int | None) -> str:
    """The decision's chunks as one text for the prompt, within the budget: at most
    ``chunks`` of them, nearest first, each whole while the text stays within ``chars``
    characters (blank lines between them count). The first chunk alone over the budget is
    cut at the last sentence end within it (at the last word end when that keeps less than
    half the budget), never dropped; a later chunk that does not fit ends the context."""
    texts: list[str] = []
    used = 0
    for chunk in decision.neighbours[:chunks]:
        cost = len(chunk.text) + (2 if texts else 0)
        if chars is None or used + cost <= chars:
            texts.append(chunk.text)
            used += cost
            continue
        if not texts:
            texts.append(cut_text(chunk.text, chars))
        break
    return "\n\n".join(texts)


def cut_text(text: str, chars: int) -> str:
    """``text`` (its white space collapsed) cut to at most ``chars`` characters: whole
    sentences when they keep at least half of it, else whole words, else the first ``chars``
    characters."""
    flat = " ".join(text.split())
    if len(flat) <= chars:
        return flat
    kept = ""
    for sentence in split_sentences(flat):
        longer = f"{kept} {sentence}" if kept else sentence
        if len(longer) > chars:
            break
        kept = longer
    if len(kept) >= chars / 2:
        return kept
    words = flat[: chars + 1].rsplit(" ", 1)[0]
    return words if len(words) <= chars else flat[:chars]


def with_context(request: ChatRequest, context: str, template: str) -> dict[str, Any]:
    """The request body to forward: ``context`` in the template added to the system prompt
    (the first message when it is a system message, else a new first message)."""
    body = request.model_dump(exclude_unset=True)
    added = template.format(context=context)
    messages = body["messages"]
    first = messages[0] if messages else None
    if first is not None and first["role"] == "system" and isinstance(first.get("content"), str):
        first["content"] = f"{first['content']}\n\n{added}"
    else:
        messages.insert(0, {"role": "system", "content": added})
    return body


def decision_headers(decision: Decision) -> dict[str, str]:
    """The decision's outline as ``X-Ragbound-*`` headers (no query, chunk or tripwire text).
    Stored ids pass :func:`header_list`: one flagged by hand in a collection may hold what a
    header cannot carry, and the reply must still be sent and read."""
    headers = {
        "X-Ragbound-Action": decision.action,
        "X-Ragbound-Cause": decision.cause,
        "X-Ragbound-P-Value": f"{decision.test.p_value:.6g}",
        "X-Ragbound-Calibration": header_list([decision.calibration_id]),
    }
    if decision.answerability is not None:
        headers["X-Ragbound-Answerability-P-Value"] = f"{decision.answerability.p_value:.6g}"
    if decision.tripwire_set:
        headers["X-Ragbound-Tripwire-Set"] = header_list([decision.tripwire_set])
    ids = header_list(fired_ids(decision))
    if ids:
        headers["X-Ragbound-Triggers"] = ids
    return headers


def header_value(text: str) -> str:
    """``text`` as a header value: visible ASCII but ``%`` and ``,`` as it is, every other
    character (control characters, spaces, non-ASCII) percent-encoded as UTF-8 (a lone
    surrogate as ``?``)."""
    data = text.encode("utf-8", "replace")
    return urllib.parse.quote_from_bytes(data, safe=HEADER_SAFE)


def header_list(items: list[str], limit: int = MAX_HEADER_CHARS) -> str:
    """``items`` through :func:`header_value`, comma-separated, in at most ``limit``
    characters: the whole items that fit, then ``+N more`` (:data:`CUT_MARK`), which no item
    can spell (a space is sent as ``%20``). The reply's JSON has them all."""
    values = [header_value(item) for item in items]
    whole = ",".join(values)
    if len(whole) <= limit:
        return whole
    room = limit - len(CUT_MARK.format(n=len(values))) - 1  # the marker and its comma
    kept: list[str] = []
    used = 0
    for value in values:
        used += len(value) + (1 if kept else 0)
        if used > room:
            break
        kept.append(value)
    return ",".join([*kept, CUT_MARK.format(n=len(values) - len(kept))])


# ---------------------------------------------------------------- the reply's shape
@dataclass(frozen=True)
class ChatShape:
    """``/v1/chat/completions``' replies: the gateway's own (``own``, ``own_stream``) and the
    upstream's (``reply``, ``relay``), whole or streamed; ``shown``, the decision as the reply
    shows it (:func:`ragbound.serve.shown.shown`), in the ``ragbound`` field."""

    request: ChatRequest

    def own(self, shown: dict[str, Any], text: str) -> dict[str, Any]:
        """A whole ``chat.completion`` answering ``text`` (a refusal or an abstention)."""
        return {
            **self._envelope("chat.completion"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            DECISION_FIELD: shown,
        }

    async def own_stream(self, shown: dict[str, Any], text: str) -> AsyncIterator[bytes]:
        """The same reply as server-sent ``chat.completion.chunk`` events, then ``[DONE]``."""
        envelope = self._envelope("chat.completion.chunk")
        delta = {"role": "assistant", "content": text}
        first = {
            **envelope,
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            DECISION_FIELD: shown,
        }
        last = {**envelope, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        yield sse_data(first)
        yield sse_data(last)
        yield SSE_DONE

    def reply(self, completion: dict[str, Any], shown: dict[str, Any]) -> dict[str, Any]:
        """The upstream's completion as it is, with the decision."""
        return {**completion, DECISION_FIELD: shown}

    async def relay(self, lines: AsyncIterator[str], shown: dict[str, Any]) -> AsyncIterator[bytes]:
        """Server-sent events relayed line by line; the first JSON ``data:`` event gains the
        decision. Blank lines (event ends) and other fields pass unchanged. A stream the
        upstream breaks off (:class:`UpstreamError`) ends with an OpenAI-style error event
        (``{"error": {"message", "type", "code"}}``) and ``[DONE]``."""
        pending = True
        ended = True  # the last line relayed ended an event (or none was relayed)
        async with contextlib.aclosing(lines):  # the upstream's reply closes with the relay
            try:
                async for line in lines:
                    data = line[5:].strip() if line.startswith("data:") else ""
                    payload = sse_json(line) if pending and data not in ("", "[DONE]") else None
                    if payload is not None:
                        payload[DECISION_FIELD] = shown
                        line = "data: " + json.dumps(payload, separators=(",", ":"))
                        pending = False
                    ended = not line
                    yield line.encode() + b"\n"
            except UpstreamError as exc:  # a blank line first ends an event left open
                yield (b"" if ended else b"\n") + sse_data({"error": exc.error_object()})
                yield SSE_DONE

    def _envelope(self, kind: str) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-ragbound-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": self.request.model or "ragbound",
        }


def sse_data(payload: dict[str, Any]) -> bytes:
    """One server-sent event holding ``payload`` as its JSON data."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def sse_json(line: str) -> dict[str, Any] | None:
    """The JSON object of a ``data:`` line (None: not one)."""
    try:
        payload = json.loads(line[5:])
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


# ------------------------------------------------------------------------ upstream
class UpstreamError(Exception):
    """The upstream server could not be reached, or answered with an error: ``status`` to
    answer the caller (the upstream's own, or 502/504), ``body`` its JSON error if it sent one.
    """

    def __init__(self, status: int, message: str, body: Any = None):
        super().__init__(message)
        self.status = status
        self.body = body

    def error_object(self) -> dict[str, Any]:
        """The error as OpenAI words one: what a broken stream's last event holds."""
        code = "upstream_timeout" if self.status == 504 else "upstream_error"
        return {"message": str(self), "type": "server_error", "param": None, "code": code}


def upstream_json(raw: bytes | str, what: str) -> dict[str, Any]:
    """An upstream reply (``what``: a whole ``reply`` or one ``stream event``'s data) as the
    gateway passes it on: a standard JSON object of Unicode text (no NaN, no lone surrogate);
    UpstreamError 502 naming the problem otherwise."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        payload = standard_json(text)
    except ValueError:  # not UTF-8, malformed, or NaN and the like
        raise UpstreamError(502, f"the upstream server's {what} is not standard JSON") from None
    if not isinstance(payload, dict):
        raise UpstreamError(502, f"the upstream server's {what} is not a JSON object")
    problem = lone_surrogate(text, payload)
    if problem is not None:
        raise UpstreamError(502, f"the upstream server's {what} is not Unicode text: {problem}")
    return payload


class Upstream:
    """The HTTP client for the upstream server (one connection pool for the service)."""

    def __init__(self, settings: GatewaySettings):
        self.settings = settings
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        connect = min(CONNECT_TIMEOUT_S, settings.timeout_s)
        timeout = httpx.Timeout(settings.timeout_s, connect=connect)
        self.client = httpx.AsyncClient(headers=headers, timeout=timeout)

    async def close(self) -> None:
        await self.client.aclose()

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """The upstream's chat completion for ``body`` (a JSON object)."""
        reply = await self._send(body)
        try:
            raw = await reply.aread()
        except httpx.HTTPError as exc:  # reset, closed or silent mid-body
            raise self._failure(exc, replying=True) from None
        finally:
            await reply.aclose()
        return upstream_json(raw, "reply")

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[str]:
        """Open the upstream stream now (so its errors become this request's status); an
        iterator over its lines that closes it at the end. Each event is held to
        :func:`upstream_json`; a stream that breaks off, ends without ``data: [DONE]`` or sends
        a bad event raises UpstreamError from the iterator (one ``error:`` line on stderr)."""
        reply = await self._send({**body, "stream": True})

        async def lines() -> AsyncIterator[str]:
            done = False
            try:
                async for line in reply.aiter_lines():
                    data = line[5:].strip() if line.startswith("data:") else None
                    done = done or data == "[DONE]"
                    if data and data != "[DONE]":  # each event held to the whole reply's rules
                        upstream_json(data, "stream event")
                    yield line
                if not done:
                    url = self.settings.completions_url
                    why = f"the upstream server {url} ended its stream without data: [DONE]"
                    raise UpstreamError(502, why)
            except httpx.HTTPError as exc:
                raise self._broken(self._failure(exc, replying=True)) from None
            except UpstreamError as exc:
                raise self._broken(exc) from None
            finally:
                await reply.aclose()

        return lines()

    def _failure(self, exc: httpx.HTTPError, replying: bool = False) -> UpstreamError:
        """What an httpx error means for the caller: 504 for a timeout, else 502
        (``replying``: it happened while the reply was read, after the headers)."""
        url = self.settings.completions_url
        if isinstance(exc, httpx.TimeoutException):
            when = " mid-reply" if replying else ""
            seconds = self.settings.timeout_s
            return UpstreamError(504, f"the upstream server {url} timed out{when} ({seconds:g} s)")
        if replying:
            return UpstreamError(502, f"the upstream server {url} broke off its reply ({exc})")
        return UpstreamError(502, f"the upstream server {url} is unreachable ({exc})")

    def _broken(self, exc: UpstreamError) -> UpstreamError:
        """``exc``, said once on stderr: a stream's status was sent before it broke."""
        sys.stderr.write(f"error: a streamed reply was cut: {exc}\n")
        return exc

    async def _send(self, body: dict[str, Any]) -> httpx.Response:
        """The upstream's open reply (the caller closes it); errors become UpstreamError."""
        url = self.settings.completions_url
        try:
            reply = await self.client.send(
                self.client.build_request("POST", url, json=body), stream=True
            )
        except httpx.HTTPError as exc:
            raise self._failure(exc) from None
        if reply.status_code < 400:
            return reply
        try:
            raw = await reply.aread()
        except httpx.HTTPError as exc:
            raise self._failure(exc, replying=True) from None
        finally:
            await reply.aclose()
        try:
            error_body = standard_json(raw.decode("utf-8"))
        except ValueError:
            error_body = None
        text = raw[:300].decode(errors="replace")
        raise UpstreamError(
            reply.status_code,
            f"the upstream server answered {reply.status_code}: {text}",
            error_body,
        )
