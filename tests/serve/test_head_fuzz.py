"""Request heads fuzzed with hypothesis against a real ``ragbound serve`` process (a child on
loopback with tokens and small head limits), over raw sockets: header names and values of
any bytes, of any size up to several times the limits, any number of them, targets of any
length.

Every head gets an HTTP answer, never a 5xx; a well-formed head past ``--max-head-bytes`` or
``--max-headers`` is 431 and one whose target passes ``--max-url-bytes`` is 414 (or 431 when
the head is too large as well), and one within them all is neither; after each, the service
still answers.
"""

from __future__ import annotations

import string
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.serve.raw_http import connect, read_to_end, status
from tests.serve.server import ChildServer, served_kb, token_file

MAX_HEAD = 4096
MAX_URL = 1024
MAX_HEADERS = 20
SLACK = 8  # bytes around the head limit where either answer is right (CRLFs counted or not)
EXAMPLES = 60  # each a connection to the real server: ~10 s in all
TCHAR = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"
VISIBLE = "".join(chr(c) for c in range(0x21, 0x7F))

Header = tuple[bytes, bytes, bool]  # name, value, well-formed


@pytest.fixture(scope="module")
def server(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("heads")
    kb_dir = served_kb(minilm_kb_dir, folder / "kb")
    limits = ["--max-head-bytes", str(MAX_HEAD), "--max-url-bytes", str(MAX_URL)]
    limits += ["--max-headers", str(MAX_HEADERS), "--head-timeout", "5"]
    child = ChildServer(str(kb_dir), "--token-file", str(token_file(folder)), *limits).ready()
    lines = child.drain_stderr()
    yield child
    child.stop()
    assert "Traceback" not in "".join(lines), "".join(lines)


def _repeated(alphabet: str, most: int, least: int = 0) -> st.SearchStrategy[bytes]:
    """Short text of ``alphabet`` repeated to ``least`` to ``most`` bytes (sizes near and
    past the limits without hypothesis drawing every byte)."""
    unit = st.text(alphabet, min_size=1, max_size=8).map(str.encode)
    return st.tuples(unit, st.integers(least, most)).map(lambda p: (p[0] * p[1])[: p[1]])


@st.composite
def headers(draw) -> Header:
    if draw(st.integers(0, 9)) == 0:  # any bytes: most are malformed
        name = draw(st.binary(min_size=0, max_size=12))
        value = draw(st.binary(max_size=40))
        return name, value, False
    name = draw(_repeated(TCHAR, 200, least=1))
    value = draw(_repeated(VISIBLE, 3 * MAX_HEAD))
    return name, value, True


def head_of(query: bytes, fields: list[Header]) -> bytes:
    lines = [b"GET /healthz?" + query + b" HTTP/1.1\r\n", b"Connection: close\r\n"]
    lines += [name + b": " + value + b"\r\n" for name, value, _ in fields]
    return b"".join([*lines, b"\r\n"])


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    query=_repeated(string.ascii_letters + string.digits + "=&%", 2 * MAX_URL),
    fields=st.lists(headers(), max_size=2 * MAX_HEADERS),
)
def test_any_head_is_answered_within_the_limits(server, query: bytes, fields: list) -> None:
    head = head_of(query, fields)
    with connect(server.port) as sock:
        sock.sendall(head)
        reply = read_to_end(sock)
    code = status(reply)
    assert code is not None and code < 500, reply[:200]
    event(f"status {code}")
    if all(well for _, _, well in fields):
        expect_limits(code, len(head), len(b"/healthz?" + query), len(fields) + 1)
    assert httpx.get(f"{server.url}/healthz").status_code == 200


def expect_limits(code: int, size: int, url: int, count: int) -> None:
    """The answer of a well-formed head of ``size`` bytes, a target of ``url`` bytes and
    ``count`` header fields."""
    over_head = size > MAX_HEAD + SLACK or count > MAX_HEADERS
    under_head = size <= MAX_HEAD - SLACK and count <= MAX_HEADERS
    if url > MAX_URL:
        assert code in ({414, 431} if not under_head else {414}), (code, size, url, count)
    elif over_head:
        assert code == 431, (code, size, url, count)
    elif under_head:
        assert code not in {414, 431}, (code, size, url, count)
