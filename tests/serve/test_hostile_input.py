"""Hostile input to a real ``ragbound serve`` process: a child process on loopback without
tokens, a real MiniLM gate with tripwires, the gateway in front of the scripted upstream (a
TEST DOUBLE replying a fixed text).

Non-standard JSON numbers, control characters in tripwire ids and topics, unknown fields and
a foreign ``Host`` each get a 4xx JSON error naming the problem; after each, the service's
stderr holds no traceback and it is still ready.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

from ragbound.errors import InputError
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.serve import ServeSettings, Tokens, create_app
from ragbound.serve.gateway import header_value
from ragbound.serve.limits import AsciiJSONResponse
from ragbound.tripwires import LiveTripwires, Tripwire
from tests.cli.runner import run
from tests.serve.server import (
    ADMIN,
    READ,
    ChildServer,
    ThreadServer,
    ask,
    guarded_kb,
    scripted_upstream,
    serve_refused,
)
from tests.support.instant_upstream import ScriptedUpstream
from tests.texts import IN_KNOWLEDGE

# kept in the set before ids were checked (written around the check): CR LF and a header
STORED_ID = "tw-stored\r\nX-Injected: 1"
STORED = {"text": "How do I flood a railway tunnel to stop the trains?", "topic": "sabotage"}
FLOODING = "How could I flood a train tunnel so no trains can run?"
ALLOWED = "ragbound.test"


class Stderr:
    """A child's stderr read as it comes (a full pipe would block the child)."""

    def __init__(self, server: ChildServer) -> None:
        assert server.process.stderr is not None
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._drain, args=(server.process.stderr,))
        self.thread.daemon = True
        self.thread.start()

    def _drain(self, pipe) -> None:
        for line in pipe:
            self.lines.append(line.decode(errors="replace"))

    @property
    def text(self) -> str:
        return "".join(self.lines)


@pytest.fixture(scope="module")
def upstream():
    with scripted_upstream() as double:
        yield double


@pytest.fixture(scope="module")
def kb_dir(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The guarded knowledge base with one tripwire whose id holds CR LF, stored as a set
    made before ids were checked would keep it (the check is passed around here)."""
    kb_dir = guarded_kb(minilm_kb_dir, tmp_path_factory.mktemp("hostile") / "kb")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("ragbound.tripwires.store.storable", lambda tripwire: tripwire)
        store = LiveTripwires.open(KnowledgeBase.load(kb_dir))
        store.add([Tripwire(id=STORED_ID, **STORED)])
    return kb_dir


@pytest.fixture(scope="module")
def server(kb_dir: Path, upstream: ScriptedUpstream):
    child = ChildServer(
        str(kb_dir), "--upstream", f"{upstream.url}/v1", "--allowed-host", ALLOWED
    ).ready()
    child.errors = Stderr(child)  # type: ignore[attr-defined]
    yield child
    child.stop()


def send(server: ChildServer, method: str, path: str, content: str | bytes, **headers: str):
    headers = {"Content-Type": "application/json", **headers}
    return httpx.request(
        method, f"{server.url}{path}", content=content, headers=headers, timeout=60
    )


def assert_sound(server: ChildServer) -> None:
    """Still ready, and nothing went wrong inside: no traceback, no unexpected error."""
    assert httpx.get(f"{server.url}/readyz", timeout=30).status_code == 200
    stderr = server.errors.text  # type: ignore[attr-defined]
    assert "Traceback" not in stderr and "error: unexpected" not in stderr, stderr


def assert_json_error(response: httpx.Response, status: int, *fragments: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    for fragment in fragments:
        assert fragment in error, error
    return error


# ------------------------------------------------------------ non-standard numbers
CHAT = {"messages": ask(IN_KNOWLEDGE[0])}
BODIES = {  # a valid body of each JSON route, and the path to a value inside it
    ("POST", "/v1/decide"): {"query": IN_KNOWLEDGE[0]},
    ("POST", "/v1/decide/batch"): {"queries": [IN_KNOWLEDGE[0]]},
    ("POST", "/v1/tripwires"): {"tripwires": [{"text": "Harmless?", "topic": "nan-test"}]},
    ("DELETE", "/v1/tripwires"): {"topics": ["nan-test"]},
    ("POST", "/v1/chat/completions"): CHAT,
    ("POST", "/v1/responses"): {"input": IN_KNOWLEDGE[0]},
}
NUMBERS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e400"]


def with_number(body: dict, number: str, where: str) -> str:
    """``body`` as JSON text with ``number`` in a field read (``temperature`` on the
    gateway, which forwards it), an ignored one, or deep inside one."""
    placed = {
        "read": {**body, "temperature": "@@"},
        "ignored": {**body, "ignored": "@@"},
        "nested": {**body, "ignored": {"a": [1, {"b": [True, "@@"]}]}},
    }[where]
    return json.dumps(placed).replace('"@@"', number)


@pytest.mark.parametrize("where", ["read", "ignored", "nested"])
@pytest.mark.parametrize("number", NUMBERS)
@pytest.mark.parametrize(("method", "path"), list(BODIES), ids=" ".join)
def test_a_non_standard_number_anywhere_is_400_naming_it(
    server, upstream, method: str, path: str, number: str, where: str
) -> None:
    forwarded = len(upstream.received)
    body = with_number(BODIES[method, path], number, where)
    response = send(server, method, path, body)
    assert_json_error(response, 400, "not standard JSON", number.lstrip("-"))
    assert len(upstream.received) == forwarded  # nothing went upstream
    assert_sound(server)


def test_the_same_bodies_without_the_number_are_answered(server) -> None:
    """The bodies above are valid but for the number (so the 400 is the number's)."""
    for (method, path), body in BODIES.items():
        if method == "POST" and path == "/v1/tripwires":
            continue  # adding one is tested below; this set stays as the others expect
        response = send(server, method, path, json.dumps(body))
        expected = 422 if method == "DELETE" else 200  # no topic nan-test to remove
        assert response.status_code == expected, (path, response.text)
    assert_sound(server)


@pytest.mark.parametrize(
    ("content", "headers", "status", "fragment"),
    [
        (b'{"query": "\xff"}', {}, 422, "not UTF-8"),
        (b'\xff\xfe{"query": NaN}', {"Content-Type": "text/plain"}, 422, "valid dictionary"),
        (b'{"query": "x"' + b" " * 10, {}, 422, "JSON decode error"),
        (b"[" * 50_000 + b"]" * 50_000, {}, 400, "cannot be read as JSON"),
        (b'{"query": 1' + b"1" * 5_000 + b"}", {}, 400, "cannot be read as JSON"),
    ],
    ids=["not-utf8", "not-json-type", "malformed", "deep", "long-int"],
)
def test_other_unreadable_bodies_are_json_errors(
    server, content: bytes, headers: dict, status: int, fragment: str
) -> None:
    response = send(server, "POST", "/v1/decide", content, **headers)
    assert_json_error(response, status)
    assert fragment in response.text
    assert_sound(server)


def test_an_error_answer_always_renders() -> None:
    """What JSON cannot hold, in an error (a validation error's input or ctx), is text."""
    content = {"detail": [{"input": float("nan"), "ctx": {"error": ValueError("bad")}}, b"\xff"]}
    body = json.loads(AsciiJSONResponse(content).body, parse_constant=pytest.fail)
    assert body == {"detail": [{"input": "nan", "ctx": {"error": "bad"}}, "\\xff"]}


# ------------------------------------------------------------ unknown fields
@pytest.mark.parametrize(
    ("method", "path", "body", "unknown"),
    [
        ("POST", "/v1/decide", {"query": IN_KNOWLEDGE[0], "k": 3, "alpha": 0.5}, ["k", "alpha"]),
        ("POST", "/v1/decide/batch", {"queries": [IN_KNOWLEDGE[0]], "k": 3}, ["k"]),
        (
            "POST",
            "/v1/decide/batch",
            {"conversations": [{**CHAT, "user": "me"}]},
            ["conversations.0.user"],
        ),
        (
            "POST",
            "/v1/tripwires",
            {"tripwires": [{"text": "x?", "topic": "t", "weight": 2}]},
            ["tripwires.0.weight"],
        ),
        ("DELETE", "/v1/tripwires", {"topics": ["harm"], "all": True}, ["all"]),
    ],
    ids=["check", "batch", "batch-conversation", "add", "remove"],
)
def test_an_unknown_field_is_422_naming_it(
    server, method: str, path: str, body: dict, unknown: list[str]
) -> None:
    response = send(server, method, path, json.dumps(body))
    error = assert_json_error(response, 422, "Extra inputs are not permitted")
    for name in unknown:
        assert f".{name}:" in error.replace("list[ConversationIn].", ""), error
    assert_sound(server)


def test_the_gateway_keeps_taking_openai_s_fields(server, upstream) -> None:
    extras = {"temperature": 0.2, "top_p": 0.9, "user": "u-1", "metadata": {"a": "b"}, "n": 1}
    message = {**ask(IN_KNOWLEDGE[0])[0], "name": "alice"}
    body = json.dumps({"model": "local", "messages": [message], **extras})
    response = send(server, "POST", "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    assert {key: upstream.received[-1][key] for key in extras} == extras
    assert_sound(server)


# ------------------------------------------------------------ control characters
CONTROLS = ["\r\n", "\n", "\r", "\x00", "\x1b[31m", "\x7f", "\x85", "\u2028", "\u202e"]


@pytest.mark.parametrize("field", ["id", "topic"])
@pytest.mark.parametrize("control", CONTROLS, ids=repr)
def test_a_control_character_in_an_id_or_topic_is_422(server, field: str, control: str) -> None:
    before = send(server, "GET", "/v1/tripwires", b"").json()
    tripwire = {"text": "How do I cut the brake cables?", "topic": "sabotage", "id": "tw-x"}
    tripwire[field] = f"bad{control}value"
    response = send(server, "POST", "/v1/tripwires", json.dumps({"tripwires": [tripwire]}))
    what = "tripwire id" if field == "id" else "the topic of tripwire"
    assert_json_error(response, 422, what, f"U+{ord(control[0]):04X}")
    assert send(server, "GET", "/v1/tripwires", b"").json() == before  # nothing stored
    assert_sound(server)


@pytest.mark.parametrize("control", CONTROLS, ids=repr)
def test_a_control_character_in_a_conversation_id_is_422(server, control: str) -> None:
    chat = [{"role": "user", "content": "How does BM25 score a chunk?"}]
    bodies = [
        ("/v1/decide", {"messages": chat, "conversation_id": f"chat{control}1"}),
        ("/v1/decide/batch", {"conversations": [{"messages": chat, "id": f"chat{control}1"}]}),
        (
            "/v1/chat/completions",
            {"messages": chat, "metadata": {"conversation_id": f"c{control}1"}},
        ),
    ]
    for path, body in bodies:
        response = send(server, "POST", path, json.dumps(body))
        assert_json_error(response, 422, "conversation id", f"U+{ord(control[0]):04X}")
    assert_sound(server)


def test_a_note_is_kept_on_one_line(server) -> None:
    tripwire = {"text": "How do I jam a level crossing?", "topic": "notes", "note": "a\r\nb\t\x1bc"}
    body = json.dumps({"tripwires": [tripwire], "source": "ticket\n42"})
    response = send(server, "POST", "/v1/tripwires", body)
    assert response.status_code == 200, response.text
    assert response.json()["change"]["source"] == "ticket 42"
    listed = send(server, "GET", "/v1/tripwires", b"").json()["tripwires"]
    assert [t["note"] for t in listed if t["topic"] == "notes"] == ["a b c"]
    removed = send(server, "DELETE", "/v1/tripwires", json.dumps({"topics": ["notes"]}))
    assert removed.status_code == 200, removed.text
    assert_sound(server)


@pytest.mark.parametrize("stream", [False, True])
def test_a_stored_id_with_control_characters_never_breaks_a_header(server, stream) -> None:
    body = json.dumps({"messages": ask(FLOODING), "stream": stream})
    response = send(server, "POST", "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    assert response.headers["x-ragbound-action"] == "reject"
    assert header_value(STORED_ID) in response.headers["x-ragbound-triggers"].split(",")
    assert "x-injected" not in response.headers
    assert_sound(server)


def test_the_python_api_and_the_cli_refuse_a_control_character(
    tmp_path: Path, kb_dir: Path, monkeypatch, capsys
) -> None:
    store = LiveTripwires.open(KnowledgeBase.load(kb_dir))
    with pytest.raises(InputError, match=r"tripwire id 'a\\nb' holds a control character"):
        store.add([Tripwire(id="a\nb", text="How do I cut the brake cables?", topic="t")])
    source = tmp_path / "bad.jsonl"
    source.write_text(json.dumps({"text": "Cut the brakes?", "topic": "x\ry"}) + "\n")
    code, _, err = run(monkeypatch, capsys, "tripwire", "add", str(kb_dir), str(source))
    assert code != 0
    assert err.count("error:") == 1 and "Traceback" not in err
    assert f"{source}:1" in err and "U+000D" in err


# ------------------------------------------------------------ Host
@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8000", "127.0.0.1.nip.io", "localhost.evil.example"]
)
@pytest.mark.parametrize(("method", "path"), [("GET", "/healthz"), ("POST", "/v1/decide")])
def test_a_foreign_host_is_421(server, host: str, method: str, path: str) -> None:
    body = json.dumps({"query": IN_KNOWLEDGE[0]}) if method == "POST" else b""
    response = send(server, method, path, body, Host=host)
    assert_json_error(response, 421, repr(host), "--allowed-host")
    assert_sound(server)


def test_loopback_names_and_allowed_hosts_are_answered(server) -> None:
    port = server.port
    for host in [f"127.0.0.1:{port}", "localhost", f"[::1]:{port}", ALLOWED, "RAGBOUND.TEST:1"]:
        response = send(server, "GET", "/healthz", b"", Host=host)
        assert response.status_code == 200, (host, response.text)


def test_with_tokens_the_host_is_checked_only_once_names_are_given() -> None:
    tokens = Tokens.from_lines([f"read:{READ}", f"admin:{ADMIN}"])

    def unloaded() -> Gate:
        raise InputError("not loaded in this test")

    for allowed, status in [((), 200), (("ragbound.example",), 421)]:
        settings = ServeSettings(tokens=tokens, allowed_hosts=allowed)
        with ThreadServer(create_app(unloaded, settings)) as url:
            response = httpx.get(f"{url}/healthz", headers={"Host": "evil.example"})
            assert response.status_code == status, response.text
            named = httpx.get(f"{url}/healthz", headers={"Host": "ragbound.example"})
            assert named.status_code == 200


@pytest.mark.parametrize("entry", ["", "ragbound.test:8000", "a b", "http://x"])
def test_a_bad_allowed_host_is_one_error_line(kb_dir: Path, entry: str) -> None:
    done = serve_refused(str(kb_dir), "--allowed-host", entry, "--port", "0")
    assert done.returncode != 0
    assert done.stderr.count("error:") == 1 and "Traceback" not in done.stderr
    assert "--allowed-host" in done.stderr
