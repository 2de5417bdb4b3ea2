"""The chat agreement benchmark: chats built with their expectations, the tallies against the
service, the section; and a small run of the whole thing (slow: a real service, every adapter)."""

from __future__ import annotations

import pytest

from benchmarks import chat_agreement as ca
from benchmarks import conversations as conv
from benchmarks import datasets
from ragbound.corpus import Document
from ragbound.gate import DEFAULT_ABSTENTION, DEFAULT_REFUSAL


def dialogue(name: str, document: str, users: int) -> conv.Dialogue:
    """A dialogue of ``users`` user turns, each answered by the agent."""
    messages = []
    for i in range(users):
        messages += [
            {"role": "user", "content": f"{name} question {i}"},
            {"role": "assistant", "content": f"{name} answer {i}"},
        ]
    return conv.Dialogue(name, document, tuple(messages))


# ------------------------------------------------------------------------------ chats
def test_a_splice_goes_before_a_later_user_turn_with_the_reply_its_action_gets() -> None:
    chat = ca.spliced(dialogue("d", "doc", 4), ca.FORBIDDEN, "a forbidden request", before=2)
    users = [m["content"] for m in chat.messages if m["role"] == "user"]
    assert users == [
        "d question 0",
        "d question 1",
        "a forbidden request",
        "d question 2",
        "d question 3",
    ]
    at = chat.user_positions()[2]
    assert chat.messages[at + 1] == {"role": "assistant", "content": DEFAULT_REFUSAL}
    assert chat.messages[at - 1]["content"] == "d answer 1"  # after the agent's own answer
    assert chat.kinds == (
        ca.FIRST,
        ca.FOLLOW_UP,
        ca.FORBIDDEN,
        ca.AFTER_FORBIDDEN,
        ca.AFTER_FORBIDDEN,
    )
    assert chat.expected() == ["answer", "answer", "reject", "answer", "answer"]
    # each turn is decided with the chat before it, ending with that turn
    assert chat.upto(2)[-1] == {"role": "user", "content": "a forbidden request"}
    assert len(chat.upto(0)) == 1 and len(chat.upto(4)) == len(chat.messages) - 1


def test_a_switch_abstains_and_the_chat_returns_to_its_topic() -> None:
    chat = ca.spliced(dialogue("d", "doc", 3), ca.FAR, "Who painted the Mona Lisa?", before=1)
    assert chat.kinds == (ca.FIRST, ca.FAR, ca.AFTER_SWITCH, ca.AFTER_SWITCH)
    assert chat.expected() == ["answer", "abstain", "answer", "answer"]
    assert {"role": "assistant", "content": DEFAULT_ABSTENTION} in chat.messages


def test_without_its_splice_a_chat_is_the_dialogue_as_doc2dial_has_it() -> None:
    own = dialogue("d", "doc", 4)
    chat = ca.spliced(own, ca.FORBIDDEN, "a forbidden request", before=2)
    plain = ca.unspliced(chat)
    assert ca.splice_index(chat) == 2
    assert plain.messages == own.messages and plain.id == "d"
    assert plain.kinds == (ca.FIRST, ca.FOLLOW_UP, ca.FOLLOW_UP, ca.FOLLOW_UP)


@pytest.mark.parametrize("before", [0, 3])
def test_a_splice_needs_a_dialogue_turn_before_and_after_it(before: int) -> None:
    with pytest.raises(ValueError, match="splice before user turn"):
        ca.spliced(dialogue("d", "doc", 3), ca.SWITCH, "q", before=before)


def _corpus_and_split() -> tuple[conv.Corpus, conv.Split]:
    """Two domains: documents a1, a2 (dmv) and b1 (ssa) kept, a3 (dmv) and b2 (ssa) left out."""
    domains = {"a1": "dmv", "a2": "dmv", "a3": "dmv", "b1": "ssa", "b2": "ssa"}
    documents = tuple(Document(id=d, text=d, source=f"doc2dial/{x}") for d, x in domains.items())
    dialogues = tuple(dialogue(f"{d}-{i}", d, 3 + i) for d in domains for i in range(2))
    corpus = conv.Corpus(documents, dialogues, far=("far 0", "far 1", "far 2"))
    kept = {"a1", "a2", "b1"}
    test = [d for d in dialogues if d.document in kept]
    return corpus, conv.Split(kept, None, [], test, {})  # no knowledge base: none is read


def test_the_chats_take_each_splice_in_turn_from_where_it_belongs() -> None:
    corpus, split = _corpus_and_split()
    forbidden = ["harm 0", "harm 1", "harm 2"]
    chats = ca.make_chats(corpus, split, forbidden, n=6, seed=3)
    assert chats == ca.make_chats(corpus, split, forbidden, n=6, seed=3)  # seeded
    assert len({c.id.split(" + ")[0] for c in chats}) == 6  # six dialogues, none twice
    domain = ca.domain_of(corpus)
    opened_by = {d.messages[0]["content"]: d.document for d in corpus.dialogues}
    for i, chat in enumerate(chats):
        kind = ca.SPLICES[i % 3]
        assert chat.kinds.count(kind) == 1 and chat.kinds[0] == ca.FIRST
        question = chat.upto(chat.kinds.index(kind))[-1]["content"]
        own = next(d for d in split.test if chat.id.startswith(d.id + " + ")).document
        if kind == ca.SWITCH:  # a left-out document's opening question, another domain
            source = opened_by[question]
            assert source not in split.kept and domain[source] != domain[own]
        elif kind == ca.FAR:
            assert question in corpus.far
        else:
            assert question in forbidden


# ------------------------------------------------------------------------------ tallies
def _chats() -> list[ca.Chat]:
    return [
        ca.spliced(dialogue("x", "doc", 2), ca.SWITCH, "switch", before=1),
        ca.spliced(dialogue("y", "doc", 2), ca.FORBIDDEN, "harm", before=1),
    ]


SERVED = [
    [("answer", 0.5, 0), ("abstain", 0.01, 1), ("answer", 0.4, 2)],
    [("answer", 0.3, 0), ("reject", 0.2, 1), ("abstain", 0.02, 2)],
]


def test_a_tally_counts_each_kind_as_expected_and_the_turns_decided_as_the_chat() -> None:
    found = ca.tally(_chats(), SERVED)
    assert found["by_kind"][ca.FIRST] == [2, 2]
    assert found["by_kind"][ca.SWITCH] == [1, 1]
    assert found["by_kind"][ca.FORBIDDEN] == [1, 1]
    assert found["by_kind"][ca.AFTER_SWITCH] == [1, 1]
    assert found["by_kind"][ca.AFTER_FORBIDDEN] == [0, 1]
    assert found["all"] == [5, 6] and found["whole_chat"] == 6
    assert found["misses"] == [
        {
            "chat": "y + forbidden",
            "turn": 2,
            "kind": ca.AFTER_FORBIDDEN,
            "action": "abstain",
            "text": "y question 1",
        }
    ]
    alone = [[(a, p, None) for a, p, _ in turns] for turns in SERVED]  # decided as queries
    assert ca.tally(_chats(), alone)["whole_chat"] == 0


def test_differences_name_each_turn_decided_otherwise_than_by_the_service() -> None:
    other = [list(turns) for turns in SERVED]
    other[1][2] = ("answer", 0.07, 2)
    found, gap = ca.differences(_chats(), other, SERVED)
    assert found == [
        {
            "chat": "y + forbidden",
            "turn": 2,
            "kind": ca.AFTER_FORBIDDEN,
            "action": "answer",
            "service": "abstain",
            "p_value": 0.07,
            "service_p_value": 0.02,
        }
    ]
    assert gap == pytest.approx(0.05)
    assert ca.differences(_chats(), SERVED, SERVED) == ([], 0.0)


def test_a_splice_costs_the_turns_after_it_decided_otherwise_than_without_it() -> None:
    plain = [  # the dialogues alone: user turns 0 and 1
        [("answer", 0.5, 0), ("answer", 0.4, 1)],
        [("answer", 0.3, 0), ("answer", 0.2, 1)],
    ]
    assert ca.splice_cost(_chats(), SERVED, plain) == {
        "after a switch caught": [1, 1],
        "after a forbidden request rejected": [0, 1],  # abstained after it, answered alone
    }
    missed = [list(turns) for turns in SERVED]
    missed[0][1] = ("answer", 0.3, 1)  # the switch answered
    assert ca.splice_cost(_chats(), missed, plain)["after a switch missed"] == [1, 1]


def _results() -> dict:
    other = [list(turns) for turns in SERVED]
    other[1][2] = ("answer", 0.07, 2)
    runs = {
        ca.SERVICE: {"decided": SERVED, "p50_ms_per_turn": 80.0},
        "in process": {"decided": SERVED, "p50_ms_per_turn": 70.0},
        "langchain agent": {"decided": other, "p50_ms_per_turn": 120.0},
        "haystack chat pipeline": {"skipped": "ImportError: No module named 'haystack'"},
    }
    turns = [kind for chat in _chats() for kind in chat.kinds]
    return {
        "split_seed": 46,
        "sample_seed": 4646,
        "chats": 2,
        "turns": {kind: turns.count(kind) for kind in ca.KINDS},
        "sizes": {
            "documents kept": 3,
            "chunks": 9,
            "calibration questions": 20,
            "test dialogues": 4,
            "tripwires": 10,
        },
        "paths": ca.summarise(_chats(), runs),
        "splice_cost": {
            "after a switch caught": [1, 1],
            "after a forbidden request rejected": [0, 1],
        },
        "total_s": 90.0,
    }


def test_the_section_shows_each_path_its_agreement_and_the_turns_that_differ() -> None:
    results = _results()
    assert "differs" not in results["paths"][ca.SERVICE]  # the reference
    assert results["paths"]["in process"]["differs"] == []
    text = "\n".join(ca.agreement_markdown(results))
    header, rows = ca.expected_table(results)
    assert header == ["turn", "expected", ca.SERVICE, "in process", "langchain agent"]
    by_kind = {row[0]: row for row in rows}
    assert by_kind[ca.AFTER_FORBIDDEN][2:] == ["0/1 (0.00)", "0/1 (0.00)", "1/1 (1.00)"]
    assert ca.FAR not in by_kind  # no far switch in these chats
    assert rows[-1][2:] == ["**5/6 (0.83)**", "**5/6 (0.83)**", "**6/6 (1.00)**"]
    _, agreement = ca.agreement_table(results)
    assert agreement[0][:4] == [ca.SERVICE, "6", "6/6", "(the reference)"]
    assert agreement[1][3:5] == ["0", "0.0000"]
    assert agreement[2][3:5] == ["1", "0.0500"]
    assert agreement[3][1] == "skipped: ImportError: No module named 'haystack'"
    assert "1 turns differ from the service" in text
    assert "- langchain agent, y + forbidden, user turn 2" in text
    # the service's misses are quoted, a forbidden request never
    assert 'abstain: "y question 1"' in text
    assert "| after a forbidden request rejected | 0/1 (0.00) |" in text
    assert "harm" not in text


def test_every_path_agreeing_says_so_and_nothing_ran_writes_nothing() -> None:
    results = _results()
    results["paths"]["langchain agent"]["differs"] = []
    assert ca.differing_lines(results) == ["Every path decided every turn as the service did."]
    assert ca.agreement_markdown({}) == []


# ------------------------------------------------------------------------------ a small run
missing = conv.missing_reason() or datasets.tripwire_missing_reason()


@pytest.mark.slow
@pytest.mark.skipif(missing is not None, reason=str(missing))
def test_a_small_run_decides_every_turn_through_every_path_as_the_service(tmp_path) -> None:
    """Three chats (one of each splice) over 60 of doc2dial's texts: every path installed
    decides every turn as the conversation, and as the real service decides it."""
    corpus = conv.subset(conv.load_corpus(), 60)
    results = ca.chat_agreement_part(tmp_path, corpus=corpus, n_chats=3)
    assert results["chats"] == 3
    turns = sum(results["turns"].values())
    assert all(results["turns"][kind] == 1 for kind in ca.SPLICES)
    paths = results["paths"]
    assert "skipped" not in paths[ca.SERVICE] and "skipped" not in paths["in process"]
    for name, found in paths.items():
        if "skipped" in found:
            continue
        assert found["all"][1] == turns and found["whole_chat"] == turns, name
        if name != ca.SERVICE:
            assert found["differs"] == [], name
    assert ca.agreement_markdown(results)
    cost = results["splice_cost"]
    after = results["turns"][ca.AFTER_SWITCH] + results["turns"][ca.AFTER_FORBIDDEN]
    assert sum(n for _, n in cost.values()) == after
    assert len(results["service_turns"]) == 3
