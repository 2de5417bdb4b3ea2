"""Dense embeddings from an OpenAI-compatible ``/embeddings`` endpoint (OpenAI,
text-embeddings-inference, vLLM, Ollama, infinity), over httpx.

The spec ``openai:MODEL`` names the model the server serves; where the server is comes from
the environment, never from the spec, so a knowledge base's manifest holds no URL::

    RAGBOUND_EMBED_BASE_URL (else OPENAI_BASE_URL)   e.g. http://127.0.0.1:7997/v1
    RAGBOUND_EMBED_API_KEY  (else OPENAI_API_KEY)    optional: local servers need none
    RAGBOUND_EMBED_BATCH_SIZE                        texts per request (default 32)
    RAGBOUND_EMBED_TIMEOUT                           seconds per request (default 60)
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from ragbound.embedders.base import ENDPOINT_PREFIX, EmbedderInfo
from ragbound.errors import InputError
from ragbound.http_retry import backoff_delay, env_setting, parse_retry_after
from ragbound.progress import progress_bar

BASE_URL_ENV = ("RAGBOUND_EMBED_BASE_URL", "OPENAI_BASE_URL")
API_KEY_ENV = ("RAGBOUND_EMBED_API_KEY", "OPENAI_API_KEY")
BATCH_SIZE_ENV = "RAGBOUND_EMBED_BATCH_SIZE"
TIMEOUT_ENV = "RAGBOUND_EMBED_TIMEOUT"
# text-embeddings-inference refuses more than 32 inputs per request by default
DEFAULT_BATCH_SIZE = 32
DEFAULT_TIMEOUT_S = 60.0
_PROBE_TEXT = "ragbound dimension probe"
_SNIPPET = 200  # characters of a server's error body quoted in an error


class EndpointError(InputError):
    """The embedding server refused a request, could not be reached or answered malformed."""


class _Retryable(Exception):
    """A transient failure (429, 5xx, connection, timeout); ``message`` if no retry is left."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


def _positive_env(name: str, default: float) -> float:
    """``$name`` as a positive number, else ``default``; anything else is an InputError."""
    found = env_setting([name])
    if found is None:
        return default
    try:
        value = float(found[1])
    except ValueError:
        value = 0.0
    if not math.isfinite(value) or value <= 0:  # nan and inf too: both reach int() or httpx
        raise InputError(f"${name} must be a positive number, got {found[1]!r}")
    return value


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "…"


class OpenAIEmbedder:
    """A model behind an OpenAI-compatible ``POST {base_url}/embeddings``.

    Rows come back as float32 unit vectors (inner product = cosine similarity, higher =
    closer), in input order. Connection errors, timeouts, HTTP 429 and 5xx are retried up to
    ``max_retries`` times (:func:`~ragbound.http_retry.backoff_delay`); ``timeout`` is seconds
    per request. The recorded revision is ``openai:MODEL:DIMENSION``: what is served, not where
    (moving the server does not invalidate a knowledge base).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        batch_size: int | None = None,
        timeout: float | None = None,
        max_retries: int = 4,
        backoff: float = 0.5,
    ) -> None:
        if not model.strip():
            raise InputError("embedder 'openai:MODEL' needs a model name after 'openai:'")
        self.model = model
        self.url_source, base = self._base_url(base_url)
        self.url = f"{base.rstrip('/')}/embeddings"
        key = api_key or (env_setting(API_KEY_ENV) or ("", ""))[1]
        if batch_size is None:
            batch_size = int(_positive_env(BATCH_SIZE_ENV, DEFAULT_BATCH_SIZE))
        if timeout is None:
            timeout = _positive_env(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)
        if batch_size < 1 or timeout <= 0 or max_retries < 0 or backoff < 0:
            raise InputError(
                "batch_size must be >= 1, timeout > 0, max_retries >= 0 and backoff >= 0"
            )
        self.batch_size = batch_size
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(headers=headers, timeout=self.timeout)
        self._dimension: int | None = None
        self._info: EmbedderInfo | None = None

    @staticmethod
    def _base_url(given: str | None) -> tuple[str, str]:
        """(where the URL came from, the URL): the argument, else the environment."""
        if given:
            return "base_url", given
        found = env_setting(BASE_URL_ENV)
        if found is None:
            raise InputError(
                "an openai:MODEL embedder needs its server's base URL: set "
                f"{' or '.join(BASE_URL_ENV)} (e.g. http://127.0.0.1:7997/v1)"
            )
        return found

    @property
    def info(self) -> EmbedderInfo:
        if self._info is None:
            dimension = self._dimension or self._request([_PROBE_TEXT]).shape[1]
            self._info = EmbedderInfo(
                name=self.model,
                revision=f"{ENDPOINT_PREFIX}{self.model}:{dimension}",
                dimension=dimension,
                similarity="cosine",
                kind="dense",
            )
        return self._info

    def encode(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> np.ndarray:
        """Embed texts, ``min(batch_size, self.batch_size)`` per request; (n, dimension)."""
        size = max(1, min(batch_size, self.batch_size))
        parts = []
        with progress_bar(len(texts), "embedding", progress) as advance:
            for start in range(0, len(texts), size):
                batch = list(texts[start : start + size])
                parts.append(self._request(batch))
                advance(len(batch))
        if not parts:
            return np.empty((0, self.info.dimension), dtype=np.float32)
        return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)

    def encode_one(self, text: str) -> np.ndarray:
        """Embed one query on the request path; shape (1, dimension)."""
        return self._request([text])

    def close(self) -> None:
        """Close the pooled connections."""
        self._client.close()

    # ----------------------------------------------------------------- one request
    def _request(self, texts: list[str]) -> np.ndarray:
        """One batch's unit vectors, retrying transient failures."""
        payload = {"model": self.model, "input": texts, "encoding_format": "float"}
        for attempt in range(self.max_retries + 1):
            try:
                return self._vectors(self._post(payload), len(texts))
            except _Retryable as exc:
                if attempt == self.max_retries:
                    raise EndpointError(exc.message) from None
                time.sleep(backoff_delay(attempt, self.backoff, exc.retry_after))
        raise AssertionError("unreachable")  # pragma: no cover

    def _post(self, payload: dict[str, Any]) -> Any:
        try:
            reply = self._client.post(self.url, json=payload)
        except httpx.TimeoutException:
            raise _Retryable(
                f"the embedding server at {self.url} did not answer within {self.timeout:g} s "
                f"({self._attempts()}); raise ${TIMEOUT_ENV} or check the server"
            ) from None
        except httpx.HTTPError as exc:
            raise _Retryable(
                f"cannot reach the embedding server at {self.url} "
                f"({exc or type(exc).__name__}, {self._attempts()}); is it running? "
                f"(the URL comes from {self._url_origin()})"
            ) from None
        return self._checked(reply)

    def _attempts(self) -> str:
        count = self.max_retries + 1
        return f"{count} attempt{'s' if count > 1 else ''}"

    def _url_origin(self) -> str:
        return "the base_url argument" if self.url_source == "base_url" else f"${self.url_source}"

    def _checked(self, reply: httpx.Response) -> Any:
        """The decoded JSON of a 2xx reply; raise on anything else."""
        status, body = reply.status_code, _snippet(reply.text)
        if status == 429 or status >= 500:
            message = f"HTTP {status} from {self.url} ({self._attempts()}): {body!r}"
            raise _Retryable(message, parse_retry_after(reply.headers.get("Retry-After")))
        if status in (401, 403):
            raise EndpointError(
                f"{self.url} refused the API key (HTTP {status}): {body!r}; set "
                f"{' or '.join(API_KEY_ENV)}"
            )
        if status in (400, 404, 422):
            raise EndpointError(
                f"{self.url} refused model {self.model!r} (HTTP {status}): {body!r}; is "
                "that the name the server serves its model under (GET /models)?"
            )
        if not 200 <= status < 300:
            raise EndpointError(f"HTTP {status} from {self.url}: {body!r}")
        try:
            return reply.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise EndpointError(f"{self.url} returned a body that is not JSON: {body!r}") from None

    def _vectors(self, body: Any, count: int) -> np.ndarray:
        """The reply's vectors in input order, unit length, checked against ``count``
        texts and the dimension seen first."""
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise EndpointError(f"the reply of {self.url} has no 'data' list")
        if len(data) != count:
            raise EndpointError(
                f"{self.url} returned {len(data)} vectors for {count} texts (model {self.model!r})"
            )
        vectors = self._matrix(self._in_order(data))
        self._check_dimension(vectors.shape[1])
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        # a zero vector stays zero (similarity 0 to everything) rather than becoming NaN
        return np.ascontiguousarray(vectors / np.maximum(norms, 1e-12), dtype=np.float32)

    def _in_order(self, data: list[Any]) -> list[Any]:
        """The embeddings sorted by the reply's ``index`` field (OpenAI does not promise
        input order)."""
        try:
            indexed = sorted((int(item["index"]), item["embedding"]) for item in data)
        except (KeyError, TypeError, ValueError):
            raise EndpointError(
                f"the reply of {self.url} has items without an integer 'index' and an 'embedding'"
            ) from None
        if [i for i, _ in indexed] != list(range(len(data))):
            raise EndpointError(f"the reply of {self.url} does not index its vectors 0..n-1")
        return [embedding for _, embedding in indexed]

    def _matrix(self, embeddings: list[Any]) -> np.ndarray:
        try:
            vectors = np.asarray(embeddings, dtype=np.float64)
        except (TypeError, ValueError):
            raise EndpointError(
                f"the vectors from {self.url} are not lists of numbers of one length "
                "(expected encoding_format=float)"
            ) from None
        if vectors.ndim != 2 or vectors.shape[1] == 0 or not np.isfinite(vectors).all():
            raise EndpointError(f"the vectors from {self.url} are not finite numbers of one length")
        return vectors

    def _check_dimension(self, dimension: int) -> None:
        """Remember the first dimension; refuse a reply of another (a swapped model)."""
        if self._dimension is None:
            self._dimension = dimension
        elif dimension != self._dimension:
            raise EndpointError(
                f"{self.url} returned {dimension}-dimensional vectors for model "
                f"{self.model!r}, which gave {self._dimension} before: the server changed "
                "the model it serves under that name"
            )
