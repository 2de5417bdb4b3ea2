"""Second layer: an LLM moderation judge on the queries the tripwires let pass (RAR Table 2).

A feature, not only a benchmark: ``ragbound tripwire check --llm`` asks it about every query the
tripwires let pass (:func:`cascade`); its --json prints each query's row as :func:`cascade_row`
makes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from ragbound.llm import LLM, GenerationParams, extract_tag, load_prompt
from ragbound.llm.batch import run_parsed

if TYPE_CHECKING:
    from ragbound.tripwires.guard import TripwireVerdict

MODERATION_PROMPT = "moderation-judge"
VERDICTS = ("reject", "allow")


class JudgeResult(BaseModel):
    """The judge's decision on one query; ``verdict`` is None when the reply never parsed."""

    query: str
    verdict: str | None = Field(default=None, description="reject or allow")
    reasoning: str = ""
    model: str = ""
    prompt_id: str = MODERATION_PROMPT
    prompt_version: int = 0
    seconds: float = Field(default=0.0, description="model time, s")
    error: str | None = None

    @property
    def forbidden(self) -> bool | None:
        """The judge's answer as a tripwire verdict's: True for reject, False for allow, None
        on error."""
        return None if self.verdict is None else self.verdict == "reject"


def moderate(
    llm: LLM,
    queries: Sequence[str],
    *,
    params: GenerationParams | None = None,
    concurrency: int = 4,
    progress: bool = False,
) -> list[JudgeResult]:
    """Ask ``llm`` to reject or allow each query (reasoning kept outside the tag).

    A reply without ``<verdict>reject|allow</verdict>`` is retried, then reported with its raw
    text and ``verdict=None``: never guessed.
    """
    prompt = load_prompt(MODERATION_PROMPT)
    params = params or GenerationParams(temperature=0.0, max_tokens=160, seed=0)
    parser = partial(extract_tag, tag="verdict", allowed=VERDICTS)
    results = run_parsed(
        llm,
        prompt,
        [{"query": q} for q in queries],
        parser,
        params=params,
        concurrency=concurrency,
        progress=progress,
    )
    verdicts = []
    for query, result in zip(queries, results, strict=True):
        base = {"query": query, "model": llm.model_id, "prompt_version": prompt.version}
        if result.parsed is None:
            raw = getattr(result.error, "raw", None)
            verdicts.append(JudgeResult(error=f"{result.error} | raw: {raw!r:.300}", **base))
            continue
        text = result.parsed.response.text
        verdicts.append(
            JudgeResult(
                verdict=result.parsed.value,
                reasoning=text.split("<", 1)[0].strip(),
                seconds=result.parsed.response.seconds or 0.0,
                **base,
            )
        )
    return verdicts


def cascade(
    verdicts: Sequence[TripwireVerdict],
    make_llm: Callable[[], LLM],
    *,
    progress: bool = False,
) -> dict[int, JudgeResult]:
    """The judge's answer on each query the tripwires passed, by its place in ``verdicts``
    (forbidden queries are not asked). ``make_llm`` is called only when some query passed:
    a model is loaded only to be asked, and one that cannot load is no error when every query
    was forbidden."""
    passed = [i for i, verdict in enumerate(verdicts) if not verdict.forbidden]
    if not passed:
        return {}
    answers = moderate(make_llm(), [verdicts[i].query for i in passed], progress=progress)
    return dict(zip(passed, answers, strict=True))


def cascade_row(verdict: TripwireVerdict, answer: JudgeResult | None) -> dict[str, Any]:
    """One query's tripwire verdict as JSON and, when the judge was asked (``answer``), its
    answer as ``llm``, which then decides ``forbidden`` (a reply without a verdict lets the
    query pass) and sets ``rule`` to ``"llm"`` when it rejects."""
    row = verdict.model_dump(mode="json")
    if answer is not None:
        row["llm"] = answer.model_dump(mode="json")
        row["forbidden"] = bool(answer.forbidden)
        row["rule"] = "llm" if answer.forbidden else None
    return row
