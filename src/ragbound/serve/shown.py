"""What a gateway reply shows of its decision: a summary by default, the whole on an admin's ask.

A gateway answers read tokens, often an application's end users, so its replies keep the
retrieved chunks' text and the tripwires' text back: the ``ragbound`` field holds a
:class:`DecisionSummary` by ids. ``X-Ragbound-Decision: full`` (:data:`DECISION_HEADER`) with an
admin token shows the whole :class:`~ragbound.gate.Decision`; with a read token it is refused
(403), never a silent summary. docs/service.md, "What a reply shows", says more.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ragbound.conversations.turns import ConversationRead
from ragbound.errors import InputError
from ragbound.gate import Action, Cause, Decision

DECISION_HEADER = "X-Ragbound-Decision"
"""The request header asking a gateway reply for the whole decision (``full``, admin token)
or the summary (``summary``, the default)."""
SHOWN = ("summary", "full")


class DecisionSummary(BaseModel):
    """A gateway reply's decision: what was done and why, by ids; no chunk or tripwire text."""

    shown: Literal["summary"] = Field(
        "summary", description="the decision's summary (full: the whole, an admin's ask)"
    )
    action: Action
    cause: Cause = Field(description=Decision.model_fields["cause"].description)
    p_value: float = Field(description="the boundary test's p-value (low = out of knowledge)")
    alpha: float = Field(description="the level the boundary test ran at")
    answerability_p_value: float | None = Field(
        None, description="the answerability test's p-value, where it ran"
    )
    chunk_ids: list[str] = Field(
        description="the retrieved chunks, nearest first (the context sent upstream on answer)"
    )
    trigger_ids: list[str] = Field(
        description="the tripwires that made the request forbidden (empty unless reject)"
    )
    calibration_id: str
    tripwire_set: str | None = Field(description="hash of the tripwire set used (None: none)")
    conversation: ConversationRead | None = Field(
        None, description="where the decided turn sits in the conversation (no text)"
    )


def fired_ids(decision: Decision) -> list[str]:
    """The ids of the tripwires that made ``decision`` forbidden (none when it is not)."""
    tripwires = decision.tripwires
    if tripwires is None or not tripwires.forbidden:
        return []
    return [trigger.id for trigger in tripwires.triggers]


def summary(decision: Decision) -> DecisionSummary:
    """The decision as a gateway reply shows it by default."""
    answerability = decision.answerability
    return DecisionSummary(
        action=decision.action,
        cause=decision.cause,
        p_value=decision.test.p_value,
        alpha=decision.test.alpha,
        answerability_p_value=None if answerability is None else answerability.p_value,
        chunk_ids=[chunk.chunk_id for chunk in decision.neighbours],
        trigger_ids=fired_ids(decision),
        calibration_id=decision.calibration_id,
        tripwire_set=decision.tripwire_set,
        conversation=decision.conversation,
    )


def shown(decision: Decision, full: bool) -> dict[str, Any]:
    """The reply's ``ragbound`` field: the whole decision (``full``, marked ``shown: full``)
    or its summary."""
    if full:
        return {"shown": "full", **decision.model_dump(mode="json")}
    return summary(decision).model_dump(mode="json")


def asks_full(value: str | None) -> bool:
    """Whether the request's :data:`DECISION_HEADER` (None: absent) asks for the whole
    decision; InputError (422) naming the header for a value other than summary or full."""
    if value is None:
        return False
    asked = value.strip().lower()
    if asked not in SHOWN:
        raise InputError(f"{DECISION_HEADER} must be summary or full, got {value!r}")
    return asked == "full"
