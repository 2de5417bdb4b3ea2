"""Request and response bodies of the HTTP API (the decision itself is ``gate.Decision``)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from ragbound.conversations.model import Role
from ragbound.detect.calibration import APPROXIMATE, NullQuestions
from ragbound.detect.canary import CanaryCheck
from ragbound.gate import Decision
from ragbound.tripwires import Tripwire, TripwireChange
from ragbound.tripwires.models import Severity


def _unicode(value: str) -> str:
    # JSON can carry a lone surrogate ("\ud800") that no tokenizer or UTF-8 file accepts
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be Unicode text (it holds a lone surrogate)") from None
    return value


def _not_blank(value: str) -> str:
    # refused here (422) rather than by the stored Tripwire, which strips the same way
    if not value.strip():
        raise ValueError("must not be blank")
    return value


Text = Annotated[str, AfterValidator(_unicode)]
"""A string of a request: Unicode that UTF-8 can encode."""
NonBlankText = Annotated[Text, AfterValidator(_not_blank)]
"""As :data:`Text`, with at least one character that is not white space."""


MAX_ID_CHARS = 256
"""Longest conversation id a request may send (it is kept in every line of the query log)."""
CHAT = [
    {"role": "system", "content": "You answer questions about bees."},
    {"role": "user", "content": "What do bees make?"},
    {"role": "assistant", "content": "Honey, from the nectar of flowers."},
    {"role": "user", "content": [{"type": "text", "text": "How?"}]},
]
"""The conversation of the request examples: a follow-up, decided given the turn before it."""


class MessagePart(BaseModel):
    """One part of a message's content: the ``text`` of ``text`` parts is read, other parts
    (images, audio, files) are accepted and not read."""

    model_config = ConfigDict(extra="allow")
    type: Text
    text: Text | None = None


class Message(BaseModel):
    """One OpenAI-style chat message; fields other than ``role`` and ``content`` (``name``,
    ``tool_calls``, ...) are accepted and not read."""

    model_config = ConfigDict(extra="allow")
    role: Role
    content: Text | list[MessagePart] | None = None


ConversationId = Annotated[Text, Field(max_length=MAX_ID_CHARS)]


class RequestBody(BaseModel):
    """A body of the service's own routes: a field it does not know is refused (422 naming
    it), never silently ignored (``k`` or ``alpha`` would look honoured). The messages inside
    stay OpenAI's, open to their many fields."""

    model_config = ConfigDict(extra="forbid")


def _exactly_one(body: BaseModel, one: str, other: str) -> None:
    """ValueError unless ``body`` was sent with exactly one of the fields ``one`` and
    ``other``, not null (a field sent as null counts as sent, as in the schema's ``oneOf``;
    the schema does not document null, which a model's default of None would)."""
    sent = [name for name in (one, other) if name in body.model_fields_set]
    if len(sent) != 1:
        what = "both" if sent else "neither"
        raise ValueError(f"send either {one!r} or {other!r}; this request has {what}")
    if getattr(body, sent[0]) is None:
        raise ValueError(f"{sent[0]!r} must not be null")


def _one_of(one: str, other: str, examples: list[dict[str, Any]]) -> ConfigDict:
    """A request body of either field, documented: ``oneOf`` and an example of each."""
    return ConfigDict(
        json_schema_extra={
            "oneOf": [{"required": [one]}, {"required": [other]}],
            "examples": examples,
        }
    )


class CheckRequest(RequestBody):
    """One query, or one conversation decided at its last user message."""

    model_config = _one_of(
        "query",
        "messages",
        [{"query": "What do bees make?"}, {"messages": CHAT, "conversation_id": "chat-42"}],
    )

    query: Text | SkipJsonSchema[None] = Field(
        None, description="the user's query, as the RAG system would receive it"
    )
    messages: list[Message] | SkipJsonSchema[None] = Field(
        None,
        description="a conversation, oldest message first, decided at its last user "
        "message given the turns before it (instead of `query`)",
    )
    conversation_id: ConversationId | None = Field(
        None, description="with `messages`: the caller's id of the chat, kept in the query log"
    )

    @model_validator(mode="after")
    def _query_or_messages(self) -> CheckRequest:
        _exactly_one(self, "query", "messages")
        if self.conversation_id is not None and self.messages is None:
            raise ValueError("'conversation_id' goes with 'messages', not with 'query'")
        return self


class ConversationIn(RequestBody):
    """One conversation of a batch."""

    messages: list[Message] = Field(description="oldest first, decided at the last user message")
    id: ConversationId | None = Field(None, description="the caller's id, kept in the query log")


class BatchRequest(RequestBody):
    """Queries, or conversations, decided together."""

    model_config = _one_of(
        "queries",
        "conversations",
        [
            {"queries": ["What do bees make?", "Who won in 1998?"]},
            {"conversations": [{"messages": CHAT, "id": "chat-42"}, {"messages": CHAT[1:2]}]},
        ],
    )

    queries: list[Text] | SkipJsonSchema[None] = Field(
        None, description="queries decided together, answered in this order"
    )
    conversations: list[ConversationIn] | SkipJsonSchema[None] = Field(
        None, description="conversations decided together, answered in this order"
    )

    @model_validator(mode="after")
    def _queries_or_conversations(self) -> BatchRequest:
        _exactly_one(self, "queries", "conversations")
        return self


class BatchResponse(BaseModel):
    results: list[Decision]


class TripwireIn(RequestBody):
    """A tripwire to add; ``id`` defaults to a hash of its topic and text."""

    text: NonBlankText
    topic: NonBlankText
    id: NonBlankText | None = None
    severity: Severity | None = None
    note: Text | None = None


class AddTripwires(RequestBody):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "tripwires": [{"text": "How do I poison a bee colony?", "topic": "harm"}],
                    "source": "incident 42",
                }
            ]
        }
    )

    tripwires: list[TripwireIn] = Field(min_length=1)
    source: Text | None = Field(None, description="where these came from, kept in the history")


class RemoveTripwires(RequestBody):
    """Every tripwire of ``topics`` and those with ``ids`` are removed."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"topics": ["harm"]}]})

    ids: list[Text] = Field(default_factory=list)
    topics: list[Text] = Field(default_factory=list)


class TripwireList(BaseModel):
    set_hash: str | None = Field(description="hash of the set decisions use now (None: empty)")
    n: int
    topics: dict[str, int]
    tripwires: list[Tripwire]


class ChangeResponse(BaseModel):
    change: TripwireChange
    tripwire_set: str | None = Field(description="the set hash decisions use from now on")


class ErrorBody(BaseModel):
    error: str = Field(description="what went wrong, for a person")
    limit: str | None = Field(None, description="the limit exceeded, when one was")
    max: float | None = Field(None, description="that limit's value")


class Readiness(BaseModel):
    ready: bool
    error: str | None = None
    embedder: str | None = None
    kb_fingerprint: str | None = None
    calibration_id: str | None = None
    tripwire_set: str | None = None
    # the calibration's canaries at their last search (ragbound.detect.canary); None before
    canary: CanaryCheck | None = None
    # where the calibration's questions came from; None before the calibration is loaded
    questions: NullQuestions | None = None
    approximate: bool = Field(
        False, description=f"{APPROXIMATE} (the calibration's questions are all synthetic)"
    )
    note: str | None = Field(None, description=f"'{APPROXIMATE}' when approximate")
