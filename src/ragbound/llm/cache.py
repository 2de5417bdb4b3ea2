"""On-disk, content-addressed response cache: a rerun is reproducible and makes no model call."""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragbound.artifacts import sha256_text, utc_now, write_json
from ragbound.embedders.packaged import cache_dir
from ragbound.llm.base import LLM, ChatMessage, GenerationParams, LLMResponse, default_params

CACHE_FORMAT = "ragbound-llm-response/1"


def default_cache_root() -> Path:
    """``cache_dir()/llm`` (``$RAGBOUND_CACHE/llm`` or ``~/.cache/ragbound/llm``)."""
    return cache_dir() / "llm"


def request_record(
    model_id: str,
    messages: Sequence[ChatMessage],
    params: GenerationParams,
    prompt_id: str | None,
    prompt_version: int | None,
) -> dict[str, Any]:
    """Everything that determines a reply: what the cache key hashes."""
    return {
        "model_id": model_id,
        "prompt_id": prompt_id,
        "prompt_version": prompt_version,
        "messages": [message.model_dump() for message in messages],
        "params": params.cache_fields(),
    }


def cache_key(record: dict[str, Any]) -> str:
    """Hex SHA-256 of the canonical JSON of a request record."""
    canonical = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return sha256_text(canonical)


class ResponseCache:
    """Replies stored as ``root/<key[:2]>/<key>.json`` with their provenance.

    ``root`` defaults to :func:`default_cache_root`. Entries are written atomically; a corrupt
    or unreadable entry counts as a miss and is overwritten by the next reply.
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_root()

    def path(self, key: str) -> Path:
        """The file of entry ``key``."""
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> LLMResponse | None:
        """The cached reply for ``key`` (marked ``cached=True``), or None on a miss."""
        try:
            entry = json.loads(self.path(key).read_text(encoding="utf-8"))
            if entry.get("format") != CACHE_FORMAT or entry.get("key") != key:
                return None
            response = LLMResponse.model_validate(entry["response"])
        except (OSError, ValueError, TypeError, KeyError, AttributeError, ValidationError):
            return None
        return response.model_copy(update={"cached": True})

    def put(self, key: str, record: dict[str, Any], response: LLMResponse) -> None:
        """Store ``response`` for ``key`` with the request and its provenance."""
        entry = {
            "format": CACHE_FORMAT,
            "key": key,
            "provenance": {
                "model_id": record["model_id"],
                "model": response.model,
                "prompt_id": record["prompt_id"],
                "prompt_version": record["prompt_version"],
                "created_at": response.created_at,
                "stored_at": utc_now(),
            },
            "request": record,
            "response": response.model_dump(exclude={"cached"}),
        }
        write_json(self.path(key), entry)

    def __len__(self) -> int:
        """Number of entries on disk."""
        return sum(1 for _ in self.root.glob("??/*.json")) if self.root.is_dir() else 0


class CachedLLM:
    """Wraps an LLM so every reply is looked up in, or stored into, a ResponseCache.

    A hit returns the stored reply with ``cached=True`` and makes no model call. Failures are
    never cached. A cache that cannot be written only warns: the reply is still returned.
    """

    def __init__(self, llm: LLM, cache: ResponseCache | None = None) -> None:
        self.llm = llm
        self.cache = cache if cache is not None else ResponseCache()

    @property
    def model_id(self) -> str:
        """The wrapped model's identity."""
        return self.llm.model_id

    @property
    def max_parallel(self) -> int | None:
        """The wrapped model's limit on useful parallel calls (None: no limit)."""
        return getattr(self.llm, "max_parallel", None)

    def _lookup(
        self,
        messages: Sequence[ChatMessage],
        params: GenerationParams,
        prompt_id: str | None,
        prompt_version: int | None,
    ) -> tuple[str, dict[str, Any], LLMResponse | None]:
        record = request_record(self.model_id, messages, params, prompt_id, prompt_version)
        key = cache_key(record)
        return key, record, self.cache.get(key)

    def _store(self, key: str, record: dict[str, Any], response: LLMResponse) -> LLMResponse:
        try:
            self.cache.put(key, record, response)
        except OSError as exc:
            warnings.warn(f"could not write LLM cache entry {key}: {exc}", stacklevel=3)
        return response

    def complete(
        self,
        messages: Sequence[ChatMessage],
        params: GenerationParams | None = None,
        *,
        prompt_id: str | None = None,
        prompt_version: int | None = None,
    ) -> LLMResponse:
        """The cached reply, or the wrapped model's reply (then stored)."""
        params = default_params(params)
        key, record, hit = self._lookup(messages, params, prompt_id, prompt_version)
        if hit is not None:
            return hit
        return self._store(key, record, self.llm.complete(messages, params))

    async def acomplete(
        self,
        messages: Sequence[ChatMessage],
        params: GenerationParams | None = None,
        *,
        prompt_id: str | None = None,
        prompt_version: int | None = None,
    ) -> LLMResponse:
        """Async :meth:`complete`; the reply is stored as soon as it arrives."""
        params = default_params(params)
        key, record, hit = self._lookup(messages, params, prompt_id, prompt_version)
        if hit is not None:
            return hit
        return self._store(key, record, await self.llm.acomplete(messages, params))


def call(
    llm: LLM,
    messages: Sequence[ChatMessage],
    params: GenerationParams | None = None,
    *,
    prompt_id: str | None = None,
    prompt_version: int | None = None,
) -> LLMResponse:
    """``llm.complete``, passing the prompt id/version on when ``llm`` is a CachedLLM."""
    if isinstance(llm, CachedLLM):
        return llm.complete(messages, params, prompt_id=prompt_id, prompt_version=prompt_version)
    return llm.complete(messages, params)


async def acall(
    llm: LLM,
    messages: Sequence[ChatMessage],
    params: GenerationParams | None = None,
    *,
    prompt_id: str | None = None,
    prompt_version: int | None = None,
) -> LLMResponse:
    """``llm.acomplete``, passing the prompt id/version on when ``llm`` is a CachedLLM."""
    if isinstance(llm, CachedLLM):
        return await llm.acomplete(
            messages, params, prompt_id=prompt_id, prompt_version=prompt_version
        )
    return await llm.acomplete(messages, params)
