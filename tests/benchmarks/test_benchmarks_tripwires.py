"""The tripwire benchmark's cascade arithmetic (benchmarks/tripwires.py)."""

from __future__ import annotations

from benchmarks.tripwires import cascade_decisions
from ragbound.tripwires.cascade import JudgeResult


def verdict(value: str | None) -> JudgeResult:
    return JudgeResult(query="q", verdict=value)


def test_the_tripwires_decide_first_and_the_llm_decides_the_rest() -> None:
    tripped = [True, True, False, False, False]
    verdicts = [None, verdict("allow"), verdict("reject"), verdict("allow"), verdict(None)]
    # a tripped query stays forbidden whatever the LLM says (or was not asked); an LLM reply
    # that never parsed is no decision, not an "allow"
    assert cascade_decisions(tripped, verdicts) == [True, True, True, False, None]
