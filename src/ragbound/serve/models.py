"""Request and response bodies of the HTTP API (the decision itself is ``gate.Decision``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ragbound.gate import Decision
from ragbound.tripwires import Tripwire, TripwireChange
from ragbound.tripwires.models import Severity


class CheckRequest(BaseModel):
    query: str = Field(description="the user's query, as the RAG system would receive it")


class BatchRequest(BaseModel):
    queries: list[str] = Field(description="queries decided together, answered in this order")


class BatchResponse(BaseModel):
    results: list[Decision]


class TripwireIn(BaseModel):
    """A tripwire to add; ``id`` defaults to a hash of its topic and text."""

    text: str
    topic: str
    id: str | None = None
    severity: Severity | None = None
    note: str | None = None


class AddTripwires(BaseModel):
    tripwires: list[TripwireIn] = Field(min_length=1)
    source: str | None = Field(None, description="where these came from, kept in the history")


class RemoveTripwires(BaseModel):
    """Every tripwire of ``topics`` and those with ``ids`` are removed."""

    ids: list[str] = Field(default_factory=list)
    topics: list[str] = Field(default_factory=list)


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
