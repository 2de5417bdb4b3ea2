"""Hostile clients at the HTTP layer of a real ``ragbound serve`` process (a child on
loopback, tokens on, a real MiniLM gate, the gateway in front of a paced upstream TEST
DOUBLE), spoken to over raw sockets (issue 47, items 2 and 3).

A request head too large or with too many fields is 431 and a target too long 414, as soon as
the bytes read pass the limit and before any token is checked, with the server's memory
bounded; a silent connection, a head or a body sent a byte at a time, an idle kept-alive
connection and a client that reads none of its reply are each cut after the timeout set
(1 s here); a connection beyond the cap is 503 and the service answers again once others
close. A client that sends normally and a slow consumer of a long stream are served whole.
The timeouts are 1 s: a test waits for them with a bound of 30 s, never asserting a speed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.serve.raw_http import (
    closed_within,
    connect,
    filler,
    header,
    json_body,
    read_to_end,
    send_streaming,
    status,
    trickle,
)
from tests.serve.server import READ, ChildServer, ThreadServer, auth, served_kb, token_file
from tests.support.paced_upstream import EVENTS, LARGE_CHARS, LARGE_EVENTS, paced_app
from tests.texts import IN_KNOWLEDGE

HUGE = 128 << 20  # the size of the header and URL
MEMORY_BOUND = 48 << 20  # the most the server may grow reading one (was +251 MB)
BOUNDS = [
    "--max-head-bytes", "16KiB", "--max-url-bytes", "2KiB", "--max-headers", "50",
    "--head-timeout", "1", "--body-timeout", "1", "--keep-alive-timeout", "1",
    "--send-timeout", "1",
]  # fmt: skip
GENEROUS_S = 30.0  # the most a test waits for a 1 s timeout
DECIDE = json.dumps({"query": IN_KNOWLEDGE[0]}).encode()


@pytest.fixture(scope="module")
def kb_dir(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return served_kb(minilm_kb_dir, tmp_path_factory.mktemp("slow") / "kb")


@pytest.fixture(scope="module")
def upstream():
    with ThreadServer(paced_app()) as url:
        yield url


@pytest.fixture(scope="module")
def server(kb_dir: Path, upstream: str, tmp_path_factory: pytest.TempPathFactory):
    tokens = token_file(tmp_path_factory.mktemp("tokens"))
    args = [str(kb_dir), "--token-file", str(tokens), "--upstream", f"{upstream}/v1", *BOUNDS]
    child = ChildServer(*args).ready()
    child.lines = child.drain_stderr()  # type: ignore[attr-defined]
    yield child
    child.stop()
    stderr = "".join(child.lines)  # type: ignore[attr-defined]
    assert "Traceback" not in stderr, stderr


def request(path: str, body: bytes = b"", token: str | None = READ, extra: bytes = b"") -> bytes:
    method = b"POST" if body else b"GET"
    head = method + b" " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    if token is not None:
        head += b"Authorization: Bearer " + token.encode() + b"\r\n"
    if body:
        head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    return head + extra + b"\r\n" + body


def rss(server: ChildServer) -> int:
    return psutil.Process(server.process.pid).memory_info().rss


def assert_answers(server: ChildServer) -> None:
    """A client that sends normally is answered (a decision, with the read token)."""
    body = {"query": IN_KNOWLEDGE[0]}
    response = httpx.post(f"{server.url}/v1/decide", json=body, headers=auth(READ))
    assert response.status_code == 200, response.text


def assert_refused(reply: bytes, code: int, limit: str) -> None:
    assert status(reply) == code, reply[:300]
    assert json_body(reply)["limit"] == limit
    assert header(reply, "connection") == "close"


# ------------------------------------------------------------------- request heads
def test_a_huge_header_is_431_before_it_is_read_or_any_token_checked(server) -> None:
    before = rss(server)
    sock = connect(server.port)
    start = b"GET /v1/decide HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Huge: "
    reply, _ = send_streaming(sock, [start, *filler(HUGE), b"\r\n\r\n"])
    sock.close()
    assert_refused(reply, 431, "max_head_bytes")  # no token: a 401 would mean it was read
    assert rss(server) - before < MEMORY_BOUND
    assert_answers(server)


def test_a_huge_url_is_414_before_it_is_read(server) -> None:
    before = rss(server)
    sock = connect(server.port)
    reply, _ = send_streaming(sock, [b"GET /", *filler(HUGE), b" HTTP/1.1\r\nHost: x\r\n\r\n"])
    sock.close()
    assert_refused(reply, 414, "max_url_bytes")
    assert rss(server) - before < MEMORY_BOUND
    assert_answers(server)


def test_many_small_headers_past_the_size_are_431(server) -> None:
    fields = b"".join(b"X-Field-%d: %s\r\n" % (i, b"v" * 400) for i in range(45))  # ~19 KB
    with connect(server.port) as sock:
        sock.sendall(request("/v1/decide", DECIDE, extra=fields))
        assert_refused(read_to_end(sock), 431, "max_head_bytes")


def test_too_many_header_fields_are_431(server) -> None:
    fields = b"".join(b"X-F%d: 1\r\n" % i for i in range(60))
    with connect(server.port) as sock:
        sock.sendall(request("/v1/decide", DECIDE, extra=fields))
        assert_refused(read_to_end(sock), 431, "max_headers")


def test_a_head_within_the_limits_is_served(server) -> None:
    fields = b"".join(b"X-Field-%d: %s\r\n" % (i, b"v" * 200) for i in range(40))  # ~9 KB
    with connect(server.port) as sock:
        sock.sendall(request("/v1/decide?" + "q" * 1500, DECIDE, extra=fields))
        reply = read_until_body(sock)
    assert status(reply) == 200, reply[:300]


def read_until_body(sock) -> bytes:
    """One response with a Content-Length, read whole (the connection stays open)."""
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += sock.recv(65536)
    length = int(header(reply, "content-length") or 0)
    while len(reply.partition(b"\r\n\r\n")[2]) < length:
        reply += sock.recv(65536)
    return reply


# -------------------------------------------------------------------- slow clients
def test_a_silent_connection_is_closed_after_the_head_timeout(server) -> None:
    with connect(server.port) as sock:
        assert closed_within(sock, GENEROUS_S)


def test_a_head_sent_a_byte_at_a_time_is_408(server) -> None:
    with connect(server.port) as sock:
        reply = trickle(sock, request("/v1/decide", DECIDE) * 10, every_s=0.2)
    assert_refused(reply, 408, "head_timeout_s")


def test_a_body_sent_a_byte_at_a_time_is_408(server) -> None:
    whole = request("/v1/decide", DECIDE)
    head, body = whole[: -len(DECIDE)], DECIDE
    with connect(server.port) as sock:
        sock.sendall(head)
        reply = trickle(sock, body * 10, every_s=0.2)
    assert_refused(reply, 408, "body_timeout_s")
    assert_answers(server)


def test_a_body_sent_slowly_but_steadily_is_served(server) -> None:
    """A body taking longer than --body-timeout in all, at more than --body-min-rate."""
    body = json.dumps({"query": IN_KNOWLEDGE[1], "conversation_id": "c" * 3000}).encode()
    whole = request("/v1/decide", body)
    with connect(server.port) as sock:
        sock.sendall(whole[: -len(body)])
        for start in range(0, len(body), 512):  # 512 bytes every 0.2 s: 2.5 KB/s
            sock.sendall(body[start : start + 512])
            time.sleep(0.2)
        reply = read_until_body(sock)
    assert status(reply) in {200, 422}, reply[:300]  # answered, not cut


def test_an_idle_kept_alive_connection_is_closed(server) -> None:
    with connect(server.port) as sock:
        sock.sendall(request("/healthz"))
        assert status(read_until_body(sock)) == 200
        assert closed_within(sock, GENEROUS_S)


# ---------------------------------------------------------------- streamed replies
def chat_body(model: str) -> dict:
    """A streamed chat the gate answers (asked of the paced upstream's ``model``)."""
    question = [{"role": "user", "content": IN_KNOWLEDGE[0]}]
    return {"model": model, "stream": True, "messages": question}


def chat(model: str) -> bytes:
    return request("/v1/chat/completions", json.dumps(chat_body(model)).encode())


def test_a_slow_consumer_of_a_long_stream_gets_all_of_it(server) -> None:
    """The stream lasts longer than every timeout set; the client reads an event at a time,
    pausing between reads."""
    events = []
    url = f"{server.url}/v1/chat/completions"
    with httpx.stream("POST", url, json=chat_body("paced"), headers=auth(READ)) as response:
        assert response.status_code == 200
        assert response.headers["x-ragbound-action"] == "answer"
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line)
                time.sleep(0.3)
    assert events[-1] == "data: [DONE]"
    assert len(events) == EVENTS + 2


def test_a_steady_reader_of_a_large_stream_gets_all_of_it(server) -> None:
    with connect(server.port, receive_buffer=16384) as sock:
        sock.sendall(chat("large"))
        received = bytearray()
        while not received.endswith(b"0\r\n\r\n"):
            data = sock.recv(16384)
            assert data, "cut off"
            received += data
            time.sleep(0.002)
    assert b"data: [DONE]" in received
    assert len(received) > LARGE_EVENTS * LARGE_CHARS


def test_a_client_that_reads_none_of_its_reply_is_cut(server) -> None:
    with connect(server.port, receive_buffer=16384) as sock:
        sock.sendall(chat("large"))
        time.sleep(5)  # reads nothing: the server's buffers fill, then it waits past 1 s
        received = read_to_end(sock)
    assert b"data: [DONE]" not in received
    assert_answers(server)


# ------------------------------------------------------------------ the cap
def test_connections_beyond_the_cap_are_503_and_the_service_recovers(kb_dir: Path) -> None:
    child = ChildServer(str(kb_dir), "--max-connections", "4").ready()
    try:
        time.sleep(0.5)  # the readiness probe's connection is closed
        held = [connect(child.port) for _ in range(4)]
        for sock in held:  # four requests under way (the head timeout is 10 s)
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        with connect(child.port) as extra:
            reply = read_to_end(extra)
        assert_refused(reply, 503, "max_connections")
        assert header(reply, "retry-after") == "1"
        for sock in held:
            sock.close()
        assert_recovers(child)
    finally:
        child.stop()


def assert_recovers(child: ChildServer) -> None:
    """Answered 200 once the held connections are closed (their closing is seen soon after)."""
    deadline = time.monotonic() + GENEROUS_S
    while (code := httpx.get(f"{child.url}/healthz").status_code) == 503:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert code == 200


def test_workers_hold_the_same_limits(kb_dir: Path) -> None:
    args = ["--workers", "2", "--max-head-bytes", "4KiB", "--head-timeout", "1"]
    child = ChildServer(str(kb_dir), *args).ready()
    try:
        for _ in range(6):  # whichever worker takes each
            with connect(child.port) as sock:
                sock.sendall(request("/healthz", extra=b"X-Big: " + b"b" * 5000 + b"\r\n"))
                assert_refused(read_to_end(sock), 431, "max_head_bytes")
        for _ in range(2):
            with connect(child.port) as sock:
                reply = trickle(sock, request("/healthz") * 10, every_s=0.2)
            assert_refused(reply, 408, "head_timeout_s")
    finally:
        child.stop()
