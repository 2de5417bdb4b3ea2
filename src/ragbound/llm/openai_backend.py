"""Any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp server, hosted APIs) over httpx."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Sequence
from typing import Any

import httpx

from ragbound.http_retry import (
    MAX_RETRY_AFTER,
    backoff_delay,
    env_setting,
    parse_retry_after,
)
from ragbound.llm.base import (
    ChatMessage,
    GenerationParams,
    LLMError,
    LLMResponse,
    LLMResponseError,
    LLMTimeoutError,
    LLMUnavailableError,
    default_params,
    snippet,
)

BASE_URL_ENV = ("RAGBOUND_LLM_BASE_URL", "OPENAI_BASE_URL")
MODEL_ENV = ("RAGBOUND_LLM_MODEL",)
API_KEY_ENV = ("RAGBOUND_LLM_API_KEY", "OPENAI_API_KEY")
__all__ = ["MAX_RETRY_AFTER", "OpenAIChat", "parse_retry_after"]


class _Retryable(Exception):
    """A transient failure: ``error`` is raised if no retry is left."""

    def __init__(self, error: LLMError, retry_after: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after


def _setting(value: str | None, env: Sequence[str], option: str, required: bool) -> str | None:
    """``value`` or the first set environment variable; a missing required one is an LLMError."""
    if value:
        return value
    found = env_setting(env)
    if found is not None:
        return found[1]
    if required:
        raise LLMError(
            f"the openai backend needs {option}: pass {option}=... or set {' or '.join(env)}"
        )
    return None


class OpenAIChat:
    """Chat completions from an OpenAI-compatible server.

    ``base_url`` (e.g. ``http://127.0.0.1:8080/v1``), ``model`` and ``api_key`` fall back to the
    environment (``RAGBOUND_LLM_BASE_URL``/``OPENAI_BASE_URL``, ``RAGBOUND_LLM_MODEL``,
    ``RAGBOUND_LLM_API_KEY``/``OPENAI_API_KEY``). ``timeout`` is seconds per HTTP request.
    Connection errors, timeouts, HTTP 429 and 5xx are retried up to ``max_retries`` times,
    waiting ``backoff * 2**attempt`` seconds plus jitter (or the server's ``Retry-After``).
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
    ) -> None:
        url = _setting(base_url, BASE_URL_ENV, "base_url", required=True)
        self.base_url = str(url).rstrip("/")
        self.model = str(_setting(model, MODEL_ENV, "model", required=True))
        self.api_key = _setting(api_key, API_KEY_ENV, "api_key", required=False)
        if timeout <= 0 or max_retries < 0 or backoff < 0:
            raise LLMError("timeout must be > 0, max_retries >= 0 and backoff >= 0")
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self._client: httpx.Client | None = None

    @property
    def model_id(self) -> str:
        """``openai:<model>``: the identity used in cache keys and provenance."""
        return f"openai:{self.model}"

    @property
    def url(self) -> str:
        """The chat completions endpoint."""
        return f"{self.base_url}/chat/completions"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _payload(self, messages: Sequence[ChatMessage], params: GenerationParams) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [message.model_dump() for message in messages],
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
            "top_p": params.top_p,
        }
        if params.seed is not None:
            payload["seed"] = params.seed
        if params.stop:
            payload["stop"] = params.stop
        if params.top_logprobs is not None:
            payload["logprobs"] = True
            payload["top_logprobs"] = params.top_logprobs
        return payload

    def complete(
        self, messages: Sequence[ChatMessage], params: GenerationParams | None = None
    ) -> LLMResponse:
        """POST the chat request, retrying transient failures; blocking."""
        payload = self._payload(messages, default_params(params))
        start = time.perf_counter()
        for attempt in range(self.max_retries + 1):
            try:
                body = self._send(payload)
                return self._response(body, time.perf_counter() - start)
            except _Retryable as exc:
                if attempt == self.max_retries:
                    raise exc.error from exc
                time.sleep(backoff_delay(attempt, self.backoff, exc.retry_after))
        raise AssertionError("unreachable")  # pragma: no cover

    async def acomplete(
        self, messages: Sequence[ChatMessage], params: GenerationParams | None = None
    ) -> LLMResponse:
        """POST the chat request, retrying transient failures; without blocking the loop."""
        payload = self._payload(messages, default_params(params))
        start = time.perf_counter()
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            for attempt in range(self.max_retries + 1):
                try:
                    body = await self._asend(client, payload)
                    return self._response(body, time.perf_counter() - start)
                except _Retryable as exc:
                    if attempt == self.max_retries:
                        raise exc.error from exc
                    await asyncio.sleep(backoff_delay(attempt, self.backoff, exc.retry_after))
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, payload: dict[str, Any]) -> Any:
        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout)
        try:
            reply = self._client.post(self.url, json=payload, headers=self._headers())
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc
        return self._check(reply)

    async def _asend(self, client: httpx.AsyncClient, payload: dict[str, Any]) -> Any:
        try:
            reply = await client.post(self.url, json=payload, headers=self._headers())
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc
        return self._check(reply)

    def _attempts(self) -> str:
        count = self.max_retries + 1
        return f"{count} attempt{'s' if count > 1 else ''}"

    def _transport_error(self, exc: httpx.HTTPError) -> _Retryable:
        attempts = self._attempts()
        if isinstance(exc, httpx.TimeoutException):
            error: LLMError = LLMTimeoutError(
                f"no answer from {self.url} within {self.timeout:g} s "
                f"({attempts}): {type(exc).__name__}"
            )
        else:
            reason = str(exc) or type(exc).__name__
            error = LLMUnavailableError(f"cannot reach {self.url}: {reason} ({attempts})")
        return _Retryable(error)

    def _check(self, reply: httpx.Response) -> Any:
        """The decoded JSON body of a 2xx reply; raise on a bad status or body."""
        status = reply.status_code
        if status == 429 or status >= 500:
            error = LLMResponseError(
                f"HTTP {status} from {self.url} after {self._attempts()}: {snippet(reply.text)!r}"
            )
            raise _Retryable(error, parse_retry_after(reply.headers.get("Retry-After")))
        if status >= 400 or status < 200:
            raise LLMResponseError(f"HTTP {status} from {self.url}: {snippet(reply.text)!r}")
        try:
            return reply.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise LLMResponseError(
                f"{self.url} returned a body that is not JSON: {snippet(reply.text)!r}"
            ) from exc

    def _response(self, body: Any, seconds: float) -> LLMResponse:
        """Turn a chat completion body into an LLMResponse."""
        try:
            text = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise self._malformed(body, "has no choices[0].message.content") from exc
        if not isinstance(text, str):
            raise self._malformed(body, "has a message content that is not a string")
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        return LLMResponse(
            text=text,
            model=str(body.get("model") or self.model),
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            seconds=seconds,
            top_logprobs=first_token_logprobs(body["choices"][0]),
        )

    def _malformed(self, body: Any, what: str) -> LLMResponseError:
        shown = snippet(json.dumps(body, ensure_ascii=False))
        return LLMResponseError(f"the reply of {self.url} {what}: {shown}")

    def close(self) -> None:
        """Close the pooled sync connection."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> OpenAIChat:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def first_token_logprobs(choice: Any) -> dict[str, float] | None:
    """The first generated token's alternatives of a chat completion choice
    (``logprobs.content[0].top_logprobs``: token -> log-probability); None when the server
    sent none (it was not asked, or does not support them). A token listed twice keeps its
    likelier entry."""
    try:
        alternatives = choice["logprobs"]["content"][0]["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        return None
    found: dict[str, float] = {}
    for entry in alternatives if isinstance(alternatives, list) else []:
        token, logprob = (
            (entry.get("token"), entry.get("logprob")) if isinstance(entry, dict) else (None, None)
        )
        if isinstance(token, str) and isinstance(logprob, (int, float)) and math.isfinite(logprob):
            found[token] = max(float(logprob), found.get(token, -math.inf))
    return found or None
