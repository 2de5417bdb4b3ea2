"""Batched calls: order, bounded concurrency, isolated failures, resume after interruption."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ragbound.errors import InputError
from ragbound.llm import (
    CachedLLM,
    ChatMessage,
    GenerationParams,
    LLMTimeoutError,
    Request,
    ResponseCache,
    arun_batch,
    run_batch,
)
from tests.llm.llm_fakes import ScriptedLLM, echo, user


class Interrupted(BaseException):
    """Stands in for Ctrl-C / a killed process: not an Exception, so the batch stops."""


def requests(n: int) -> list[Request]:
    return [Request(messages=user(f"q{i}"), prompt_id="p", prompt_version=1) for i in range(n)]


def test_results_come_back_in_input_order() -> None:
    fake = ScriptedLLM(responder=echo, delay=0.001)
    results = run_batch(fake, requests(12), concurrency=5)
    assert [r.response.text for r in results if r.response] == [f"answer: q{i}" for i in range(12)]
    assert all(r.ok for r in results) and len(fake.calls) == 12


@pytest.mark.parametrize("limit", [1, 3, 8])
def test_in_flight_calls_never_exceed_the_limit(limit: int) -> None:
    fake = ScriptedLLM(responder=echo, delay=0.005)
    run_batch(fake, requests(20), concurrency=limit)
    assert fake.max_in_flight == limit


def test_a_backend_that_runs_one_call_at_a_time_gets_one_even_through_the_cache(
    tmp_path: Path,
) -> None:
    fake = ScriptedLLM(responder=echo, delay=0.005)
    fake.max_parallel = 1  # as LocalLlama declares: queued threads slow the running call
    results = run_batch(CachedLLM(fake, ResponseCache(tmp_path)), requests(10), concurrency=4)
    assert fake.max_in_flight == 1 and all(r.ok for r in results)


def test_one_failing_item_does_not_abort_the_others() -> None:
    def flaky(messages: list[ChatMessage], params: GenerationParams) -> str | BaseException:
        if messages[-1].content == "q3":
            return LLMTimeoutError("no answer within 1 s")
        if messages[-1].content == "q5":
            return ValueError("backend bug")
        return echo(messages, params)

    results = run_batch(ScriptedLLM(responder=flaky), requests(8), concurrency=3)
    assert [r.ok for r in results] == [True, True, True, False, True, False, True, True]
    assert isinstance(results[3].error, LLMTimeoutError) and results[3].response is None
    assert isinstance(results[5].error, ValueError)


def test_an_interrupted_batch_resumes_without_redoing_finished_calls(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    crashing = ScriptedLLM(["a0", "a1", "a2", "a3", Interrupted()])
    with pytest.raises(Interrupted):
        run_batch(CachedLLM(crashing, cache), requests(10), concurrency=1)
    assert len(cache) == 4

    resumed = ScriptedLLM(responder=echo)
    results = run_batch(CachedLLM(resumed, cache), requests(10), concurrency=1)
    assert [m[-1].content for m, _ in resumed.calls] == [f"q{i}" for i in range(4, 10)]
    assert [r.response.cached for r in results if r.response] == [True] * 4 + [False] * 6
    assert [r.response.text for r in results[:4] if r.response] == ["a0", "a1", "a2", "a3"]


def test_failed_items_are_retried_on_the_next_run_and_a_full_rerun_is_free(
    tmp_path: Path,
) -> None:
    fake = ScriptedLLM(["x0", LLMTimeoutError("t"), "x2", LLMTimeoutError("t")])
    llm = CachedLLM(fake, ResponseCache(tmp_path))
    first = run_batch(llm, requests(4), concurrency=1)
    assert [r.ok for r in first] == [True, False, True, False]

    second_fake = ScriptedLLM(responder=echo)
    second = run_batch(CachedLLM(second_fake, ResponseCache(tmp_path)), requests(4))
    assert sorted(m[-1].content for m, _ in second_fake.calls) == ["q1", "q3"]
    assert all(r.ok for r in second)

    third_fake = ScriptedLLM()
    third = run_batch(CachedLLM(third_fake, ResponseCache(tmp_path)), requests(4), progress=True)
    assert third_fake.calls == [] and all(r.response and r.response.cached for r in third)


def test_bad_concurrency_and_nested_event_loops_are_refused() -> None:
    with pytest.raises(InputError, match="concurrency"):
        run_batch(ScriptedLLM(responder=echo), requests(2), concurrency=0)

    async def nested() -> None:
        run_batch(ScriptedLLM(responder=echo), requests(2))

    with pytest.raises(InputError, match="arun_batch"):
        asyncio.run(nested())


def test_arun_batch_inside_a_running_loop() -> None:
    fake = ScriptedLLM(responder=echo)
    results = asyncio.run(arun_batch(fake, requests(3), concurrency=2))
    assert [r.response.text for r in results if r.response] == [
        "answer: q0",
        "answer: q1",
        "answer: q2",
    ]


def test_parsed_batches_retry_bad_replies_and_report_what_never_parses() -> None:
    from ragbound.llm import ParseError, load_prompt, parse_json_object, run_parsed

    prompt = load_prompt("relevance-judge")
    fake = ScriptedLLM(['{"score": 0.5}', "no json", '{"score": 0.25}', "x", "y", "z"])
    variables = [{"query": "q1", "context": "c"}, {"query": "q2", "context": "c"}]
    results = run_parsed(fake, prompt, variables, parse_json_object, retries=2, concurrency=1)
    assert results[0].ok and results[0].parsed is not None
    assert results[0].parsed.value == {"score": 0.5} and results[0].parsed.attempts == 1
    assert results[1].parsed is not None and results[1].parsed.attempts == 2
    assert results[1].parsed.value == {"score": 0.25}
    lost = run_parsed(fake, prompt, variables[:1], parse_json_object, retries=2)
    assert not lost[0].ok and isinstance(lost[0].error, ParseError)
    assert lost[0].error.raw == "z"  # the last raw reply is kept for the report
    # retries change the seed: greedy decoding would otherwise repeat the same reply
    assert [params.seed for _, params in fake.calls[3:]] == [0, 1, 2]


def test_run_parsed_refuses_to_block_inside_an_event_loop() -> None:
    from ragbound.llm import load_prompt, parse_json_object, run_parsed

    async def inside() -> None:
        run_parsed(ScriptedLLM(), load_prompt("relevance-judge"), [], parse_json_object)

    with pytest.raises(InputError, match="event loop"):
        asyncio.run(inside())
