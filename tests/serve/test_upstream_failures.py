"""An upstream that dies or stalls in the middle of its reply, behind a real ``ragbound serve``.

The gateway is a child process (``--upstream-timeout 1``); the upstream is the scripted
server of :mod:`tests.scripted_server`, a TEST DOUBLE on loopback that sends some chunks and
then closes the connection, resets it or goes silent. The caller always gets an error it can
read (a 502 or 504 JSON error; a chat stream that ends with an OpenAI-style error event and
``[DONE]``; a Responses stream that ends with ``response.failed``), and the service one
``error:`` line on stderr, never a traceback.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.scripted_server import Reply, ScriptedServer, serving
from tests.serve.server import ChildServer, ask, served_kb
from tests.texts import IN_KNOWLEDGE

QUERY = IN_KNOWLEDGE[0]  # answered: it goes upstream
CUT = "error: a streamed reply was cut"
COMPLETION = {
    "id": "chatcmpl-scripted",
    "object": "chat.completion",
    "created": 1,
    "model": "scripted",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Honey."}, "finish_reason": "stop"}
    ],
}


def chunk(text: str) -> bytes:
    """One server-sent chat.completion.chunk event holding ``text``."""
    delta = {"index": 0, "delta": {"content": text}, "finish_reason": None}
    payload = {"id": "c", "object": "chat.completion.chunk", "created": 1, "choices": [delta]}
    return f"data: {json.dumps(payload)}\n\n".encode()


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedServer]:
    with serving(lambda _: COMPLETION) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(
    minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory, upstream: ScriptedServer
) -> Iterator[tuple[ChildServer, list[str]]]:
    kb = served_kb(minilm_kb_dir, tmp_path_factory.mktemp("dying-upstream") / "kb")
    args = ("--upstream", upstream.base_url, "--upstream-timeout", "1")
    server = ChildServer(str(kb), *args).ready()
    lines = server.drain_stderr()
    yield server, lines
    server.kill()
    assert not any("Traceback" in line for line in lines), "".join(lines)


@pytest.fixture
def url(gateway: tuple[ChildServer, list[str]]) -> str:
    return gateway[0].url


@pytest.fixture
def said(gateway: tuple[ChildServer, list[str]]) -> Callable[[], list[str]]:
    """The service's stderr lines since the test began."""
    lines = gateway[1]
    start = len(lines)
    return lambda: lines[start:]


def wait_for_line(said: Callable[[], list[str]], fragment: str) -> list[str]:
    """The stderr lines once one holds ``fragment`` (read by a thread: it may lag a little)."""
    deadline = time.monotonic() + 30
    while not any(fragment in line for line in said()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return said()


def streamed(url: str, path: str, body: dict) -> list[str]:
    """The data of each server-sent event of a streamed reply, read whole (httpx raises on a
    truncated body)."""
    body = {**body, "stream": True}
    with httpx.stream("POST", f"{url}{path}", json=body, timeout=60) as reply:
        assert reply.status_code == 200, reply.read()
        text = b"".join(reply.iter_bytes()).decode()
    assert text.endswith("\n\n"), "the last event is not ended"
    events = [event for event in text.split("\n\n") if event.strip()]
    return [
        "\n".join(line[5:].strip() for line in event.splitlines() if line.startswith("data:"))
        for event in events
    ]


@pytest.mark.parametrize(
    ("then", "code", "fragment"),
    [
        ("close", "upstream_error", "broke off its reply"),
        ("reset", "upstream_error", "broke off its reply"),
        ("stall", "upstream_timeout", "timed out mid-reply (1 s)"),
        ("done", "upstream_error", "without data: [DONE]"),  # a whole body, but no [DONE]
    ],
)
def test_a_chat_stream_the_upstream_breaks_ends_with_an_error_event_and_done(
    url: str, upstream: ScriptedServer, said, then: str, code: str, fragment: str
) -> None:
    upstream.script = [Reply(stream=[chunk("Bees"), chunk(" make")], then=then)]  # type: ignore[arg-type]
    data = streamed(url, "/v1/chat/completions", {"messages": ask(QUERY)})
    assert data[-1] == "[DONE]"
    error = json.loads(data[-2])["error"]
    assert error["code"] == code and error["type"] == "server_error"
    assert fragment in error["message"]
    relayed = [json.loads(item) for item in data[:-2]]
    assert relayed[0]["ragbound"]["action"] == "answer"
    assert "".join(c["choices"][0]["delta"]["content"] for c in relayed) == "Bees make"
    lines = wait_for_line(said, CUT)
    (cut,) = [line for line in lines if CUT in line]  # one line
    assert fragment in cut and "Traceback" not in "".join(lines)


def test_an_event_cut_mid_way_is_ended_before_the_error_event(url, upstream, said) -> None:
    upstream.script = [Reply(stream=[chunk("Bees")[:-1]], then="reset")]  # no blank line
    data = streamed(url, "/v1/chat/completions", {"messages": ask(QUERY)})
    assert data[-1] == "[DONE]" and "error" in json.loads(data[-2])
    assert "Traceback" not in "".join(wait_for_line(said, CUT))


def test_the_official_client_raises_the_error_of_a_broken_stream(url, upstream) -> None:
    upstream.script = [Reply(stream=[chunk("Bees")], then="reset")]
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
    stream = client.chat.completions.create(model="m", messages=ask(QUERY), stream=True)
    with pytest.raises(openai.APIError, match="broke off its reply"):
        list(stream)


@pytest.mark.parametrize("then", ["close", "stall"])
def test_a_responses_stream_the_upstream_breaks_ends_with_response_failed(
    url: str, upstream: ScriptedServer, said, then: str
) -> None:
    upstream.script = [Reply(stream=[chunk("Bees")], then=then)]  # type: ignore[arg-type]
    events = [json.loads(item) for item in streamed(url, "/v1/responses", {"input": QUERY})]
    assert events[0]["type"] == "response.created"
    assert any(e["type"] == "response.output_text.delta" and e["delta"] == "Bees" for e in events)
    failed = events[-1]
    assert failed["type"] == "response.failed"
    assert failed["response"]["status"] == "failed"
    assert "upstream server" in failed["response"]["error"]["message"]
    numbers = [e["sequence_number"] for e in events]
    assert numbers == list(range(len(events)))
    assert "Traceback" not in "".join(wait_for_line(said, CUT))


@pytest.mark.parametrize(
    ("reply", "status", "fragment"),
    [
        (Reply(then="close"), 502, "broke off its reply"),
        (Reply(then="reset"), 502, "broke off its reply"),
        (Reply(then="stall"), 504, "timed out mid-reply"),
        (Reply(delay=5.0), 504, "timed out (1 s)"),  # silent before its headers
    ],
)
def test_a_reply_the_upstream_breaks_is_a_json_error(
    url: str, upstream: ScriptedServer, said, reply: Reply, status: int, fragment: str
) -> None:
    upstream.script = [reply]
    answer = httpx.post(f"{url}/v1/chat/completions", json={"messages": ask(QUERY)}, timeout=60)
    assert answer.status_code == status
    assert fragment in answer.json()["error"]
    assert answer.headers["x-ragbound-action"] == "answer"
    assert httpx.get(f"{url}/healthz").status_code == 200
    assert "Traceback" not in "".join(said())


def test_a_stream_silent_before_its_headers_is_a_504(url, upstream) -> None:
    upstream.script = [Reply(delay=5.0, stream=[chunk("late")])]
    body = {"messages": ask(QUERY), "stream": True}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 504 and "timed out" in answer.json()["error"]


def test_after_a_broken_reply_the_next_one_is_relayed_whole(url, upstream) -> None:
    upstream.script = [Reply(then="reset"), Reply(stream=[chunk("Honey"), b"data: [DONE]\n\n"])]
    first = httpx.post(f"{url}/v1/chat/completions", json={"messages": ask(QUERY)}, timeout=60)
    assert first.status_code == 502
    data = streamed(url, "/v1/chat/completions", {"messages": ask(QUERY)})
    assert data[-1] == "[DONE]" and json.loads(data[0])["choices"][0]["delta"]["content"] == "Honey"
