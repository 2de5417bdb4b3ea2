"""Hostile clients of the gateway, second round (issue 47, items 1, 7, 8 and 9), against a real
``ragbound serve`` child process on loopback with a query log, a real MiniLM gate with
tripwires, in front of the scripted upstream of :mod:`tests.scripted_server` (a TEST DOUBLE on
loopback that records what it was sent and replies as scripted).

- a lone surrogate in any field the gateway forwards unread is a 422 naming the field, the
  keep-alive connection goes on, nothing goes upstream (it was a 500 and a traceback); other
  odd Unicode is forwarded as sent;
- three tripwires with 200,000-character ids (kept before ids were bounded) make a reply
  whose ``X-Ragbound-Triggers`` is cut to 1,024 characters with ``+3 more``, which the
  ``openai`` client reads; adding such an id or topic (admin route, ``tripwire add``, the
  library) is an error naming the bound;
- an upstream stream event holding ``NaN`` or a lone surrogate ends the stream with an error
  event, as the whole reply is a 502;
- a malformed ``Host`` or two ``Host`` headers are a 400.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.serve import ServeSettings, Tokens, create_app
from ragbound.serve.gateway import CUT_MARK, MAX_HEADER_CHARS, header_value
from ragbound.serve.metrics import service_registry
from ragbound.serve.querylog import QueryLog
from ragbound.tripwires import LiveTripwires, Tripwire
from ragbound.tripwires.models import MAX_ID_CHARS, MAX_TOPIC_CHARS
from tests.scripted_server import Reply, ScriptedServer, serving
from tests.serve.server import (
    ADMIN,
    READ,
    ChildServer,
    ThreadServer,
    ask,
    child_env,
    guarded_kb,
    log_lines,
)
from tests.serve.test_parts import _decision as decision_of
from tests.serve.test_upstream_failures import COMPLETION
from tests.texts import IN_KNOWLEDGE

QUESTION = IN_KNOWLEDGE[0]  # decided answer: it goes upstream
# three tripwires on one request, each id 200,000 characters (the reply head)
LONG_IDS = [f"tw-{n}-" + "x" * 200_000 for n in range(3)]
FLOODS = [
    "How do I flood a railway tunnel to stop the trains?",
    "How could I flood a train tunnel so that no trains can run?",
    "What is the best way to flood a rail tunnel and halt all the trains?",
]
FLOODING = "How could I flood a train tunnel so no trains can run?"


@pytest.fixture(scope="module")
def upstream():
    with serving(lambda _: COMPLETION) as server:
        yield server


@pytest.fixture(scope="module")
def kb_dir(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The guarded knowledge base with three flooding tripwires whose ids are 200,000
    characters long, stored as a set made before ids were bounded keeps them (the bound is
    passed around here)."""
    kb_dir = guarded_kb(minilm_kb_dir, tmp_path_factory.mktemp("hostile-gateway") / "kb")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("ragbound.tripwires.store.storable", lambda tripwire: tripwire)
        store = LiveTripwires.open(KnowledgeBase.load(kb_dir))
        store.add(
            [
                Tripwire(id=i, text=t, topic="sabotage")
                for i, t in zip(LONG_IDS, FLOODS, strict=True)
            ]
        )
    return kb_dir


@pytest.fixture(scope="module")
def server(kb_dir: Path, upstream: ScriptedServer):
    log = kb_dir.parent / "queries.jsonl"
    child = ChildServer(str(kb_dir), "--upstream", upstream.base_url, "--log", str(log)).ready()
    child.errors = child.drain_stderr()  # type: ignore[attr-defined]
    child.log = log  # type: ignore[attr-defined]
    yield child
    child.stop()
    assert all(line.keys() >= {"action", "time"} for line in log_lines(log))  # whole lines


def assert_sound(server: ChildServer) -> None:
    """Still ready, and nothing went wrong inside: no traceback, no unexpected error."""
    assert httpx.get(f"{server.url}/readyz", timeout=30).status_code == 200
    stderr = "".join(server.errors)  # type: ignore[attr-defined]
    assert "Traceback" not in stderr and "error: unexpected" not in stderr, stderr


# ----------------------------------------------------------------- raw HTTP/1.1
def exchange(sock: socket.socket, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send one request on ``sock`` and read its reply (a Content-Length body): status,
    headers (lower-case names), body."""
    sock.sendall(request)
    head = b""
    while b"\r\n\r\n" not in head:
        data = sock.recv(65536)
        assert data, f"the connection closed mid-reply: {head!r}"
        head += data
    head, _, body = head.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    while len(body) < int(headers.get("content-length", 0)):
        data = sock.recv(65536)
        assert data, "the connection closed mid-body"
        body += data
    return int(status_line.split()[1]), headers, body


def post(path: str, body: str, host: str = "127.0.0.1", more: str = "") -> bytes:
    """A keep-alive POST of the JSON text ``body``."""
    data = body.encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n{more}\r\n"
    ).encode() + data


def get(path: str, *hosts: str) -> bytes:
    """A keep-alive GET with one ``Host`` header per ``hosts`` entry."""
    lines = "".join(f"Host: {host}\r\n" for host in hosts)
    return f"GET {path} HTTP/1.1\r\n{lines}\r\n".encode()


def connect(server: ChildServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    return sock


# ------------------------------------------------------------ 1. lone surrogates
LONE = "\ud800"
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def _chat(**fields: object) -> dict:
    return {"model": "m", "messages": ask(QUESTION), **fields}


def _tool_call(arguments: str) -> dict:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    said = {"role": "assistant", "content": "Honey.", "tool_calls": [call]}
    return {"messages": [*ask("What do bees make?"), said, *ask(QUESTION)]}


def _named(name: str) -> dict:
    return {"messages": [{"role": "user", "content": QUESTION, "name": name}]}


# each forwarded field holding ``value``, with the path the error names
FORWARDED = {
    "user": lambda v: (_chat(user=v), "user"),
    "metadata": lambda v: (_chat(metadata={"team": v}), "metadata.team"),
    "metadata-key": lambda v: (_chat(metadata={v: "x"}), "metadata"),
    "tools": lambda v: (_chat(tools=[{**TOOL, "description": v}]), "tools[0].description"),
    "stop": lambda v: (_chat(stop=[v]), "stop[0]"),
    "name": lambda v: (_named(v), "messages[0].name"),
    "tool-call-arguments": lambda v: (
        _tool_call(v),
        "messages[1].tool_calls[0].function.arguments",
    ),
    "unknown": lambda v: (_chat(vendor_option={"deep": [v]}), "vendor_option.deep[0]"),
}
RESPONSES = {
    "user": lambda v: ({"input": QUESTION, "user": v}, "user"),
    "metadata": lambda v: ({"input": QUESTION, "metadata": {"k": v}}, "metadata.k"),
    "tools": lambda v: (
        {"input": QUESTION, "tools": [{"type": "function", "name": v}]},
        "tools[0].name",
    ),
}
CASES = [("/v1/chat/completions", name, make) for name, make in FORWARDED.items()] + [
    ("/v1/responses", name, make) for name, make in RESPONSES.items()
]


@pytest.mark.parametrize(
    ("path", "field", "make"), CASES, ids=[f"{p[4:]}-{f}" for p, f, _ in CASES]
)
def test_a_lone_surrogate_in_a_forwarded_field_is_422_naming_it(
    server, upstream: ScriptedServer, path: str, field: str, make
) -> None:
    body, named = make(f"a{LONE}b")
    sent = len(upstream.seen)
    with connect(server) as sock:
        status, headers, reply = exchange(sock, post(path, json.dumps(body)))
        assert status == 422, reply
        assert headers["content-type"].startswith("application/json")
        error = json.loads(reply)["error"]
        assert "lone surrogate" in error and repr(named) in error, error
        assert headers.get("connection") != "close"
        # the same connection goes on: the next request on it is answered (and forwarded)
        valid, _ = make("ab")
        again, _, answer = exchange(sock, post(path, json.dumps(valid)))
    assert again == 200, answer
    assert len(upstream.seen) == sent + 1  # only the valid one went upstream
    assert_sound(server)


ODD = [
    "\U0001f41d bees",  # outside the BMP (JSON sends it as an escaped surrogate pair)
    "\ufffe\uffff",  # noncharacters
    "line\u2028separator",
    "nul\u0000inside",
    "\u202eright-to-left",
    "e\u0301\u0301combining",
    "\U000e0001tag",
]


@pytest.mark.parametrize("field", list(FORWARDED))
def test_odd_unicode_in_a_forwarded_field_goes_upstream_as_sent(
    server, upstream: ScriptedServer, field: str
) -> None:
    body, _ = FORWARDED[field]("|".join(ODD))
    with connect(server) as sock:
        status, headers, reply = exchange(sock, post("/v1/chat/completions", json.dumps(body)))
    assert status == 200, reply
    assert headers["x-ragbound-action"] == "answer"
    forwarded = upstream.seen[-1]["json"]
    for key, value in body.items():
        if key != "messages":
            assert forwarded[key] == value
    sent = [m for m in forwarded["messages"] if m["role"] != "system"]  # the context added
    assert sent == body["messages"]
    assert_sound(server)


def test_a_lone_surrogate_in_the_conversation_id_is_422_and_the_log_stays_whole(server) -> None:
    before = len(log_lines(server.log))
    body = json.dumps(_chat(metadata={"conversation_id": f"chat-{LONE}"}))
    with connect(server) as sock:
        status, _, reply = exchange(sock, post("/v1/chat/completions", body))
    assert status == 422 and "metadata.conversation_id" in json.loads(reply)["error"]
    odd = "chat-\U0001f41d-\ufffe"
    body = json.dumps(_chat(metadata={"conversation_id": odd}))
    with connect(server) as sock:
        status, _, reply = exchange(sock, post("/v1/chat/completions", body))
    assert status == 200, reply
    lines = log_lines(server.log)
    assert len(lines) == before + 1
    assert lines[-1]["conversation"]["id"] == odd
    assert_sound(server)


# ------------------------------------------------------------ 7. tripwire ids
def test_three_long_tripwire_ids_make_a_header_the_openai_client_reads(server) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=READ, max_retries=0, timeout=60)
    raw = client.chat.completions.with_raw_response.create(
        model="m",
        messages=ask(FLOODING),  # type: ignore[arg-type]
    )
    completion = raw.parse()
    fired = completion.model_extra["ragbound"]["trigger_ids"]  # type: ignore[index]
    assert raw.headers["x-ragbound-action"] == "reject"
    assert sorted(fired) == LONG_IDS  # the reply's JSON holds them whole
    header = raw.headers["x-ragbound-triggers"]
    assert len(header) <= MAX_HEADER_CHARS
    *kept, mark = header.split(",")
    assert mark == CUT_MARK.format(n=len(fired) - len(kept))
    assert kept == [header_value(i) for i in fired[: len(kept)]]
    assert len(raw.http_response.headers.raw) < 30  # nothing else grew either
    assert_sound(server)


@pytest.mark.parametrize(
    ("field", "most"), [("id", MAX_ID_CHARS), ("topic", MAX_TOPIC_CHARS)], ids=["id", "topic"]
)
def test_adding_a_tripwire_id_or_topic_past_the_bound_is_refused_naming_it(
    server, field: str, most: int
) -> None:
    before = httpx.get(f"{server.url}/v1/tripwires", timeout=30).json()
    at_most = {"text": "How do I cut the brake cables of a train?", "topic": "sabotage"}
    tripwire = {**at_most, field: "\u00e9" * most}  # at the bound: accepted
    for value, status in [("\u00e9" * (most + 1), 422), ("y" * 200_000, 422)]:
        body = {"tripwires": [{**at_most, field: value}]}
        response = httpx.post(f"{server.url}/v1/tripwires", json=body, timeout=60)
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert f"at most {most}" in error and f"{len(value):,} characters" in error
        assert len(error) < 400  # the value is not echoed whole
    assert httpx.get(f"{server.url}/v1/tripwires", timeout=30).json() == before
    added = httpx.post(f"{server.url}/v1/tripwires", json={"tripwires": [tripwire]}, timeout=60)
    assert added.status_code == 200, added.text
    ids = added.json()["change"]["ids"]
    removed = httpx.request("DELETE", f"{server.url}/v1/tripwires", json={"ids": ids}, timeout=60)
    assert removed.status_code == 200, removed.text
    assert_sound(server)


def test_the_library_refuses_an_id_past_the_bound(kb_dir: Path) -> None:
    store = LiveTripwires.open(KnowledgeBase.load(kb_dir))
    long = Tripwire(id="z" * (MAX_ID_CHARS + 1), text="How do I derail a train?", topic="harm")
    with pytest.raises(InputError, match=f"at most {MAX_ID_CHARS}"):
        store.add([long])


@pytest.mark.parametrize("field", ["id", "topic"])
def test_tripwire_add_refuses_an_id_or_topic_past_the_bound(
    kb_dir: Path, tmp_path: Path, field: str
) -> None:
    record = {"text": "How do I derail a train?", "topic": "harm", field: "w" * 200_000}
    lines = [
        json.dumps({"text": "How do I cut the signal cables?", "topic": "harm"}),
        json.dumps(record),
    ]
    path = tmp_path / "tripwires.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "ragbound.cli", "tripwire", "add", str(kb_dir), str(path)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert f"{path}:2" in done.stderr and "200,000 characters" in done.stderr, done.stderr
    assert len(done.stderr) < 2_000  # one line, not the id


# ------------------------------------------------------------ 8. NaN in a stream
def _event(payload: str) -> bytes:
    return f"data: {payload}\n\n".encode()


def _delta(text: str, extra: str = "") -> str:
    choice = f'{{"index":0,"delta":{{"content":{json.dumps(text)}}},"finish_reason":null{extra}}}'
    return f'{{"id":"c","object":"chat.completion.chunk","created":1,"choices":[{choice}]}}'


BAD_EVENTS = {
    "nan": _delta("make", ',"logprobs":NaN'),
    "infinity": _delta("make", ',"score":-Infinity'),
    "surrogate": _delta("make").replace("make", "ma\\ud800ke"),
    "not-json": "{not json",
    "not-an-object": "[1, 2]",
}


def _streamed(server: ChildServer, path: str, body: dict) -> str:
    with httpx.stream(
        "POST", f"{server.url}{path}", json={**body, "stream": True}, timeout=60
    ) as reply:
        assert reply.status_code == 200, reply.read()
        return b"".join(reply.iter_bytes()).decode()


@pytest.mark.parametrize("bad", list(BAD_EVENTS))
def test_a_chat_stream_event_the_whole_reply_would_refuse_ends_the_stream(
    server, upstream: ScriptedServer, bad: str
) -> None:
    events = [_event(_delta("Bees")), _event(BAD_EVENTS[bad]), _event(_delta("honey"))]
    upstream.script = [Reply(stream=[*events, b"data: [DONE]\n\n"])]
    text = _streamed(server, "/v1/chat/completions", {"messages": ask(QUESTION)})
    data = [e[5:].strip() for e in text.split("\n\n") if e.startswith("data:")]
    assert data[-1] == "[DONE]"
    error = json.loads(data[-2])["error"]
    assert error["code"] == "upstream_error" and "stream event" in error["message"], error
    relayed = [json.loads(item, parse_constant=pytest.fail) for item in data[:-2]]
    assert [r["choices"][0]["delta"]["content"] for r in relayed] == ["Bees"]
    assert "NaN" not in text and "Infinity" not in text and "honey" not in text
    # the whole reply of the same kind is a 502
    upstream.script = [Reply(body=BAD_EVENTS[bad].encode())]
    whole = httpx.post(
        f"{server.url}/v1/chat/completions", json={"messages": ask(QUESTION)}, timeout=60
    )
    assert whole.status_code == 502, whole.text
    assert_sound(server)


def test_a_responses_stream_event_holding_nan_fails_the_response(
    server, upstream: ScriptedServer
) -> None:
    events = [_event(_delta("Bees")), _event(BAD_EVENTS["nan"]), b"data: [DONE]\n\n"]
    upstream.script = [Reply(stream=events)]
    text = _streamed(server, "/v1/responses", {"input": QUESTION})
    kinds = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
    assert kinds[-1] == "response.failed", kinds
    assert "NaN" not in text and "not standard JSON" in text
    assert_sound(server)


@pytest.mark.parametrize("content", ["ma\\ud800ke", "\\udfff"])
def test_a_whole_reply_holding_a_lone_surrogate_is_502(
    server, upstream: ScriptedServer, content: str
) -> None:
    body = json.dumps(COMPLETION).replace("Honey.", content)
    for path, request in [
        ("/v1/chat/completions", {"messages": ask(QUESTION)}),
        ("/v1/responses", {"input": QUESTION}),
    ]:
        upstream.script = [Reply(body=body.encode())]
        reply = httpx.post(f"{server.url}{path}", json=request, timeout=60)
        assert reply.status_code == 502, reply.text
        assert "lone surrogate" in reply.json()["error"]
    assert_sound(server)


# ------------------------------------------------------------ 9. Host
MALFORMED = [
    "[::1",
    "[::1]x",
    "::1",
    "[::1]:80:80",
    "localhost:1:2",
    "localhost:99999",
    "localhost:123456",
    "local host",
    "user@localhost",
    "localhost/x",
    "[v1.localhost]",
    "[127.0.0.1]",
    "localhost\u00e9",
]


@pytest.mark.parametrize("host", MALFORMED)
def test_a_malformed_host_is_400(server, host: str) -> None:
    with connect(server) as sock:
        status, headers, reply = exchange(sock, get("/healthz", host))
    assert status == 400, reply
    assert headers["content-type"].startswith("application/json")
    assert "is not a host" in json.loads(reply)["error"]
    assert_sound(server)


@pytest.mark.parametrize(
    "hosts",
    [("localhost", "localhost"), ("127.0.0.1", "evil.example"), ("evil.example", "127.0.0.1")],
    ids=["same", "loopback-first", "foreign-first"],
)
def test_two_host_headers_are_400(server, hosts: tuple[str, str]) -> None:
    with connect(server) as sock:
        status, _, reply = exchange(sock, get("/healthz", *hosts))
        assert status == 400, reply
        assert "2 Host headers" in json.loads(reply)["error"]
        chat = json.dumps(_chat())
        status, _, reply = exchange(
            sock, post("/v1/chat/completions", chat, more=f"Host: {hosts[1]}\r\n")
        )
    assert status == 400, reply
    assert_sound(server)


def test_well_formed_hosts_are_answered(server) -> None:
    port = server.port
    for host in [f"[::1]:{port}", "[::1]", "LocalHost.:80", f"127.0.0.1:{port}", "localhost:"]:
        with connect(server) as sock:
            status, _, reply = exchange(sock, get("/healthz", host))
        assert status == 200, (host, reply)


def test_with_tokens_and_no_allowed_host_the_form_is_still_checked() -> None:
    tokens = Tokens.from_lines([f"read:{READ}", f"admin:{ADMIN}"])

    def unloaded():
        raise InputError("not loaded in this test")

    with ThreadServer(create_app(unloaded, ServeSettings(tokens=tokens))) as url:
        port = int(url.rsplit(":", 1)[1])
        for hosts, status in [(("evil.example",), 200), (("[::1",), 400), (("a", "b"), 400)]:
            with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
                got, _, reply = exchange(sock, get("/healthz", *hosts))
            assert got == status, (hosts, reply)


def test_a_topic_a_store_gave_with_a_lone_surrogate_still_renders_the_metrics() -> None:
    """Requests cannot bring one (422 above); a collection flagged by hand can, and the
    ``/metrics`` page must still encode as UTF-8."""
    registry = service_registry()
    registry.inc("ragbound_tripwire_hits_total", topic=f"sabotage{LONE}")
    page = registry.render().encode("utf-8")
    assert b'ragbound_tripwire_hits_total{topic="sabotage?"} 1' in page


def test_a_stray_lone_surrogate_is_logged_as_its_json_escape(tmp_path: Path) -> None:
    """What a store gives (requests cannot bring one) is written, the line UTF-8 and JSON,
    never a lost batch."""
    path = tmp_path / "log.jsonl"
    log = QueryLog(path)
    log.append([decision_of(f"flood{LONE}"), decision_of("plain")])
    log.close()
    assert b"flood\\ud800" in path.read_bytes()
    assert [line["query"] for line in log_lines(path)] == [f"flood{LONE}", "plain"]
