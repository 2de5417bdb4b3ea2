"""Gate: one decision per query, from the tripwires and the knowledge-boundary test together.

``Gate.decide(query)`` embeds the query once, searches the knowledge and the tripwires with
that one vector, and returns a :class:`Decision`: ``reject`` a forbidden query, ``abstain`` on
one out of knowledge (or unanswerable), else ``answer``, with the retrieved chunks as the RAG
context (docs/gate.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

import ragbound.tracing as tracing
from ragbound.conversations.model import Query, as_query, decided_text, upstream_messages
from ragbound.conversations.reading import DEFAULT_READING, check_reading
from ragbound.conversations.tripwires import TurnTripwires
from ragbound.conversations.turns import (
    ConversationRead,
    Embedded,
    TurnVectors,
    conversation_read,
    read_batch,
    vector_reader,
)
from ragbound.detect.answerability import AnswerabilityVerdict
from ragbound.detect.guard import Guard
from ragbound.detect.names import APPROXIMATE
from ragbound.detect.online import Scored
from ragbound.errors import InputError
from ragbound.gate_texts import DEFAULT_ABSTENTION as DEFAULT_ABSTENTION  # re-exported
from ragbound.gate_texts import DEFAULT_CONTEXT_TEMPLATE as DEFAULT_CONTEXT_TEMPLATE
from ragbound.gate_texts import DEFAULT_REFUSAL as DEFAULT_REFUSAL
from ragbound.gate_texts import DEFAULT_UNANSWERABLE as DEFAULT_UNANSWERABLE
from ragbound.knowledge.query import QueryTexts
from ragbound.results import Neighbour, Verdict
from ragbound.stores import Hits
from ragbound.tripwires.guard import TripwireRule, TripwireTest, TripwireVerdict

if TYPE_CHECKING:
    from ragbound.conversations.rewrite import Rewriter

Action = Literal["answer", "abstain", "reject"]
ACTIONS: tuple[Action, ...] = ("answer", "abstain", "reject")
Cause = Literal["in_knowledge", "out_of_knowledge", "unanswerable", "forbidden", "small_talk"]
CAUSES: tuple[Cause, ...] = (
    "in_knowledge",
    "out_of_knowledge",
    "unanswerable",
    "forbidden",
    "small_talk",
)
ACTION_OF: dict[Cause, Action] = {
    "forbidden": "reject",
    "out_of_knowledge": "abstain",
    "unanswerable": "abstain",
    "in_knowledge": "answer",
    "small_talk": "answer",  # a greeting or thanks gets a reply, not "I don't know"
}
DEFAULT_CONTEXT_K = 5


class Decision(BaseModel):
    """What to do with one query, and why.

    ``test`` is the knowledge-boundary test (``out_of_knowledge`` = p_value <= alpha; its
    evidence is ``neighbours``, not repeated in it); ``tripwires`` the tripwire test
    (``forbidden`` = the rule fired). ``action`` is ``reject`` for a forbidden query, even one
    also out of knowledge (the stronger answer), ``abstain`` for one out of knowledge or
    unanswerable, else ``answer``; ``cause`` says which.
    """

    query: str
    action: Action
    cause: Cause = Field(
        description="why: forbidden (reject), out_of_knowledge or unanswerable (abstain), "
        "in_knowledge or small_talk (answer: a chat's greeting, thanks or 'ok')"
    )
    reason: str = Field(description="one line a person can read")
    test: Verdict = Field(description="the knowledge-boundary test (evidence: neighbours)")
    answerability: AnswerabilityVerdict | None = Field(
        None,
        description="the answerability test: do the retrieved chunks hold what the question "
        "asks (None: the calibration has none, or the query was already rejected or out of "
        "knowledge, so it was not run)",
    )
    tripwires: TripwireVerdict | None = Field(
        description="the tripwire test (None: the knowledge base has no tripwires)"
    )
    neighbours: list[Neighbour] = Field(
        description="the retrieved chunks, nearest first, full text: the RAG context on answer"
    )
    kb_fingerprint: str
    calibration_id: str
    tripwire_set: str | None = Field(description="hash of the tripwire set used (None: none)")
    conversation: ConversationRead | None = Field(
        None,
        description="for a conversation: the turn decided (``query`` is its text) and how "
        "the conversation was read (the text searched is ``test.query``); None: one query",
    )

    def upstream_messages(self, messages: list[dict]) -> list[dict]:
        """The conversation's OpenAI-style ``messages`` as they may go to an LLM on
        ``answer``: without the earlier turns found forbidden (``conversation.dropped``) and
        their replies. Forward these, never the history as sent: a forbidden request must not
        reach the LLM in a later turn either."""
        dropped = self.conversation.dropped if self.conversation is not None else []
        return upstream_messages(messages, dropped)


class Gate:
    """The knowledge-boundary test and the tripwires of one knowledge base, applied together.

    ``guard`` is a calibrated :class:`Guard`; ``tripwires`` a :class:`TripwireTest` over the
    same knowledge base (None: nothing is ever ``reject``). ``context_k`` chunks are returned
    with each decision. A conversation is decided at its last user turn, searched as
    ``reading`` reads it; the tripwires see every user turn (and the system and developer
    messages with ``tripwire_instructions``). ``turn_vectors``: the cache of embedded turns,
    shared with another gate (None: a new one).
    """

    def __init__(
        self,
        guard: Guard,
        tripwires: TripwireTest | None = None,
        *,
        context_k: int = DEFAULT_CONTEXT_K,
        reading: str = DEFAULT_READING,
        tripwire_instructions: bool = False,
        rewriter: Rewriter | None = None,
        turn_vectors: TurnVectors | None = None,
    ):
        if isinstance(context_k, bool) or not isinstance(context_k, int) or context_k < 0:
            raise InputError(f"context_k must be an integer >= 0, got {context_k!r}")
        if tripwires is not None and tripwires.kb is not guard.kb:
            raise InputError("the tripwires must belong to the guard's knowledge base")
        try:
            self.reading = check_reading(reading)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        self.guard = guard
        self.tripwires = tripwires
        self.context_k = min(context_k, len(guard.kb))
        self.tripwire_instructions = tripwire_instructions
        self.rewriter = rewriter
        # the calibration's questions bound the in-knowledge questions the tripwires call
        # forbidden (the rule's calibrated floor), in every path a gate decides; the guard's,
        # with the vectors its calibration kept (else embedded once, shared by its gates)
        self.reference = guard.reference
        if tripwires is not None and tripwires.reference is None:
            tripwires.use_reference(self.reference)
        embedder = vector_reader(guard.kb)
        if turn_vectors is None and embedder is not None:
            turn_vectors = TurnVectors(embedder)
        self.turn_vectors = turn_vectors
        self.turn_tripwires = None
        if tripwires is not None and turn_vectors is not None and not tripwires.reads_search:
            # a framework's own search meets the tripwires of the turn decided alone
            self.turn_tripwires = TurnTripwires(
                tripwires, turn_vectors, instructions=tripwire_instructions
            )

    @classmethod
    def load(
        cls,
        kb_dir: str | Path,
        *,
        rule: TripwireRule | None = None,
        context_k: int = DEFAULT_CONTEXT_K,
        force: bool = False,
        reading: str | None = None,
        tripwire_instructions: bool = False,
        rewriter: Rewriter | None = None,
    ) -> Gate:
        """Open a calibrated knowledge base with its tripwires (if any) and saved rule.
        ``reading`` None: the one the calibration's conversations were read with, else
        ``follow``."""
        guard = Guard.load(kb_dir, force=force)
        gate = cls(
            guard,
            TripwireTest.saved(guard.kb, rule),
            context_k=context_k,
            reading=reading or guard.reading or DEFAULT_READING,
            tripwire_instructions=tripwire_instructions,
            rewriter=rewriter,
        )
        if gate.tripwires is not None:
            # the floor measured here, not at a decision: the reference questions' kept vectors
            # searched (embedded first only for a calibration saved without them)
            gate.tripwires.floor()
        return gate

    def with_tripwires(self, tripwires: TripwireTest | None) -> Gate:
        """This gate with another tripwire set (None: none), everything else kept, the cache
        of embedded turns and the calibration's questions (the calibrated floor's) shared:
        what a service swaps in when its tripwires change."""
        if tripwires is not None and tripwires.reference is None:
            tripwires.use_reference(self.reference)
            tripwires.floor()  # a tripwire search of the questions embedded already
        return Gate(
            self.guard,
            tripwires,
            context_k=self.context_k,
            reading=self.reading,
            tripwire_instructions=self.tripwire_instructions,
            rewriter=self.rewriter,
            turn_vectors=self.turn_vectors,
        )

    @property
    def tripwire_set(self) -> str | None:
        """The hash of the tripwire set the gate meets now (None: no tripwires)."""
        return self.tripwires.set_hash if self.tripwires is not None else None

    def decide(self, query: Query | Sequence[Any]) -> Decision:
        """One decision: for a query string, or for a conversation (a list of OpenAI-style
        messages, or a :class:`~ragbound.conversations.model.Conversation`) at its last user
        turn."""
        return self.decide_many([query])[0]

    def decide_many(self, queries: Sequence[Query | Sequence[Any]]) -> list[Decision]:
        """Decisions for a batch of queries and conversations, in input order, embedded and
        searched together (traced as one ``ragbound.decide`` span, a child per step)."""
        with tracing.span("ragbound.decide", batch_size=len(queries)) as span:
            return self._decide(self.embed(queries), span)

    def embed(self, queries: Sequence[Query | Sequence[Any]]) -> Embedded:
        """The first step of :meth:`decide_many`: each item read (a conversation into the text
        searched), validated and embedded (span ``ragbound.embed``). A server embeds the next
        batch this way while :meth:`decide_embedded` decides the one before it."""
        with tracing.span("ragbound.embed"):
            if isinstance(queries, QueryTexts) or all(isinstance(q, str) for q in queries):
                prepared = self.guard.kb.prepare(queries)  # validated once, embedded once
                return Embedded(tuple(prepared.texts), (), prepared)
            items = [as_query(q, location=f"query {i + 1}") for i, q in enumerate(queries)]
            turns = self.turn_tripwires
            dropped = turns.dropped(items) if turns is not None else [()] * len(items)
            vectors, prepare = self.turn_vectors, self.guard.kb.prepare
            return read_batch(items, self.reading, vectors, prepare, self.rewriter, dropped)

    def decide_embedded(self, embedded: Embedded) -> list[Decision]:
        """:meth:`decide_many` for a batch :meth:`embed` prepared, in its order (span
        ``ragbound.decide`` without its ``ragbound.embed`` child)."""
        with tracing.span("ragbound.decide", batch_size=len(embedded.texts)) as span:
            return self._decide(embedded, span)

    def _decide(self, embedded: Embedded, span: Any) -> list[Decision]:
        kb = self.guard.kb
        prepared = embedded.prepared
        texts = prepared.texts
        rule_k = self.tripwires.rule.k if self.tripwires is not None else 0
        answerability = self.guard.answerability
        answer_depth = answerability.depth if answerability is not None else 0
        depth = max(self.guard.k, self.context_k, rule_k, answer_depth)
        level = self.guard.answerability_level()  # alpha, shared when both tests run
        if self.guard.is_learned() and kb.store.describe().exact:
            # one search for the combined statistic's features too: an exact search's first
            # rows are a shallower one's (an approximate one's are not: it searches its own)
            depth = max(depth, self.guard.search_depth())
        with tracing.span("ragbound.search", depth=depth):
            hits = kb.store.search(prepared.searched, depth)
        with tracing.span("ragbound.statistic") as step:
            # the vectors and the search above: the combined statistic neither embeds nor
            # searches the knowledge base's own granularity again
            scored = self.guard.score(texts, hits=hits, prepared=prepared, alpha=level)
            if step.is_recording():
                step.set_attributes(tracing.named(_test_attributes(scored)))
        with tracing.span("ragbound.tripwires") as step:
            verdicts = self._tripwire_verdicts(embedded, hits)
            if verdicts is not None and step.is_recording():
                step.set_attributes({"ragbound.forbidden": sum(v.forbidden for v in verdicts)})
        answers = None
        if answerability is not None:
            with tracing.span("ragbound.answerability"):
                talk = [embedded.small_talk_at(i) for i in range(len(texts))]
                answers = self._answerability(texts, hits, scored, verdicts, level, talk)
        decisions = [
            self._decision(i, text, scored, hits, verdicts, embedded, answers)
            for i, text in enumerate(texts)
        ]
        if span.is_recording():
            _trace_decisions(span, scored, decisions)
        return decisions

    def _answerability(
        self,
        texts: Sequence[str],
        hits: Hits,
        scored: Scored,
        verdicts: list[TripwireVerdict] | None,
        level: float,
        small_talk: Sequence[bool],
    ) -> list[AnswerabilityVerdict | None]:
        """The answerability test of the questions the other tests let through (no second
        search or embedding); None for the others, small talk included: an LLM judge never
        reads a forbidden turn."""
        open_rows = [
            i
            for i in range(len(texts))
            if scored.p_values[i] > level
            and not small_talk[i]
            and not (verdicts is not None and verdicts[i].forbidden)
        ]
        return self.guard.answers.verdicts_at(texts, hits, level, open_rows)

    def _tripwire_verdicts(self, embedded: Embedded, hits: Hits) -> list[TripwireVerdict] | None:
        """The tripwire verdict of each item, from the knowledge's search ``hits``; a
        conversation's other turns met too."""
        if self.tripwires is None:
            return None
        prepared = embedded.prepared
        # tripwires a framework's own search met are keyed by what it searched (texts too)
        searched = prepared.searched if self.tripwires.reads_search else prepared.vectors
        if searched is None:
            return None
        verdicts = self.tripwires.check_vectors(prepared.texts, searched, hits)
        if self.turn_tripwires is not None and embedded.reads:
            verdicts = self.turn_tripwires.across(embedded, verdicts)
        return verdicts

    def _decision(
        self,
        i: int,
        text: str,
        scored: Scored,
        hits: Hits,
        verdicts: list[TripwireVerdict] | None,
        embedded: Embedded,
        answers: list[AnswerabilityVerdict | None] | None = None,
    ) -> Decision:
        # the test's evidence is the decision's neighbours: not repeated inside it
        test = self.guard.verdict(text, scored, i, evidence=0)
        item = embedded.items[i] if embedded.reads else text
        tripwires = verdicts[i] if verdicts is not None else None
        answer = answers[i] if answers is not None else None
        cause = _cause(test, tripwires, answer, small_talk=embedded.small_talk_at(i))
        action: Action = ACTION_OF[cause]
        return Decision(
            query=decided_text(item),
            action=action,
            cause=cause,
            reason=_reason(cause, test, tripwires, answer),
            test=test,
            answerability=answer,
            tripwires=tripwires,
            neighbours=self.guard.neighbours(hits, i, self.context_k, full_text=True),
            kb_fingerprint=self.guard.kb.fingerprint,
            calibration_id=self.guard.calibration_id,
            tripwire_set=self.tripwire_set,
            conversation=(
                conversation_read(item, embedded.reads[i], embedded.dropped_at(i))
                if embedded.reads
                else None
            ),
        )


def fired_topics(decision: Decision) -> list[str]:
    """The topics of the tripwires that made the query forbidden (none when it is not)."""
    tripwires = decision.tripwires
    return tripwires.topics() if tripwires is not None and tripwires.forbidden else []


def _test_attributes(scored: Scored) -> dict[str, Any]:
    return {"statistic": scored.statistic, "k": scored.k, "alpha": scored.alpha}


def _trace_decisions(span: Any, scored: Scored, decisions: list[Decision]) -> None:
    """The batch's test on its ``ragbound.decide`` span, and one event per decision (the
    attributes of the span itself too for a batch of one); never the query's text."""
    span.set_attributes(tracing.named(_test_attributes(scored)))
    for i, decision in enumerate(decisions):
        fired = fired_topics(decision) or None
        attributes = tracing.named(
            {
                "action": decision.action,
                "cause": decision.cause,
                "p_value": decision.test.p_value,
                "tripwire.topics": fired,
            }
        )
        span.add_event("ragbound.decision", {"ragbound.index": i, **attributes})
        if len(decisions) == 1:
            span.set_attributes(attributes)


def _held(answer: AnswerabilityVerdict) -> str:
    """What the answerability test found, in words: the judge's probability, or the best
    sentence's share of the question."""
    chance = answer.evidence.answer_probability
    if chance is not None:
        return f"the judge reads the answer in the retrieved chunks with probability {chance:.2f}"
    return f"the retrieved chunks hold {answer.evidence.coverage:.0%} of the question"


def _cause(
    test: Verdict,
    tripwires: TripwireVerdict | None,
    answer: AnswerabilityVerdict | None,
    *,
    small_talk: bool = False,
) -> Cause:
    """Forbidden first (the stronger answer to give), then small talk (a chat's greeting or
    thanks asks nothing of the knowledge), then out of knowledge (the question is off the
    corpus), then unanswerable (on it, the answer not retrieved)."""
    if tripwires is not None and tripwires.forbidden:
        return "forbidden"
    if small_talk:
        return "small_talk"
    if test.out_of_knowledge:
        return "out_of_knowledge"
    if answer is not None and answer.unanswerable:
        return "unanswerable"
    return "in_knowledge"


def _reason(
    cause: Cause,
    test: Verdict,
    tripwires: TripwireVerdict | None,
    answer: AnswerabilityVerdict | None,
) -> str:
    if cause == "forbidden":
        assert tripwires is not None
        return (
            f"forbidden: tripwire rule {tripwires.rule} fired ({', '.join(tripwires.topics())}); "
            f"floor {tripwires.floor.describe()}"
        )
    caveat = f" ({APPROXIMATE})" if test.approximate else ""
    if cause == "small_talk":
        return f"small talk: answered whatever the test says (p = {test.p_value:.3g})"
    if cause == "out_of_knowledge":
        return f"out of knowledge: p = {test.p_value:.3g} <= alpha = {test.alpha:g}{caveat}"
    relevance = f"in knowledge: p = {test.p_value:.3g} > alpha = {test.alpha:g}"
    if answer is None:
        return f"{relevance}{caveat}"
    held = _held(answer)
    missing = ", ".join(answer.evidence.missing)
    if cause == "unanswerable":
        return (
            f"unanswerable: {held}, p = {answer.p_value:.3g} <= alpha = {answer.alpha:g}"
            f"{f'; missing: {missing}' if missing else ''} ({relevance}){caveat}"
        )
    return f"{relevance}; answerable: {held}, p = {answer.p_value:.3g}{caveat}"
