"""LangChain v1 agent middleware: the Gate decides each turn before the agent runs.

:class:`GateMiddleware` decides the thread at its last human message. On ``reject`` /
``abstain`` the turn ends with an ``AIMessage`` (refusal or abstention); on ``answer`` the
agent runs, its model calls without the turns found forbidden (their ids in the state under
``ragbound_withheld``), with the Gate's chunks in the system prompt given a
``context_template``. Every decision is in the state under ``ragbound_decision``.

Example:
    >>> gate = GateMiddleware(Gate.load("kb/"))  # doctest: +SKIP
    >>> agent = create_agent(model, tools, middleware=[gate])  # doctest: +SKIP
    >>> question = {"role": "user", "content": "Who won the 1998 world cup?"}
    >>> result = agent.invoke({"messages": [question]})  # doctest: +SKIP
    >>> result["ragbound_decision"]["action"], result["messages"][-1].text  # doctest: +SKIP
    ('abstain', "I don't know: ...")
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NotRequired

from ragbound.adapters._common import (
    METADATA_KEY,
    decision_metadata,
    missing_extra,
    reply_texts,
)
from ragbound.adapters.langchain import thread_conversation, thread_upstream
from ragbound.gate import (
    DEFAULT_ABSTENTION,
    DEFAULT_CONTEXT_TEMPLATE,
    DEFAULT_REFUSAL,
    DEFAULT_UNANSWERABLE,
    Decision,
    Gate,
)

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ModelRequest,
        ModelResponse,
        hook_config,
    )
    from langchain_core.messages import AIMessage, AnyMessage, SystemMessage
    from langchain_core.runnables.config import run_in_executor
    from langgraph.runtime import Runtime
except ImportError as error:
    raise missing_extra("langchain (v1, with agents.middleware)", "langchain", error) from error

__all__ = [
    "DEFAULT_ABSTENTION",
    "DEFAULT_CONTEXT_TEMPLATE",
    "DEFAULT_REFUSAL",
    "DEFAULT_UNANSWERABLE",
    "GateMiddleware",
    "GateState",
    "thread_conversation",
]

DECISION_KEY = "ragbound_decision"
WITHHELD_KEY = "ragbound_withheld"


class GateState(AgentState):
    """The agent state with the latest turn's decision (``Decision`` as JSON) and the ids of
    the thread's messages its model calls do not get (the turns found forbidden and their
    replies; empty unless ``answer``)."""

    ragbound_decision: NotRequired[dict[str, Any]]
    ragbound_withheld: NotRequired[list[str]]


class GateMiddleware(AgentMiddleware[GateState]):
    """Ends the agent's turn on ``reject`` / ``abstain``; records every decision in the state.

    ``refusal`` answers a ``reject``, ``abstention`` an ``abstain`` out of knowledge and
    ``unanswerable`` one whose retrieved chunks do not hold the answer (the answerability
    test, when the calibration has it: ``decision.cause``). ``context_template``
    (a string with a ``{context}`` field, e.g. :data:`DEFAULT_CONTEXT_TEMPLATE`; None: off)
    adds the Gate's chunks to the system prompt on ``answer``.
    """

    state_schema = GateState

    def __init__(
        self,
        gate: Gate,
        *,
        refusal: str = DEFAULT_REFUSAL,
        abstention: str = DEFAULT_ABSTENTION,
        unanswerable: str = DEFAULT_UNANSWERABLE,
        context_template: str | None = None,
    ):
        super().__init__()
        self.gate = gate
        self.replies = reply_texts(refusal, abstention, unanswerable)
        self.context_template = context_template

    @hook_config(can_jump_to=["end"])
    def before_agent(self, state: GateState, runtime: Runtime) -> dict[str, Any] | None:
        chat = thread_conversation(state["messages"])
        return None if chat is None else self._verdict(self.gate.decide(chat), state)

    @hook_config(can_jump_to=["end"])
    async def abefore_agent(self, state: GateState, runtime: Runtime) -> dict[str, Any] | None:
        chat = thread_conversation(state["messages"])
        if chat is None:
            return None
        return self._verdict(await run_in_executor(None, self.gate.decide, chat), state)

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(self._upstream(request))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        return await handler(self._upstream(request))

    def _verdict(self, decision: Decision, state: GateState) -> dict[str, Any]:
        update: dict[str, Any] = {DECISION_KEY: decision.model_dump(mode="json")}
        if decision.action == "answer":
            return {**update, WITHHELD_KEY: withheld_ids(state["messages"], decision)}
        reply = AIMessage(
            content=self.replies[decision.cause],
            response_metadata={METADATA_KEY: decision_metadata(decision)},
        )
        return {**update, "messages": [reply], "jump_to": "end"}

    def _upstream(self, request: ModelRequest) -> ModelRequest:
        """The model call as it goes: the thread without the messages withheld, the Gate's
        chunks in the system prompt (with a ``context_template``)."""
        withheld = set(request.state.get(WITHHELD_KEY) or ())
        if withheld:
            kept = [m for m in request.messages if m.id not in withheld]
            request = request.override(messages=kept)
        return self._with_context(request)

    def _with_context(self, request: ModelRequest) -> ModelRequest:
        decision = request.state.get(DECISION_KEY)
        if self.context_template is None or not decision or decision["action"] != "answer":
            return request
        context = "\n\n".join(chunk["text"] for chunk in decision["neighbours"])
        addition = self.context_template.format(context=context)
        prompt = request.system_prompt
        text = addition if not prompt else f"{prompt}\n\n{addition}"
        return request.override(system_message=SystemMessage(content=text))


def withheld_ids(messages: list[AnyMessage], decision: Decision) -> list[str]:
    """The ids of the thread's messages (the state's, as decided) the model must not get on
    ``answer``: those :func:`~ragbound.adapters.langchain.thread_upstream` leaves out (the
    agent's state gives every message an id)."""
    kept = set(thread_upstream(messages, decision))
    return [m.id for row, m in enumerate(messages) if row not in kept and m.id is not None]
