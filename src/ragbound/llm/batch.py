"""Many LLM calls at bounded concurrency; each reply is cached as it finishes, failures isolated."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ragbound.errors import InputError
from ragbound.llm.base import LLM, ChatMessage, GenerationParams, LLMResponse, parallel_limit
from ragbound.llm.cache import acall
from ragbound.llm.parse import Parsed, acomplete_parsed
from ragbound.llm.prompts import Prompt
from ragbound.progress import Advance, progress_bar

T = TypeVar("T")
Item = TypeVar("Item")
R = TypeVar("R")


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


def check_concurrency(concurrency: int) -> None:
    """Refuse fewer than one call in flight (InputError)."""
    if concurrency < 1:
        raise InputError(f"concurrency must be at least 1, got {concurrency}")


async def gather_bounded(
    llm: LLM,
    items: Sequence[Item],
    one: Callable[[Item], Awaitable[R]],
    *,
    concurrency: int,
    advance: Advance,
) -> list[R]:
    """``one(item)`` for every item with at most ``concurrency`` in flight (capped by the
    backend's ``max_parallel``), calling ``advance(1)`` as each finishes; results in input order."""
    check_concurrency(concurrency)
    gate = asyncio.Semaphore(parallel_limit(llm, concurrency))

    async def bounded(item: Item) -> R:
        async with gate:
            result = await one(item)
        advance(1)
        return result

    return list(await asyncio.gather(*(bounded(item) for item in items)))


async def arun_batch(
    llm: LLM,
    requests: Sequence[Request],
    *,
    concurrency: int = 4,
    progress: bool = False,
) -> list[Result]:
    """Run ``requests`` with at most ``concurrency`` calls in flight; results in input order.

    With a CachedLLM, each reply is stored the moment it finishes, so a rerun after an
    interruption only calls the model for what is missing. An item that raises gets a Result
    with ``error`` set; the others go on.
    """

    async def one(request: Request) -> Result:
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

    with progress_bar(len(requests), f"LLM calls ({llm.model_id})", progress) as advance:
        return await gather_bounded(llm, requests, one, concurrency=concurrency, advance=advance)


@dataclass(frozen=True)
class ParsedResult(Generic[T]):
    """The outcome of one parsed call: ``parsed`` on success, else ``error`` (a ParseError
    carrying the raw reply after the retries, or the call's own failure)."""

    parsed: Parsed[T] | None = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        """True when the reply parsed."""
        return self.error is None


async def arun_parsed(
    llm: LLM,
    prompt: Prompt,
    variables: Sequence[Mapping[str, object]],
    parser: Callable[[str], T],
    *,
    params: GenerationParams | None = None,
    retries: int = 2,
    concurrency: int = 4,
    progress: bool = False,
) -> list[ParsedResult[T]]:
    """Render ``prompt`` once per item of ``variables``, call and parse, retrying parse failures.

    Results come in input order; a failing item never stops the others. Use a CachedLLM so
    that a rerun after an interruption only calls the model for what is missing.
    """

    async def one(values: Mapping[str, object]) -> ParsedResult[T]:
        try:
            parsed = await acomplete_parsed(
                llm, prompt, values, parser, params=params, retries=retries
            )
        except Exception as exc:  # one failing item must not abort the others
            return ParsedResult(error=exc)
        return ParsedResult(parsed=parsed)

    with progress_bar(len(variables), f"{prompt.id} ({llm.model_id})", progress) as advance:
        return await gather_bounded(llm, variables, one, concurrency=concurrency, advance=advance)


def run_parsed(
    llm: LLM,
    prompt: Prompt,
    variables: Sequence[Mapping[str, object]],
    parser: Callable[[str], T],
    *,
    params: GenerationParams | None = None,
    retries: int = 2,
    concurrency: int = 4,
    progress: bool = False,
) -> list[ParsedResult[T]]:
    """Blocking :func:`arun_parsed` (not callable from inside a running event loop)."""
    return _run_blocking(
        "run_parsed",
        arun_parsed(
            llm,
            prompt,
            variables,
            parser,
            params=params,
            retries=retries,
            concurrency=concurrency,
            progress=progress,
        ),
    )


def _run_blocking(name: str, coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion; refuse inside a running loop (asyncio.run would fail)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    coroutine.close()
    raise InputError(f"{name} was called inside an event loop: use `await a{name}(...)`")


def run_batch(
    llm: LLM,
    requests: Sequence[Request],
    *,
    concurrency: int = 4,
    progress: bool = False,
) -> list[Result]:
    """Blocking :func:`arun_batch` (not callable from inside a running event loop)."""
    coroutine = arun_batch(llm, requests, concurrency=concurrency, progress=progress)
    return _run_blocking("run_batch", coroutine)
