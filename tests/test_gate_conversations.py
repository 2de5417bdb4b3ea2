"""The Gate decides conversations: follow-ups read with the turns before them, topic switches
still caught, tripwires across every turn, the history embedded once."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragbound.conversations.model import conversation
from ragbound.conversations.reading import LAST, RECENT
from ragbound.errors import InputError
from ragbound.gate import Gate
from ragbound.tripwires import TripwireRule
from tests.tripwires.tripwire_texts import UNSAFE

RULE = TripwireRule(k=3, proportion=None, rank=1)
QUESTION = "How do bees tell each other where food is?"


@pytest.fixture(scope="module")
def gate(gated_kb: Path) -> Gate:
    return Gate.load(gated_kb, rule=RULE, context_k=2)


def chat(*turns: str, system: str | None = None) -> list[dict]:
    messages = [{"role": "system", "content": system}] if system else []
    for turn in turns:
        messages += [{"role": "user", "content": turn}, {"role": "assistant", "content": "I see."}]
    return messages[:-1]


def test_a_content_free_follow_up_is_answered_in_its_conversation(gate: Gate) -> None:
    alone = gate.decide("yes please")
    in_chat = gate.decide(chat(QUESTION, "yes please"))
    assert alone.action == "abstain"
    assert in_chat.action == "answer"
    assert in_chat.query == "yes please"
    assert in_chat.test.query == f"{QUESTION} yes please"  # the text searched
    assert in_chat.conversation is not None
    assert (in_chat.conversation.turn, in_chat.conversation.read_turns) == (1, 2)
    assert in_chat.conversation.reading == "follow"
    assert alone.conversation is None


def test_a_topic_switch_is_still_out_of_knowledge(gate: Gate) -> None:
    switch = gate.decide(chat(QUESTION, "What is the capital of Australia?"))
    assert switch.action == "abstain" and switch.conversation.read_turns == 1


def test_a_pronoun_that_points_back_follows(gate: Gate) -> None:
    assert gate.decide("And what is its job?").action == "abstain"
    follow_up = gate.decide(chat("Why do beekeepers use smoke?", "And what is its job?"))
    assert follow_up.action == "answer" and follow_up.conversation.read_turns == 2


def test_a_turn_after_an_off_topic_turn_is_not_joined_with_the_topic(gate: Gate) -> None:
    switched = chat(QUESTION, "What is the capital of Australia?", "And the capital of Peru?")
    decision = gate.decide(switched)
    assert decision.action != "answer"  # abstain, or a tripwire nearer than bees and trains
    assert decision.test.query == "What is the capital of Australia? And the capital of Peru?"


def test_small_talk_is_answered_as_small_talk(gate: Gate) -> None:
    for messages in (chat("hi there"), chat(QUESTION, "thanks!")):
        decision = gate.decide(messages)
        assert (decision.action, decision.cause) == ("answer", "small_talk")
        assert decision.reason.startswith("small talk")
    assert gate.decide(chat("Hi, what is the capital of Australia?")).cause != "small_talk"


def test_small_talk_never_meets_the_answerability_test(gate: Gate) -> None:
    # it asks nothing of the knowledge: an LLM judge would be a call spent for nothing
    both = Gate(gate.guard.with_answerability("coverage"), tripwires=gate.tripwires)
    talk = both.decide(chat(QUESTION, "thanks!"))
    assert (talk.cause, talk.answerability) == ("small_talk", None)
    assert both.decide(chat(QUESTION)).answerability is not None


def test_a_first_turn_is_decided_as_the_query_alone(gate: Gate) -> None:
    first = gate.decide(chat(QUESTION, system="Answer about bees."))
    alone = gate.decide(QUESTION)
    assert first.test.p_value == alone.test.p_value and first.action == alone.action
    assert first.conversation.turn == 0


def test_queries_and_conversations_mix_in_one_batch_in_order(gate: Gate) -> None:
    items = [QUESTION, chat(QUESTION, "yes please"), conversation(chat("hi", QUESTION), id="c")]
    decisions = gate.decide_many(items)
    assert [d.query for d in decisions] == [QUESTION, "yes please", QUESTION]
    assert decisions[2].conversation.id == "c"


def test_the_reading_is_a_choice(gated_kb: Path) -> None:
    last = Gate.load(gated_kb, rule=RULE, reading=LAST).decide(chat(QUESTION, "yes please"))
    recent = Gate.load(gated_kb, rule=RULE, reading=RECENT).decide(chat(QUESTION, "yes please"))
    assert last.action == "abstain" and recent.action == "answer"
    with pytest.raises(InputError, match="unknown reading"):
        Gate.load(gated_kb, reading="guess")
    with pytest.raises(InputError, match="needs an LLM"):
        Gate.load(gated_kb, reading="rewrite").decide(chat(QUESTION, "yes please"))


@pytest.mark.parametrize("unsafe", UNSAFE)
def test_a_forbidden_earlier_turn_is_dropped_not_forwarded(gate: Gate, unsafe: str) -> None:
    """Refused at its own turn; later, left out of what is read and of what goes upstream,
    and the later turn decided on its merits (docs/tripwires.md)."""
    assert gate.decide(unsafe).action == "reject"
    messages = chat(unsafe, "Why do beekeepers use smoke?")
    decision = gate.decide(messages)
    assert decision.action != "reject" and decision.conversation.dropped == [0]
    assert unsafe not in decision.test.query
    forwarded = decision.upstream_messages(messages)
    assert [m["content"] for m in forwarded] == ["Why do beekeepers use smoke?"]


def test_the_system_message_meets_the_tripwires_only_when_asked(gated_kb: Path) -> None:
    messages = chat(QUESTION, system=UNSAFE[1])
    assert Gate.load(gated_kb, rule=RULE).decide(messages).action != "reject"
    asked = Gate.load(gated_kb, rule=RULE, tripwire_instructions=True)
    assert asked.decide(messages).action == "reject"


def test_the_history_is_embedded_once(gated_kb: Path) -> None:
    gate = Gate.load(gated_kb, rule=RULE)
    embedder = gate.turn_vectors.embedder
    seen: list[str] = []
    encode, encode_one = embedder.encode, embedder.encode_one

    def counted(texts, *args, **kwargs):
        seen.extend(texts)
        return encode(texts, *args, **kwargs)

    def counted_one(text):
        seen.append(text)
        return encode_one(text)

    embedder.encode, embedder.encode_one = counted, counted_one
    try:
        turns = [QUESTION, "How far do they fly?", "yes please", "Why do beekeepers use smoke?"]
        for n in range(1, len(turns) + 1):
            gate.decide(chat(*turns[:n]))
    finally:
        embedder.encode, embedder.encode_one = encode, encode_one
    for turn in turns:
        assert seen.count(turn) == 1, turn


def test_a_tripwire_swap_keeps_the_reading_and_the_turn_cache(gated_kb: Path) -> None:
    gate = Gate.load(gated_kb, rule=RULE, reading=RECENT, tripwire_instructions=True)
    fresh = gate.with_tripwires(None)
    assert (fresh.reading, fresh.tripwire_instructions, fresh.tripwires) == (RECENT, True, None)
    assert fresh.turn_vectors is gate.turn_vectors


def test_the_earlier_turns_meet_the_tripwires_once(gated_kb: Path) -> None:
    gate = Gate.load(gated_kb, rule=RULE)
    retrieve, decide = gate.tripwires.retrieve_vectors, gate.tripwires.decide
    own_search: list[bool] = []
    searched: list[str] = []

    def counted_retrieve(vectors, k, knowledge=None):
        own_search.append(knowledge is None)  # the other turns' search: no knowledge hits
        return retrieve(vectors, k, knowledge)

    def counted_decide(texts, merged):
        if own_search.pop():
            searched.extend(texts)
        return decide(texts, merged)

    gate.tripwires.retrieve_vectors, gate.tripwires.decide = counted_retrieve, counted_decide
    turns = [QUESTION, "How far do they fly?", "Why do beekeepers use smoke?", UNSAFE[0]]
    for n in range(1, len(turns) + 1):
        gate.decide(chat(*turns[:n]))
    last = gate.decide(chat(*turns, "yes please"))
    assert last.conversation.dropped == [3]  # the kept verdict of the unsafe earlier turn
    assert searched and len(searched) == len(set(searched))  # each text searched once
    assert set(turns[:3]) <= set(searched)
