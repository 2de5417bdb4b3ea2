"""The second layer of ``tripwire check --llm``: the moderation judge (scripted LLM)."""

from __future__ import annotations

from ragbound.tripwires.cascade import moderate
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
