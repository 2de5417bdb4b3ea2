"""Many LLM calls at bounded concurrency; each reply is cached as it finishes, failures isolated."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from ragbound.errors import InputError
from ragbound.llm.base import LLM, ChatMessage, GenerationParams, LLMResponse
from ragbound.llm.cache import CachedLLM, ResponseCache, acall
from ragbound.progress import progress_bar


class Request(BaseModel):
    """One call of a batch: the messages, parameters and the prompt they were rendered from."""

    model_config = ConfigDict(frozen=True)

    messages: list[ChatMessage]
    params: GenerationParams = Field(default_factory=GenerationParams)
    prompt_id: str | None = None
    prompt_version: int | None = None


@dataclass(frozen=True)
class Result:
    """The outcome of one request: ``response`` on success, else ``error``."""

    request: Request
    response: LLMResponse | None = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        """True when the call succeeded."""
        return self.error is None


async def _one(llm: LLM, request: Request, gate: asyncio.Semaphore) -> Result:
    async with gate:
        try:
            response = await acall(
                llm,
                request.messages,
                request.params,
                prompt_id=request.prompt_id,
                prompt_version=request.prompt_version,
            )
        except Exception as exc:  # one failing item must not abort the others
            return Result(request, error=exc)
    return Result(request, response=response)


async def arun_batch(
    llm: LLM,
    requests: Sequence[Request],
    *,
    concurrency: int = 4,
    progress: bool = False,
    cache: ResponseCache | None = None,
) -> list[Result]:
    """Run ``requests`` with at most ``concurrency`` calls in flight; results in input order.

    With a CachedLLM (or ``cache`` given), each reply is stored the moment it finishes, so a
    rerun after an interruption only calls the model for what is missing. An item that raises
    gets a Result with ``error`` set; the others go on.
    """
    if concurrency < 1:
        raise InputError(f"concurrency must be at least 1, got {concurrency}")
    if cache is not None and not isinstance(llm, CachedLLM):
        llm = CachedLLM(llm, cache)
    gate = asyncio.Semaphore(concurrency)
    with progress_bar(len(requests), f"LLM calls ({llm.model_id})", progress) as advance:

        async def tracked(request: Request) -> Result:
            result = await _one(llm, request, gate)
            advance(1)
            return result

        return list(await asyncio.gather(*(tracked(request) for request in requests)))


def run_batch(
    llm: LLM,
    requests: Sequence[Request],
    *,
    concurrency: int = 4,
    progress: bool = False,
    cache: ResponseCache | None = None,
) -> list[Result]:
    """Blocking :func:`arun_batch` (not callable from inside a running event loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise InputError("run_batch was called inside an event loop: use `await arun_batch(...)`")
    coroutine = arun_batch(llm, requests, concurrency=concurrency, progress=progress, cache=cache)
    return asyncio.run(coroutine)
