"""The gated-answers benchmark: how a reply is judged and how the rows read the answers (the
run itself needs the bundled LLM: `python -m benchmarks.run answerability-answers`)."""

from __future__ import annotations

from benchmarks import answerability_answers as answers


def test_a_label_is_the_first_yes_no_or_maybe_word() -> None:
    assert answers.label_correct("Yes. The trial showed no harm.", "yes")
    assert not answers.label_correct("No, yes-men aside, it did not.", "yes")
    assert answers.label_correct("The evidence says maybe, not yes.", "maybe")
    assert not answers.label_correct("It depends on the dose.", "no")


def test_declines_are_read_in_the_usual_phrasings() -> None:
    for reply in (
        "I don't know.",
        "The answer is not provided in the facts.",
        "The context does not mention the year.",
        "There is no information about that.",
        "Fact 3 does not mention his name.",
    ):
        assert answers.DECLINES.search(reply), reply
    assert not answers.DECLINES.search("Yes, fact 2 says so.")


def _found(passed: dict[str, list[bool]], declined: list[bool], correct: list[bool]) -> dict:
    one = {"passed": passed, "declined": declined, "correct": correct}
    return {"sets": {"inside": one, "left_out": one}}


def test_rows_count_answers_given_through_each_gate() -> None:
    passed = {
        answers.NO_GATE: [True, True, True, True],
        answers.RELEVANCE: [True, True, False, False],
    }
    found = _found(
        passed, declined=[False, False, False, True], correct=[True, False, False, False]
    )
    no_gate = answers.row(found, answers.NO_GATE)
    gated = answers.row(found, answers.RELEVANCE)
    assert no_gate is not None and gated is not None
    # no gate: 3 answers a set (one declined), 1 correct; pooled over both sets 2 of 6
    assert no_gate[0].startswith("0.33 [") and no_gate[0].endswith("(n 6)")
    # relevance: 2 answers a set, 1 correct; 2 of 4
    assert gated[0].startswith("0.50 [") and gated[0].endswith("(n 4)")
    # left out not attempted: no gate 1 of 4 (the decline), relevance 2 of 4
    assert no_gate[1].startswith("0.25") and gated[1].startswith("0.50")
    assert gated[2] == ""  # no unanswerable set
    assert gated[3].startswith("0.50")  # in-scope answered
    assert answers.row(found, answers.JUDGE) is None


def test_the_section_lists_rows_and_skips() -> None:
    passed = {answers.NO_GATE: [True], answers.RELEVANCE: [False]}
    results = {
        "n": 1,
        "n_calibration": 60,
        "total_s": 120.0,
        "corpora": {"CLAP NQ": _found(passed, [False], [True])},
        "skipped": {"BANKING77-OOS by intent": "no reference answers"},
    }
    text = "\n".join(answers.answers_markdown(results))
    assert "| CLAP NQ | no gate | 1.00 [" in text
    assert "| CLAP NQ | relevance alone (default, mss) |  | 1.00 [" in text
    assert "- BANKING77-OOS by intent: skipped, no reference answers" in text
    assert f"- PubMedQA: {answers.NOT_MEASURED}" in text  # neither run nor skipped
    assert answers.answers_markdown({"corpora": {}}) == []
