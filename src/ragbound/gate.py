"""Gate: one decision per query, from the tripwires and the knowledge-boundary test together.

``Gate.decide(query)`` embeds the query once, searches the knowledge and the tripwires with
that one vector, and returns a :class:`Decision`:

- ``reject``: a tripwire rule fired: the request is forbidden; ``triggers`` name the tripwires;
- ``abstain``: the query is out of the knowledge base's knowledge (p-value <= alpha);
- ``answer``: neither; ``neighbours`` holds the retrieved chunks (full text), so the application
  uses them as its RAG context and never retrieves twice.

Every decision carries the evidence (p-value, statistic, critical value, tripwire features)
and the ids of the artifacts it used (knowledge-base fingerprint, calibration id, tripwire-set
hash), and serialises to the same JSON in Python, the CLI and the HTTP service.

Example:
    >>> gate = Gate.load("kb/")  # doctest: +SKIP
    >>> decision = gate.decide("How does BM25 score a chunk?")  # doctest: +SKIP
    >>> decision.action, [c.source for c in decision.neighbours]  # doctest: +SKIP
    ('answer', ['docs/06-bm25.md', ...])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field, computed_field, field_serializer

from ragbound.corpus import validate_query
from ragbound.detect.guard import Guard, Scored
from ragbound.errors import InputError
from ragbound.results import Neighbour
from ragbound.stores import Hits
from ragbound.tripwires.guard import (
    FloorUsed,
    Trigger,
    TripwireGuard,
    TripwireRule,
    TripwireVerdict,
    load_rule,
)

Action = Literal["answer", "abstain", "reject"]
ACTIONS: tuple[Action, ...] = ("answer", "abstain", "reject")
DEFAULT_CONTEXT_K = 5
# What an application says instead of answering, and how it hands the chunks to its LLM: one
# wording for the gateway and the adapters.
DEFAULT_REFUSAL = "I can't help with that request."
DEFAULT_ABSTENTION = "I don't know: the question is outside what my documents cover."
DEFAULT_CONTEXT_TEMPLATE = "Answer from these passages of the knowledge base:\n\n{context}"


class Decision(BaseModel):
    """What to do with one query, and why.

    ``p_value`` is the calibrated p-value that the query is in knowledge (small = out of
    knowledge); ``out_of_knowledge`` = p_value <= alpha. ``score`` is the test statistic
    (higher = more out of knowledge). ``forbidden`` = a tripwire rule fired; ``rule`` names the
    conditions that fired. A forbidden query is ``reject`` even when it is also out of
    knowledge: "forbidden" is the stronger answer to give a user.
    """

    query: str
    action: Action
    reason: str = Field(description="one line a person can read")
    p_value: float
    out_of_knowledge: bool
    statistic: str
    score: float
    critical_value: float | None
    alpha: float
    k: int
    forbidden: bool
    rule: str | None = Field(description="the tripwire conditions that fired, when forbidden")
    triggers: list[Trigger] = Field(description="tripwires in the merged top k, above the floor")
    tripwire_proportion: float | None = None
    tripwire_best_rank: int | None = None
    tripwire_floor: FloorUsed | None = Field(
        None, description="the similarity floor the tripwire rule used, and how it was derived"
    )
    neighbours: list[Neighbour] = Field(
        description="the retrieved chunks, nearest first, full text: the RAG context on answer"
    )
    kb_fingerprint: str
    calibration_id: str
    tripwire_set: str | None = Field(description="hash of the tripwire set used (None: none)")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def reject(self) -> bool:
        """The test's decision, as in a Verdict: p_value <= alpha (same as out_of_knowledge)."""
        return self.out_of_knowledge

    def context_text(self) -> str:
        """The retrieved chunks as one text for an LLM prompt, nearest first, blank lines
        between (empty when there are none)."""
        return "\n\n".join(chunk.text for chunk in self.neighbours)

    @field_serializer("critical_value")
    def _finite_or_none(self, value: float | None) -> float | None:
        return None if value is None or not math.isfinite(value) else value


class Gate:
    """The knowledge-boundary test and the tripwires of one knowledge base, applied together.

    ``guard`` is a calibrated :class:`Guard`; ``tripwires`` a :class:`TripwireGuard` over the
    same knowledge base (None: no tripwires, nothing is ever ``reject``). ``context_k`` chunks
    are returned with each decision.
    """

    def __init__(
        self,
        guard: Guard,
        tripwires: TripwireGuard | None = None,
        *,
        context_k: int = DEFAULT_CONTEXT_K,
    ):
        if isinstance(context_k, bool) or not isinstance(context_k, int) or context_k < 0:
            raise InputError(f"context_k must be an integer >= 0, got {context_k!r}")
        if tripwires is not None and tripwires.kb is not guard.kb:
            raise InputError("the tripwires must belong to the guard's knowledge base")
        self.guard = guard
        self.tripwires = tripwires
        self.context_k = min(context_k, len(guard.kb))

    @classmethod
    def load(
        cls,
        kb_dir: str | Path,
        *,
        rule: TripwireRule | None = None,
        context_k: int = DEFAULT_CONTEXT_K,
        force: bool = False,
    ) -> Gate:
        """Open a calibrated knowledge base with its tripwires (if any) and saved rule."""
        guard = Guard.load(kb_dir, force=force)
        tripwires = None
        if guard.kb.manifest.embedder.kind == "dense":
            candidate = TripwireGuard(guard.kb, rule or load_rule(Path(kb_dir)))
            tripwires = candidate if len(candidate.tripwires) else None
        return cls(guard, tripwires, context_k=context_k)

    def decide(self, query: str) -> Decision:
        """One query's decision."""
        return self.decide_many([query])[0]

    def decide_many(self, queries: Sequence[str]) -> list[Decision]:
        """Decisions for a batch, in input order; the batch is embedded and searched together."""
        texts = [validate_query(q, location=f"query {i + 1}") for i, q in enumerate(queries)]
        if not texts:
            raise InputError("no queries to decide")
        kb = self.guard.kb
        rule_k = self.tripwires.rule.k if self.tripwires is not None else 0
        depth = max(self.guard.k, self.context_k, rule_k)
        if kb.store.query_kind == "vector":
            vectors = kb.embed(texts) if len(texts) > 1 else kb.embedder.encode_one(texts[0])
            hits = kb.store.search(vectors, depth)
        else:
            vectors, hits = None, kb.store.search(texts, depth)
        # the combined statistic searches every indexed unit itself (a second embedding)
        scored = self.guard.score(texts, hits=None if self.guard.is_learned() else hits)
        verdicts = self._tripwire_verdicts(texts, vectors, hits)
        return [self._decision(i, text, scored, hits, verdicts) for i, text in enumerate(texts)]

    def _tripwire_verdicts(
        self, texts: list[str], vectors: np.ndarray | None, hits: Hits
    ) -> list[TripwireVerdict] | None:
        if self.tripwires is None or vectors is None:
            return None
        merged = self.tripwires.retrieve_vectors(vectors, self.tripwires.rule.k, hits)
        return self.tripwires.decide(texts, merged)

    def _decision(
        self,
        i: int,
        text: str,
        scored: Scored,
        hits: Hits,
        verdicts: list[TripwireVerdict] | None,
    ) -> Decision:
        p_value = float(scored.p_values[i])
        out = p_value <= scored.alpha
        verdict = verdicts[i] if verdicts is not None else None
        forbidden = verdict is not None and verdict.forbidden
        action: Action = "reject" if forbidden else ("abstain" if out else "answer")
        return Decision(
            query=text,
            action=action,
            reason=_reason(action, p_value, scored.alpha, verdict),
            p_value=p_value,
            out_of_knowledge=out,
            statistic=scored.statistic,
            score=float(scored.scores[i]),
            critical_value=scored.critical_value,
            alpha=scored.alpha,
            k=scored.k,
            forbidden=forbidden,
            rule=verdict.rule if verdict is not None else None,
            triggers=verdict.triggers if verdict is not None else [],
            tripwire_proportion=verdict.proportion if verdict is not None else None,
            tripwire_best_rank=verdict.best_rank if verdict is not None else None,
            tripwire_floor=verdict.floor if verdict is not None else None,
            neighbours=self.guard.neighbours(hits, i, self.context_k, full_text=True),
            kb_fingerprint=self.guard.kb.fingerprint,
            calibration_id=self.guard.calibration.manifest.id,
            tripwire_set=self.tripwires.tripwires.manifest.set_hash if self.tripwires else None,
        )


def _reason(action: Action, p_value: float, alpha: float, verdict: TripwireVerdict | None) -> str:
    if action == "reject":
        assert verdict is not None and verdict.forbidden
        topics = sorted({t.topic for t in verdict.triggers})
        return (
            f"forbidden: tripwire rule {verdict.rule} fired ({', '.join(topics)}); "
            f"floor {verdict.floor.describe()}"
        )
    if action == "abstain":
        return f"out of knowledge: p = {p_value:.3g} <= alpha = {alpha:g}"
    return f"in knowledge: p = {p_value:.3g} > alpha = {alpha:g}"
