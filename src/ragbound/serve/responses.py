"""OpenAI's Responses API in the gateway: ``POST /v1/responses``, translated to Chat Completions.

Upstream servers speak Chat Completions only, so a Responses request is translated to a chat
request (:func:`to_chat`), decided and forwarded as one, and the upstream's completion, whole or
streamed, translated back into a Response or the Responses API's events (:class:`ResponsesShape`).
Fields needing state between requests are refused (400). docs/service.md, "The Responses API",
gives the translation field by field.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ragbound.errors import InputError
from ragbound.serve.gateway import (
    DECISION_FIELD,
    ChatRequest,
    UpstreamError,
    sse_data,
    sse_json,
)
from ragbound.serve.limits import ApiError
from ragbound.serve.models import Text

STATELESS = "the gateway keeps no state between requests: send the whole conversation as input"
"""Why ``previous_response_id`` and the like are refused."""
NEEDS_STATE = ("previous_response_id", "conversation", "prompt", "background")
"""Request fields that refer to state kept between requests (refused when set)."""
NOT_FORWARDED = frozenset(
    {
        "include",
        "max_tool_calls",
        "metadata",
        "prompt_cache_key",
        "prompt_cache_retention",
        "reasoning",
        "safety_identifier",
        "service_tier",
        "store",
        "stream_options",
        "top_logprobs",
        "truncation",
    }
)
"""Responses API fields with no Chat Completions equivalent: accepted, not forwarded."""
TRANSLATED = frozenset(
    {"model", "input", "instructions", "stream", "max_output_tokens", "text", "tools"}
    | {"tool_choice", *NEEDS_STATE}
)
MESSAGE_ROLES = ("user", "assistant", "system", "developer")
HOSTED_ITEMS = frozenset(
    {
        "apply_patch_call",
        "apply_patch_call_output",
        "code_interpreter_call",
        "compaction",
        "computer_call",
        "computer_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "file_search_call",
        "image_generation_call",
        "local_shell_call",
        "local_shell_call_output",
        "mcp_approval_request",
        "mcp_approval_response",
        "mcp_call",
        "mcp_list_tools",
        "shell_call",
        "shell_call_output",
        "tool_search_call",
        "tool_search_output",
        "web_search_call",
    }
)
"""Input item types of OpenAI's hosted tools, which a chat-completions server cannot run."""
FINISH_STATUS = {"length": "max_output_tokens", "content_filter": "content_filter"}
"""Chat finish reasons that leave a Response ``incomplete``, with the Responses reason."""


class ResponsesRequest(BaseModel):
    """An OpenAI Responses API request (``client.responses.create``); see the module."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {"model": "local", "input": "What do bees make?"},
                {
                    "model": "local",
                    "instructions": "Be brief.",
                    "input": [{"role": "user", "content": "What do bees make?"}],
                },
            ]
        },
    )
    model: Text | None = Field(None, description="passed to the upstream server as given")
    input: Text | list[dict[str, Any]] = Field(
        description="the user's message, or the whole conversation as a list of input items"
    )
    instructions: Text | None = Field(None, description="a system message, first")
    stream: bool = False
    previous_response_id: Text | None = Field(None, description=f"refused (400): {STATELESS}")
    max_output_tokens: int | None = Field(None, description="sent as max_tokens")

    @field_validator("input", mode="before")
    @classmethod
    def _string_or_items(cls, value: object) -> object:
        if not isinstance(value, (str, list)):
            raise ValueError(
                f"input must be a string or a list of input items, not {type(value).__name__}"
            )
        return value


# --------------------------------------------------------------- request translation
def refuse_state(request: ResponsesRequest) -> None:
    """ApiError 400 when the request refers to state kept between requests."""
    fields = {**(request.model_extra or {}), "previous_response_id": request.previous_response_id}
    for name in NEEDS_STATE:
        if fields.get(name) not in (None, False):
            raise ApiError(400, f"{name} is not supported: {STATELESS}")
    if isinstance(request.input, list):
        for i, item in enumerate(request.input):
            if item.get("type") == "item_reference":
                raise ApiError(400, f"input item {i + 1}: item_reference: {STATELESS}")


def to_chat(request: ResponsesRequest) -> ChatRequest:
    """The chat-completions request the Responses request translates to (see the module);
    ApiError 400 for state it refers to, InputError (422) for what a chat cannot hold."""
    refuse_state(request)
    messages: list[dict[str, Any]] = []
    if request.instructions is not None:
        messages.append({"role": "system", "content": request.instructions})
    if isinstance(request.input, str):
        messages.append({"role": "user", "content": request.input})
    else:
        for i, item in enumerate(request.input):
            _add_item(messages, item, f"input item {i + 1}")
    if not messages:
        raise InputError("input: no messages")
    body: dict[str, Any] = {"messages": messages, "stream": request.stream}
    extra = request.model_extra or {}
    body |= {k: v for k, v in extra.items() if k not in NOT_FORWARDED and k not in TRANSLATED}
    if request.model is not None:
        body["model"] = request.model
    if request.max_output_tokens is not None:
        body["max_tokens"] = request.max_output_tokens
    body |= _chat_tools(extra.get("tools"), extra.get("tool_choice"))
    response_format = _response_format(extra.get("text"))
    if response_format is not None:
        body["response_format"] = response_format
    try:
        return ChatRequest.model_validate(body)
    except ValidationError as exc:  # a message's text that is not Unicode, say
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise InputError(f"input, as chat messages: {problems}") from None


def _add_item(messages: list[dict[str, Any]], item: dict[str, Any], where: str) -> None:
    kind = item.get("type", "message")
    if not isinstance(kind, str):
        raise InputError(f"{where}: the item's type must be a string")
    if kind == "message":
        role = item.get("role")
        if role not in MESSAGE_ROLES:
            raise InputError(
                f"{where}: unknown role {role!r}; expected one of {', '.join(MESSAGE_ROLES)}"
            )
        content = _chat_content(item.get("content"), where)
        messages.append({"role": "system" if role == "developer" else role, "content": content})
    elif kind == "function_call":
        call = {
            "id": _string(item, "call_id", where),
            "type": "function",
            "function": {
                "name": _string(item, "name", where),
                "arguments": _string(item, "arguments", where),
            },
        }
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        text = _chat_content(item.get("output"), where)
        if not isinstance(text, str):
            raise InputError(f"{where}: a function_call_output's output must be text")
        call_id = _string(item, "call_id", where)
        messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
    elif kind == "reasoning":
        return
    elif kind in HOSTED_ITEMS:
        raise InputError(
            f"{where}: {kind} items come from OpenAI's hosted tools, which the upstream (a "
            "chat-completions server) cannot run"
        )
    else:
        raise InputError(
            f"{where}: unknown item type {kind!r}; expected message, function_call, "
            "function_call_output or reasoning"
        )


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise InputError(f"{where}: {item.get('type')} needs a {key!r} string")
    return value


def _chat_content(content: object, where: str) -> str | list[dict[str, Any]]:
    """A message item's content as a chat message's: a string, or a list of text and image
    parts when it holds an image (InputError for a part a chat message cannot hold)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InputError(f"{where}: content must be a string or a list of parts")
    parts = []
    for j, part in enumerate(content):
        at = f"{where}, part {j + 1}"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text"):
            parts.append({"type": "text", "text": _string(part, "text", at)})
        elif kind == "refusal":
            parts.append({"type": "text", "text": _string(part, "refusal", at)})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            image = {"url": part["image_url"], "detail": part.get("detail") or "auto"}
            parts.append({"type": "image_url", "image_url": image})
        elif kind is None:
            raise InputError(f"{at} must be an object with a 'type'")
        else:
            raise InputError(
                f"{at}: a {kind} part cannot be sent to a chat-completions server (text parts "
                "and input_image by image_url can)"
            )
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _chat_tools(tools: object, choice: object) -> dict[str, Any]:
    """``tools`` and ``tool_choice`` in their chat forms (function tools only)."""
    body: dict[str, Any] = {}
    if tools is not None:
        if not isinstance(tools, list):
            raise InputError("tools must be a list")
        body["tools"] = [_chat_tool(tool, f"tool {i + 1}") for i, tool in enumerate(tools)]
    if choice is None:
        return body
    if choice in ("auto", "none", "required"):
        body["tool_choice"] = choice
    elif isinstance(choice, dict) and choice.get("type") == "function" and choice.get("name"):
        body["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise InputError(
            "tool_choice: 'auto', 'none', 'required' or {'type': 'function', 'name': ...}"
        )
    return body


def _chat_tool(tool: object, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
        raise InputError(
            f"{where}: only function tools can be forwarded to a chat-completions server, "
            f"not {kind!r}"
        )
    keys = ("name", "description", "parameters", "strict")
    return {"type": "function", "function": {k: tool[k] for k in keys if k in tool}}


def _response_format(text: object) -> dict[str, Any] | None:
    """``text.format`` as a chat ``response_format`` (None: plain text)."""
    form = text.get("format") if isinstance(text, dict) else None
    if not isinstance(form, dict) or form.get("type") in (None, "text"):
        return None
    if form.get("type") == "json_object":
        return {"type": "json_object"}
    if form.get("type") == "json_schema":
        keys = ("name", "schema", "strict", "description")
        return {"type": "json_schema", "json_schema": {k: form[k] for k in keys if k in form}}
    raise InputError(f"text.format: unknown type {form.get('type')!r}")


# ----------------------------------------------------------------- reply translation
@dataclass
class _Output:
    """What a reply says: text, function calls, why it stopped, the tokens it used."""

    text: str = ""
    calls: list[dict[str, str]] = field(default_factory=list)
    finish: str | None = "stop"
    usage: dict[str, Any] | None = None


@dataclass
class ResponsesShape:
    """``/v1/responses``' replies (as the gateway's ``ChatShape``): Responses objects and
    events, made from the gateway's own text or from the upstream's chat completion."""

    request: ResponsesRequest
    id: str = field(default_factory=lambda: f"resp_ragbound_{uuid.uuid4().hex}")
    message_id: str = field(default_factory=lambda: f"msg_ragbound_{uuid.uuid4().hex}")
    created_at: int = field(default_factory=lambda: int(time.time()))
    sequence: int = 0
    opened: bool = False  # the message item's events have begun

    def own(self, shown: dict[str, Any], text: str) -> dict[str, Any]:
        """A whole Response answering ``text`` (a refusal or an abstention)."""
        return self._response(_Output(text, usage=_usage(None)), shown)

    async def own_stream(self, shown: dict[str, Any], text: str) -> AsyncIterator[bytes]:
        """The same reply as the Responses API's server-sent events."""
        output = _Output(text, usage=_usage(None))
        for event in [*self._start(shown), *self._delta(text), *self._finish(output, shown)]:
            yield event

    def reply(self, completion: dict[str, Any], shown: dict[str, Any]) -> dict[str, Any]:
        """The upstream's chat completion as a Response."""
        choices = completion.get("choices") or [{}]
        message = choices[0].get("message") or {}
        output = _Output(
            text=message.get("content") or message.get("refusal") or "",
            calls=[_call(c) for c in message.get("tool_calls") or []],
            finish=choices[0].get("finish_reason"),
            usage=_usage(completion.get("usage")),
        )
        return self._response(output, shown, completion.get("model"))

    async def relay(self, lines: AsyncIterator[str], shown: dict[str, Any]) -> AsyncIterator[bytes]:
        """The upstream's chat-completion chunks as the Responses API's events; an error
        the upstream sends, or a stream it breaks off (:class:`UpstreamError`), ends them
        with ``response.failed``."""
        for event in self._start(shown):
            yield event
        output = _Output(finish=None)
        calls: dict[int, dict[str, str]] = {}
        async with contextlib.aclosing(lines):  # the upstream's reply closes with the relay
            try:
                async for line in lines:
                    chunk = sse_json(line) if line.startswith("data:") else None
                    if chunk is not None and chunk.get("error"):
                        yield self._event("response.failed", response=self._failed(chunk["error"]))
                        return
                    for event in self._chunk(chunk or {}, output, calls):
                        yield event
            except UpstreamError as exc:
                yield self._event("response.failed", response=self._failed(str(exc)))
                return
        output.calls = [calls[i] for i in sorted(calls)]
        for event in self._finish(output, shown):
            yield event

    def _chunk(
        self, chunk: dict[str, Any], output: _Output, calls: dict[int, dict[str, str]]
    ) -> list[bytes]:
        """Add a chat-completion chunk to ``output`` and ``calls``; its text's events."""
        events: list[bytes] = []
        output.usage = _usage(chunk["usage"]) if chunk.get("usage") else output.usage
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                output.text += delta["content"]
                events += self._delta(delta["content"])
            for call in delta.get("tool_calls") or []:
                _merge_call(calls, call)
            output.finish = choice.get("finish_reason") or output.finish
        return events

    # ------------------------------------------------------------------ the events
    def _start(self, shown: dict[str, Any]) -> list[bytes]:
        snapshot = self._snapshot("in_progress", [])
        return [
            self._event("response.created", response={**snapshot, DECISION_FIELD: shown}),
            self._event("response.in_progress", response=snapshot),
        ]

    def _open(self) -> list[bytes]:
        """The message item's first events, once."""
        if self.opened:
            return []
        self.opened = True
        item = self._message("", "in_progress")
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [
            self._event("response.output_item.added", output_index=0, item=item),
            self._event("response.content_part.added", **self._at(), part=part),
        ]

    def _delta(self, text: str) -> list[bytes]:
        opened = self._open()  # first: the events are numbered as they are made
        return [*opened, self._event("response.output_text.delta", **self._at(), delta=text)]

    def _finish(self, output: _Output, shown: dict[str, Any]) -> list[bytes]:
        events = [] if output.calls else self._open()  # a reply of no text is an empty message
        if self.opened:
            message = self._message(output.text, "completed")
            events += [
                self._event("response.output_text.done", **self._at(), text=output.text),
                self._event("response.content_part.done", **self._at(), part=message["content"][0]),
                self._event("response.output_item.done", output_index=0, item=message),
            ]
        first = 1 if self.opened else 0
        for index, call in enumerate(output.calls, start=first):
            item = _call_item(call)
            events += [
                self._event("response.output_item.added", output_index=index, item=item),
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    arguments=call["arguments"],
                    name=call["name"],
                ),
                self._event("response.output_item.done", output_index=index, item=item),
            ]
        response = self._response(output, shown)
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        return [*events, self._event(kind, response=response)]

    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return b"event: " + kind.encode() + b"\n" + sse_data(payload)

    def _at(self) -> dict[str, Any]:
        return {"item_id": self.message_id, "output_index": 0, "content_index": 0, "logprobs": []}

    # ---------------------------------------------------------------- the objects
    def _message(self, text: str, status: str) -> dict[str, Any]:
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        return {
            "type": "message",
            "id": self.message_id,
            "status": status,
            "role": "assistant",
            "content": [part] if status == "completed" else [],
        }

    def _response(
        self, output: _Output, shown: dict[str, Any], model: str | None = None
    ) -> dict[str, Any]:
        items = [self._message(output.text, "completed")] if output.text or not output.calls else []
        items += [_call_item(call) for call in output.calls]
        reason = FINISH_STATUS.get(output.finish or "")
        response = self._snapshot("incomplete" if reason else "completed", items, model)
        response["incomplete_details"] = {"reason": reason} if reason else None
        response["completed_at"] = None if reason else int(time.time())
        response["usage"] = output.usage
        return {**response, DECISION_FIELD: shown}

    def _failed(self, error: object) -> dict[str, Any]:
        message = error.get("message") if isinstance(error, dict) else error
        response = self._snapshot("failed", [])
        response["error"] = {"code": "server_error", "message": str(message)}
        return response

    def _snapshot(self, status: str, output: list[dict[str, Any]], model: str | None = None):
        extra = self.request.model_extra or {}
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "model": model or self.request.model or "ragbound",
            "output": output,
            "instructions": self.request.instructions,
            "max_output_tokens": self.request.max_output_tokens,
            "previous_response_id": None,
            "error": None,
            "incomplete_details": None,
            "parallel_tool_calls": extra.get("parallel_tool_calls", True),
            "temperature": extra.get("temperature"),
            "top_p": extra.get("top_p"),
            "tool_choice": extra.get("tool_choice", "auto"),
            "tools": extra.get("tools") or [],
            "text": extra.get("text") or {"format": {"type": "text"}},
            "metadata": extra.get("metadata") or {},
            "user": extra.get("user"),
            "store": False,
            "truncation": "disabled",
            "usage": None,
        }


def _usage(usage: object) -> dict[str, Any]:
    """A chat ``usage`` in the Responses API's words (zeros when there is none)."""
    counts = usage if isinstance(usage, dict) else {}
    prompt = int(counts.get("prompt_tokens") or 0)
    completion = int(counts.get("completion_tokens") or 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": int(counts.get("total_tokens") or prompt + completion),
    }


def _call(tool_call: dict[str, Any]) -> dict[str, str]:
    function = tool_call.get("function") or {}
    return {
        "call_id": tool_call.get("id") or f"call_{uuid.uuid4().hex}",
        "name": function.get("name") or "",
        "arguments": function.get("arguments") or "",
    }


def _merge_call(calls: dict[int, dict[str, str]], delta: dict[str, Any]) -> None:
    """Add a streamed tool-call delta to the calls being assembled (by index)."""
    index = delta.get("index", len(calls))
    call = calls.setdefault(index, {"call_id": "", "name": "", "arguments": ""})
    function = delta.get("function") or {}
    call["call_id"] = delta.get("id") or call["call_id"] or f"call_{uuid.uuid4().hex}"
    call["name"] += function.get("name") or ""
    call["arguments"] += function.get("arguments") or ""


def _call_item(call: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call['call_id']}",
        "status": "completed",
        **call,
    }
