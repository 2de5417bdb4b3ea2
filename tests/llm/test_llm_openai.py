"""The OpenAI-compatible client against a real scripted HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ragbound.llm import (
    ChatMessage,
    GenerationParams,
    LLMError,
    LLMResponseError,
    LLMTimeoutError,
    LLMUnavailableError,
    Request,
    make_llm,
    run_batch,
)
from ragbound.llm.openai_backend import MAX_RETRY_AFTER, OpenAIChat, parse_retry_after
from tests.scripted_server import Reply, ScriptedServer, serving
from tests.support.ports import free_port

MESSAGES = [
    ChatMessage(role="system", content="Answer briefly."),
    ChatMessage(role="user", content="Capital of France?"),
]


def completion(text: str = "Paris") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "tiny-served",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
    }


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with serving(lambda request: completion()) as srv:
        yield srv


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "RAGBOUND_LLM_BASE_URL",
        "OPENAI_BASE_URL",
        "RAGBOUND_LLM_MODEL",
        "RAGBOUND_LLM_API_KEY",
        "OPENAI_API_KEY",
    ):
        monkeypatch.delenv(name, raising=False)


def client(server: ScriptedServer, **kwargs: Any) -> OpenAIChat:
    options: dict[str, Any] = {"model": "tiny", "backoff": 0.01, "timeout": 5.0} | kwargs
    return OpenAIChat(base_url=server.base_url, **options)


def test_a_valid_completion_and_the_request_it_sent(server: ScriptedServer) -> None:
    llm = client(server, api_key="sk-test")
    params = GenerationParams(temperature=0.3, max_tokens=20, seed=7, top_p=0.9, stop=["\n"])
    reply = llm.complete(MESSAGES, params)
    assert (reply.text, reply.model) == ("Paris", "tiny-served")
    assert (reply.prompt_tokens, reply.completion_tokens) == (12, 1)
    assert reply.seconds > 0 and not reply.cached
    sent = server.seen[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["Authorization"] == "Bearer sk-test"
    assert sent["json"] == {
        "model": "tiny",
        "messages": [m.model_dump() for m in MESSAGES],
        "temperature": 0.3,
        "max_tokens": 20,
        "seed": 7,
        "top_p": 0.9,
        "stop": ["\n"],
    }
    assert llm.model_id == "openai:tiny"


def test_no_seed_no_stop_and_no_key_are_left_out(server: ScriptedServer) -> None:
    client(server).complete(MESSAGES, GenerationParams(seed=None))
    sent = server.seen[0]
    assert "seed" not in sent["json"] and "stop" not in sent["json"]
    assert "Authorization" not in sent["headers"]


def test_top_logprobs_are_asked_for_and_read(server: ScriptedServer) -> None:
    body = completion("YES")
    alternatives = [
        {"token": "YES", "logprob": -0.1},
        {"token": "NO", "logprob": -2.5},
        {"token": "NO", "logprob": -9.0},  # repeated: the likelier entry is kept
        {"token": "x", "logprob": None},  # not a number: left out
    ]
    body["choices"][0]["logprobs"] = {"content": [{"token": "YES", "top_logprobs": alternatives}]}
    server.script = [Reply(body=body)]
    reply = client(server).complete(MESSAGES, GenerationParams(max_tokens=1, top_logprobs=5))
    assert reply.top_logprobs == {"YES": -0.1, "NO": -2.5}
    sent = server.seen[0]["json"]
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 5)
    plain = client(server).complete(MESSAGES)
    assert plain.top_logprobs is None
    assert "logprobs" not in server.seen[1]["json"]


def test_a_500_is_retried(server: ScriptedServer) -> None:
    server.script = [Reply(500, {"error": "overloaded"}), Reply(body=completion("Lyon"))]
    assert client(server).complete(MESSAGES).text == "Lyon"
    assert len(server.seen) == 2


def test_a_429_waits_for_retry_after(server: ScriptedServer) -> None:
    server.script = [Reply(429, {"error": "slow down"}, {"Retry-After": "1"})]
    start = time.perf_counter()
    assert client(server).complete(MESSAGES).text == "Paris"
    assert time.perf_counter() - start >= 0.95
    assert len(server.seen) == 2


def test_persistent_5xx_gives_up_after_the_retries(server: ScriptedServer) -> None:
    server.script = [Reply(503, {"error": "down"}) for _ in range(5)]
    with pytest.raises(LLMResponseError, match=r"HTTP 503 .* after 3 attempts: .*down"):
        client(server, max_retries=2).complete(MESSAGES)
    assert len(server.seen) == 3


def test_other_4xx_are_not_retried(server: ScriptedServer) -> None:
    server.script = [Reply(401, {"error": "bad key"})]
    with pytest.raises(LLMResponseError, match=r"HTTP 401 .*bad key"):
        client(server).complete(MESSAGES)
    assert len(server.seen) == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>Bad Gateway</html>", r"not JSON: '<html>Bad Gateway</html>'"),
        ({"object": "error"}, r"has no choices\[0\]\.message\.content: \{\"object\": \"error\"\}"),
        ({"choices": []}, r"has no choices"),
        ({"choices": [{"message": {"content": None}}]}, r"not a string"),
    ],
)
def test_malformed_replies_show_a_snippet(server: ScriptedServer, body: Any, message: str) -> None:
    server.script = [Reply(200, body)]
    with pytest.raises(LLMResponseError, match=message):
        client(server).complete(MESSAGES)
    assert len(server.seen) == 1


def test_a_slow_reply_times_out(server: ScriptedServer) -> None:
    server.script = [Reply(delay=1.5), Reply(delay=1.5)]
    start = time.perf_counter()
    with pytest.raises(LLMTimeoutError, match=r"within 0.2 s \(2 attempts\)"):
        client(server, timeout=0.2, max_retries=1).complete(MESSAGES)
    assert time.perf_counter() - start < 1.2


def test_an_unreachable_endpoint_fails_fast_and_clearly() -> None:
    port = free_port()
    llm = OpenAIChat(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=2, backoff=0.01)
    start = time.perf_counter()
    with pytest.raises(LLMUnavailableError, match=rf"cannot reach http://127.0.0.1:{port}/v1"):
        llm.complete(MESSAGES)
    with pytest.raises(LLMUnavailableError, match=r"\(3 attempts\)"):
        asyncio.run(llm.acomplete(MESSAGES))
    assert time.perf_counter() - start < 3


def test_async_calls_retry_too(server: ScriptedServer) -> None:
    server.script = [Reply(502, {"error": "gateway"})]
    reply = asyncio.run(client(server).acomplete(MESSAGES, GenerationParams(seed=3)))
    assert reply.text == "Paris" and len(server.seen) == 2
    assert server.seen[-1]["json"]["seed"] == 3


def test_a_batch_against_the_server(server: ScriptedServer) -> None:
    server.script = [Reply(delay=0.05) for _ in range(6)]
    requests = [Request(messages=MESSAGES, params=GenerationParams(seed=i)) for i in range(6)]
    results = run_batch(client(server), requests, concurrency=3)
    assert all(r.ok for r in results)
    assert sorted(s["json"]["seed"] for s in server.seen) == list(range(6))


def test_configuration_comes_from_the_environment(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://ignored.invalid/v1")
    monkeypatch.setenv("RAGBOUND_LLM_BASE_URL", server.base_url + "/")
    monkeypatch.setenv("RAGBOUND_LLM_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    llm = make_llm("openai", backoff=0.01)
    assert isinstance(llm, OpenAIChat) and llm.model_id == "openai:env-model"
    llm.complete(MESSAGES)
    assert server.seen[0]["json"]["model"] == "env-model"
    assert server.seen[0]["headers"]["Authorization"] == "Bearer sk-env"
    assert make_llm("openai:other").model_id == "openai:other"


def test_missing_configuration_names_the_option_and_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(
        LLMError, match=r"needs base_url: .*RAGBOUND_LLM_BASE_URL or OPENAI_BASE_URL"
    ):
        OpenAIChat(model="m")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    with pytest.raises(LLMError, match=r"needs model: .*RAGBOUND_LLM_MODEL"):
        make_llm("openai")
    with pytest.raises(LLMError, match="unknown LLM spec 'gpt4'"):
        make_llm("gpt4")


def test_parse_retry_after() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("100000") == MAX_RETRY_AFTER
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= (parse_retry_after(later) or 0) <= 30
