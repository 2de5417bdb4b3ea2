"""The base of the retrievers that gate the user's own store (LangChain, LlamaIndex, Haystack):
one search per query decides it, tripwires included, and gives the context on ``answer``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ragbound.adapters._chat import Refused
from ragbound.adapters._common import blocked, check_on_block
from ragbound.adapters._flagged import flagged_guard
from ragbound.adapters._framework import FrameworkKnowledge, check_guard_on
from ragbound.conversations.model import Query
from ragbound.detect import Guard
from ragbound.gate import Decision, Gate
from ragbound.tripwires import Tripwire, TripwireRule


class OwnStoreRetriever:
    """A gated retriever on the user's own store: a subclass names the knowledge its guard
    must be calibrated on (``knowledge_class``) and what the framework calls its results
    (``returned``, for errors) and calls :meth:`_start` once when built (a pydantic subclass
    declares ``_gate``, ``_last_decision`` and ``_refused`` as private attributes)."""

    knowledge_class: ClassVar[type[FrameworkKnowledge]] = FrameworkKnowledge
    returned: ClassVar[str] = "documents"

    def _start(
        self,
        guard: Guard,
        k: int,
        on_block: str,
        tripwires: Sequence[Tripwire] | None,
        tripwire_rule: TripwireRule | None,
        embed: Callable[[list[str]], Any] | None = None,
    ) -> None:
        """Check and keep the settings (``guard`` calibrated on a ``knowledge_class``, ``k``
        results on ``answer``, ``on_block``) and build the Gate, with the rule over
        ``tripwires`` (flagged in the store; None: no rule; the declared ones embedded by
        ``embed``, default the knowledge's query embedder)."""
        check_guard_on(guard, self.knowledge_class, k, self.returned)
        self.guard = guard
        self.k = k
        self.on_block = check_on_block(on_block)
        tripwire_test = flagged_guard(guard.kb, tripwires, tripwire_rule, embed)  # type: ignore[arg-type]
        self._gate = Gate(guard, tripwire_test, context_k=k)
        self._last_decision: Decision | None = None
        self._refused = Refused()

    @property
    def last_decision(self) -> Decision | None:
        """The decision on the latest query this retriever saw (None before the first)."""
        return self._last_decision

    @property
    def refused(self) -> Refused:
        """The turns this retriever refused, left out of what a chat sends its LLM later
        (:class:`~ragbound.adapters._chat.Refused`)."""
        return self._refused

    def decide(self, query: Query | list[dict[str, str]]) -> Decision:
        """The decision on one query, or on a conversation (OpenAI-style messages) at its
        last user turn: one search of the store (and one embedding for a vector search)."""
        decision = self._gate.decide(query)
        self._last_decision = decision
        self._refused.note(decision)
        return decision

    async def adecide(self, query: Query | list[dict[str, str]]) -> Decision:
        """:meth:`decide` in a worker thread."""
        return await asyncio.to_thread(self.decide, query)

    def _results(self, decision: Decision) -> list[tuple[Any, float]]:
        """The framework's results behind ``decision``'s context, nearest first, each with
        the score (in the framework's units) the search gave it; none unless ``answer``
        (``on_block="raise"``: QueryBlocked)."""
        if blocked(decision, self.on_block):
            return []
        knowledge: FrameworkKnowledge = self.guard.kb  # type: ignore[assignment]
        return knowledge.rescored(decision.neighbours)
