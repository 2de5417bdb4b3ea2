"""What every framework adapter shares: the blocked-query error, the decision as metadata."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

from ragbound.errors import InputError, RagboundError
from ragbound.gate import Decision
from ragbound.results import Neighbour

OnBlock = Literal["empty", "raise"]
"""What an adapter does on ``reject`` / ``abstain``: return nothing, or raise QueryBlocked."""
ON_BLOCK: tuple[OnBlock, ...] = ("empty", "raise")
METADATA_KEY = "ragbound"
"""The metadata key under which adapters annotate documents / nodes with the decision."""


class QueryBlocked(RagboundError):
    """The Gate refused a query (``reject``: forbidden, or ``abstain``: out of knowledge).

    ``decision`` is the full :class:`~ragbound.gate.Decision` (p-value, triggers, reason).
    """

    def __init__(self, decision: Decision):
        super().__init__(f"{decision.action}: {decision.reason}")
        self.decision = decision


def missing_extra(framework: str, extra: str, error: ImportError) -> ImportError:
    """The ImportError to raise when an adapter's framework is not installed."""
    return ImportError(
        f"this ragbound adapter needs {framework}, which is not installed ({error}); "
        f"install it with: pip install 'ragbound[{extra}]'"
    )


def check_on_block(on_block: str) -> OnBlock:
    """Validate an ``on_block`` option (``empty`` or ``raise``)."""
    if on_block not in ON_BLOCK:
        raise InputError(f"on_block must be one of {', '.join(ON_BLOCK)}, got {on_block!r}")
    return on_block  # type: ignore[return-value]


OnBlockOption = Annotated[OnBlock, BeforeValidator(check_on_block)]
"""An ``on_block`` field of a pydantic adapter, checked by :func:`check_on_block`."""


def blocked(decision: Decision, on_block: OnBlock) -> bool:
    """True when the query must get no context; raises QueryBlocked if so configured."""
    if decision.action == "answer":
        return False
    if on_block == "raise":
        raise QueryBlocked(decision)
    return True


def reply_texts(refusal: str, abstention: str, unanswerable: str) -> dict[str, str]:
    """The text a chat answers with, by the decision's cause (``in_knowledge`` has none: the
    LLM answers): ``refusal`` for a ``reject``, ``abstention`` for an ``abstain`` out of
    knowledge, ``unanswerable`` for one whose chunks do not hold the answer."""
    return {"forbidden": refusal, "out_of_knowledge": abstention, "unanswerable": unanswerable}


def decision_metadata(decision: Decision) -> dict[str, Any]:
    """The decision as JSON-ready metadata, without its context (the documents carry that)."""
    return decision.model_dump(mode="json", exclude={"neighbours"})


def chunk_metadata(chunk: Neighbour, summary: dict[str, Any]) -> dict[str, Any]:
    """Where one of the Gate's context chunks came from, and the decision, as metadata."""
    return {
        "chunk_id": chunk.chunk_id,
        "doc_id": chunk.doc_id,
        "source": chunk.source,
        "rank": chunk.rank,
        "similarity": chunk.similarity,
        METADATA_KEY: summary,
    }
