"""The answerability test's LLM judge: does the model read the answer in the retrieved chunks?

Opt-in (``calibrate --answerability judge --llm local|openai:MODEL``; docs/answerability.md):
one LLM call per decision, with the prompt ``answerability-judge``. Its score is the
probability of NO among YES and NO in the first token's distribution (higher = more likely
unanswerable), graded so that calibration questions spread into a null; a backend that gives
no alternatives falls back on the word (0 for YES, 1 for NO, 0.5 for anything else).

Example:
    >>> from ragbound.llm import make_llm  # doctest: +SKIP
    >>> judge = AnswerabilityJudge(make_llm("local"))  # doctest: +SKIP
    >>> judge.scores(["Who wrote it?"], [["The report was written by A. Lee."]])  # doctest: +SKIP
    [0.03]
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from ragbound.errors import InputError
from ragbound.llm import LLM, GenerationParams, load_prompt
from ragbound.llm.batch import Request, arun_batch

PROMPT_ID = "answerability-judge"
DEPTH = 3  # chunks shown: the nearest, where an answer would be; a prompt of ~600 words
ALTERNATIVES = 10  # first-token alternatives read (YES and NO are among them in practice)
CONCURRENCY = 4  # calls in flight for a server (llama.cpp in-process takes one at a time)
WORDS = {"YES": 0.0, "NO": 1.0}
T = TypeVar("T")


class AnswerabilityJudge:
    """Graded YES/NO judgments of "do these passages answer the question" by ``llm``
    (greedy decoding, one token and its alternatives)."""

    def __init__(self, llm: LLM, *, depth: int = DEPTH, concurrency: int = CONCURRENCY):
        if depth < 1:
            raise InputError(f"the judge needs at least one chunk, got depth {depth}")
        self.llm = llm
        self.depth = depth
        self.concurrency = concurrency
        self.prompt = load_prompt(PROMPT_ID)
        self.params = GenerationParams(max_tokens=2, top_logprobs=ALTERNATIVES)
        # each judgment's model time (a cached reply keeps its first call's): what it costs
        self.call_seconds: list[float] = []

    def scores(
        self, questions: Sequence[str], passages: Sequence[Sequence[str]], *, progress: bool = False
    ) -> list[float]:
        """Each question's probability of NO (0-1, higher = more likely unanswerable) given
        its passages (nearest first; the first :attr:`depth` are shown), in order. A failed
        call raises its error (a decision must not pass as answerable by accident)."""
        if len(questions) != len(passages):
            raise InputError(f"{len(questions)} questions but {len(passages)} passage lists")
        requests = [self._request(q, p) for q, p in zip(questions, passages, strict=True)]
        results = _run(
            arun_batch(self.llm, requests, concurrency=self.concurrency, progress=progress)
        )
        out = []
        for result in results:
            if result.error is not None or result.response is None:
                raise result.error or InputError("the judge returned nothing")
            out.append(no_probability(result.response.top_logprobs, result.response.text))
            self.call_seconds.append(result.response.seconds)
        return out

    def _request(self, question: str, passages: Sequence[str]) -> Request:
        shown = "\n\n".join(
            f"[{i + 1}] {' '.join(text.split())}" for i, text in enumerate(passages[: self.depth])
        )
        messages = self.prompt.render(question=question, passages=shown or "(none)")
        return Request(
            messages=messages,
            params=self.params,
            prompt_id=self.prompt.id,
            prompt_version=self.prompt.version,
        )


def no_probability(alternatives: dict[str, float] | None, text: str) -> float:
    """P(NO) / (P(YES) + P(NO)) from a first token's alternatives (token -> log-probability;
    tokens read stripped and upper-cased, so "Yes" and " YES" count as YES), else from the
    reply's first word (YES 0, NO 1, anything else 0.5).

    >>> seen = {"YES": math.log(0.6), "Yes": math.log(0.2), "NO": math.log(0.2)}
    >>> round(no_probability(seen, ""), 3)
    0.2
    >>> no_probability(None, "No, it does not.")
    1.0
    """
    mass = dict.fromkeys(WORDS, 0.0)
    for token, logprob in (alternatives or {}).items():
        word = token.strip().upper()
        if word in mass:
            mass[word] += math.exp(logprob)
    total = mass["YES"] + mass["NO"]
    if total > 0:
        return mass["NO"] / total
    first = "".join(c for c in (text.split() or [""])[0] if c.isalpha()).upper()
    return WORDS.get(first, 0.5)


def _run(work: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to its end from synchronous code, also from a thread whose event loop
    is running (a service's request handler): then on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["out"] = asyncio.run(work)
        except BaseException as exc:  # raised again in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="ragbound-judge")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["out"]
