"""A scripted test double for the LLM protocol (tests only, never a product default)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence

from ragbound.llm import ChatMessage, GenerationParams, LLMResponse

Reply = str | BaseException
Responder = Callable[[list[ChatMessage], GenerationParams], Reply]


class ScriptedLLM:
    """Returns scripted replies (or raises scripted errors) in order, then ``responder``'s.

    It records every call (``calls``), and for async calls the peak number in flight.
    """

    def __init__(
        self,
        script: Iterable[Reply] = (),
        *,
        responder: Responder | None = None,
        model_id: str = "fake:scripted",
        delay: float = 0.0,
    ) -> None:
        self.script = list(script)
        self.responder = responder
        self._model_id = model_id
        self.delay = delay
        self.calls: list[tuple[list[ChatMessage], GenerationParams]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def model_id(self) -> str:
        return self._model_id

    def _reply(self, messages: Sequence[ChatMessage], params: GenerationParams) -> LLMResponse:
        self.calls.append((list(messages), params))
        if self.script:
            reply = self.script.pop(0)
        elif self.responder is not None:
            reply = self.responder(list(messages), params)
        else:
            raise AssertionError("ScriptedLLM ran out of script")
        if isinstance(reply, BaseException):
            raise reply
        return LLMResponse(
            text=reply,
            model=self._model_id,
            prompt_tokens=sum(len(m.content.split()) for m in messages),
            completion_tokens=len(reply.split()),
            seconds=0.001,
        )

    def complete(
        self, messages: Sequence[ChatMessage], params: GenerationParams | None = None
    ) -> LLMResponse:
        return self._reply(messages, params or GenerationParams())

    async def acomplete(
        self, messages: Sequence[ChatMessage], params: GenerationParams | None = None
    ) -> LLMResponse:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            return self._reply(messages, params or GenerationParams())
        finally:
            self.in_flight -= 1


def user(text: str) -> list[ChatMessage]:
    """A one-message conversation."""
    return [ChatMessage(role="user", content=text)]


def echo(messages: list[ChatMessage], params: GenerationParams) -> str:
    """A responder that answers with the last message's content."""
    return f"answer: {messages[-1].content}"
