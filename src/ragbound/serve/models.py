"""Request and response bodies of the HTTP API (the decision itself is ``gate.Decision``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

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


class CheckRequest(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"query": "What do bees make?"}]})

    query: Text = Field(description="the user's query, as the RAG system would receive it")


class BatchRequest(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"queries": ["What do bees make?", "Who won in 1998?"]}]}
    )

    queries: list[Text] = Field(description="queries decided together, answered in this order")


class BatchResponse(BaseModel):
    results: list[Decision]


class TripwireIn(BaseModel):
    """A tripwire to add; ``id`` defaults to a hash of its topic and text."""

    text: NonBlankText
    topic: NonBlankText
    id: NonBlankText | None = None
    severity: Severity | None = None
    note: Text | None = None


class AddTripwires(BaseModel):
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


class RemoveTripwires(BaseModel):
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
