"""The second layer of ``tripwire check --llm``: the moderation judge (scripted LLM), asked
only about the queries the tripwires passed, and its answer in their rows."""

from __future__ import annotations

from ragbound.llm import ChatMessage, GenerationParams
from ragbound.tripwires.cascade import cascade, cascade_row, moderate
from ragbound.tripwires.guard import FloorUsed, TripwireVerdict
from tests.llm.llm_fakes import ScriptedLLM

REPLIES = [
    "It asks how to hurt someone. <verdict>reject</verdict>",
    "Harmless. <verdict>ALLOW</verdict>",
    "I think maybe.",
    "still no tag",
    "nope",  # three attempts, never a verdict
]


def test_the_judge_reads_tags_and_reports_bad_replies_without_guessing() -> None:
    verdicts = moderate(ScriptedLLM(list(REPLIES)), ["q1", "q2", "q3"], concurrency=1)
    assert [v.verdict for v in verdicts] == ["reject", "allow", None]
    assert [v.forbidden for v in verdicts] == [True, False, None]
    assert verdicts[0].reasoning == "It asks how to hurt someone."
    assert verdicts[2].error and "nope" in verdicts[2].error


def _verdict(query: str, *, forbidden: bool) -> TripwireVerdict:
    return TripwireVerdict(
        query=query,
        forbidden=forbidden,
        rule="best rank <= 1" if forbidden else None,
        triggers=[],
        proportion=0.0,
        best_rank=None,
        rr_sum=0.0,
        k=5,
        tripwire_set="set1",
        floor=FloorUsed(value=None, source="none"),
    )


def _judge(messages: list[ChatMessage], params: GenerationParams) -> str:
    """Rejects a query about poison, allows one about tea, never answers otherwise."""
    text = messages[-1].content
    if "poison" in text:
        return "Harm. <verdict>reject</verdict>"
    return "Fine. <verdict>allow</verdict>" if "tea" in text else "no tag"


VERDICTS = [
    _verdict("build a bomb", forbidden=True),
    _verdict("brew a poison", forbidden=False),
    _verdict("brew tea", forbidden=False),
    _verdict("hmm", forbidden=False),
]


def test_the_cascade_asks_the_judge_only_about_queries_the_tripwires_passed() -> None:
    llm = ScriptedLLM(responder=_judge)
    answers = cascade(VERDICTS, lambda: llm)
    assert sorted(answers) == [1, 2, 3]
    assert [answers[i].query for i in (1, 2, 3)] == ["brew a poison", "brew tea", "hmm"]
    assert [answers[i].forbidden for i in (1, 2, 3)] == [True, False, None]
    assert not any("bomb" in call[0][-1].content for call in llm.calls)


def test_no_model_is_made_when_the_tripwires_forbid_every_query() -> None:
    def refuse() -> ScriptedLLM:
        raise AssertionError("the judge was made")

    assert cascade(VERDICTS[:1], refuse) == {}


def test_the_judges_answer_decides_the_row_of_a_query_the_tripwires_passed() -> None:
    answers = cascade(VERDICTS, lambda: ScriptedLLM(responder=_judge))
    rows = [cascade_row(verdict, answers.get(i)) for i, verdict in enumerate(VERDICTS)]
    assert rows[0] == VERDICTS[0].model_dump(mode="json")  # the tripwires decided: unchanged
    assert [(r["forbidden"], r["rule"]) for r in rows] == [
        (True, "best rank <= 1"),
        (True, "llm"),
        (False, None),
        (False, None),  # no verdict: the query passes
    ]
    assert rows[1]["llm"]["verdict"] == "reject" and rows[3]["llm"]["verdict"] is None
    assert "llm" not in rows[0]
