"""The LLM protocol every backend implements, its message/parameter/response types and errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from ragbound.artifacts import utc_now
from ragbound.errors import InputError, RagboundError

Role = Literal["system", "user", "assistant"]


class ChatMessage(BaseModel):
    """One chat turn: who speaks (``role``) and what they say (``content``)."""

    model_config = ConfigDict(frozen=True)

    role: Role
    content: str


class GenerationParams(BaseModel):
    """Sampling parameters passed through to the backend unchanged.

    ``temperature`` 0 is greedy decoding; ``max_tokens`` caps the completion length in tokens;
    ``seed`` fixes the sampler (``None``: the backend picks one); ``top_p`` is nucleus sampling
    mass in (0, 1]; ``stop`` lists strings that end the completion; ``top_logprobs`` (1-20)
    asks for the first generated token's most likely alternatives with their log-probabilities
    (:attr:`LLMResponse.top_logprobs`: a judge's graded score; None: not asked).
    """

    model_config = ConfigDict(frozen=True)

    temperature: float = Field(default=0.0, ge=0.0)
    max_tokens: int = Field(default=256, ge=1)
    seed: int | None = 0
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: list[str] | None = None
    top_logprobs: int | None = Field(default=None, ge=1, le=20)

    def cache_fields(self) -> dict:
        """The fields a response cache keys on: the ones set away from None by the newer
        options too, so a key made before ``top_logprobs`` existed is still the same."""
        fields = self.model_dump()
        if fields["top_logprobs"] is None:
            del fields["top_logprobs"]
        return fields


class LLMResponse(BaseModel):
    """What a backend returned for one call.

    ``model`` is the name the backend reports; ``prompt_tokens`` and ``completion_tokens`` are
    token counts when the backend reports them; ``seconds`` is the wall-clock time of the call
    (retries included); ``cached`` is True when the reply came from the response cache, in which
    case ``seconds`` and ``created_at`` (ISO 8601 UTC) describe the original call.
    """

    text: str
    model: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float = Field(ge=0.0)
    cached: bool = False
    created_at: str = Field(default_factory=utc_now)
    top_logprobs: dict[str, float] | None = Field(
        default=None,
        description="the first generated token's likeliest alternatives (token text -> natural "
        "log-probability), when GenerationParams.top_logprobs asked for them",
    )


@runtime_checkable
class LLM(Protocol):
    """A chat model. ``model_id`` identifies it in cache keys and provenance records."""

    @property
    def model_id(self) -> str:
        """Stable identity of the model, e.g. ``openai:gpt-4o-mini`` or ``local:<file>``."""
        ...

    def complete(
        self, messages: Sequence[ChatMessage], params: GenerationParams | None = None
    ) -> LLMResponse:
        """Generate one reply to ``messages`` (blocking)."""
        ...

    async def acomplete(
        self, messages: Sequence[ChatMessage], params: GenerationParams | None = None
    ) -> LLMResponse:
        """Generate one reply to ``messages`` without blocking the event loop."""
        ...


class LLMError(RagboundError):
    """A model could not be configured or called."""


class LLMUnavailableError(LLMError):
    """The model cannot be reached: endpoint unreachable, package or model file missing."""


class LLMTimeoutError(LLMError):
    """The model did not answer within the timeout (after retries)."""


class LLMResponseError(LLMError):
    """The server answered with a bad HTTP status or a reply that is not a chat completion."""


class PromptError(InputError):
    """A prompt file is malformed, or a prompt was rendered with wrong variables."""


RAW_SNIPPET = 300  # characters of raw model output shown in a ParseError message


class ParseError(LLMError):
    """Model output could not be parsed. ``raw`` keeps the full output for the report."""

    def __init__(self, message: str, raw: str) -> None:
        super().__init__(message, raw)  # both in args, so the error pickles
        self.message = message
        self.raw = raw

    def __str__(self) -> str:
        return f"{self.message}; raw output: {snippet(self.raw, RAW_SNIPPET)!r}"


def snippet(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters, with an ellipsis when cut."""
    return text if len(text) <= limit else text[:limit] + "…"


def parallel_limit(llm: object, wanted: int) -> int:
    """``wanted`` capped by the backend's ``max_parallel`` (calls it can usefully run at once).

    In-process llama.cpp runs one call at a time; queueing more threads on it only slows the
    one that runs, so batches against it go one by one.
    """
    limit = getattr(llm, "max_parallel", None)
    return wanted if limit is None else max(1, min(wanted, int(limit)))


def default_params(params: GenerationParams | None) -> GenerationParams:
    """``params`` or the default parameters."""
    return params if params is not None else GenerationParams()
