"""A TEST DOUBLE for OpenAI-compatible HTTP servers: a stdlib server on 127.0.0.1 that
answers each POST with the next scripted reply. It stands in for failures no user runs a
server for on purpose (429 with Retry-After, a 5xx, a malformed or changing reply, a server
that dies or stalls in the middle of its reply)."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

End = Literal["done", "close", "reset", "stall"]
STALL_S = 120.0  # the longest a stalled reply waits for its client to give up


@dataclass
class Reply:
    """One scripted server reply (``body`` None: the server's default body).

    ``stream``: the body as these chunks (HTTP/1.1 chunked, ``text/event-stream``) instead.
    ``then``: how the reply ends after the chunks, or after half the body when not streamed:
    ``done`` (whole), ``close`` (the connection closed, the body unfinished), ``reset`` (a
    TCP reset) or ``stall`` (silent until the client leaves, at most ``STALL_S``).
    """

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    stream: list[bytes] | None = None
    then: End = "done"


class ScriptedServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, default_body: Callable[[dict[str, Any]], Any]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.default_body = default_body
        self.script: list[Reply] = []
        self.seen: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def next_reply(self) -> Reply:
        with self.lock:
            return self.script.pop(0) if self.script else Reply()


class Handler(BaseHTTPRequestHandler):
    server: ScriptedServer

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output quiet."""

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length))
        with self.server.lock:
            self.server.seen.append(
                {"path": self.path, "headers": dict(self.headers), "json": body}
            )
        reply = self.server.next_reply()
        time.sleep(reply.delay)
        try:
            if reply.stream is not None:
                self._stream(reply, reply.stream)
            else:
                self._whole(reply, body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test)

    def _whole(self, reply: Reply, request: Any) -> None:
        content = self.server.default_body(request) if reply.body is None else reply.body
        payload = content if isinstance(content, bytes) else json.dumps(content).encode()
        self.send_response(reply.status)
        for name, value in {"Content-Type": "application/json", **reply.headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if reply.then == "done":
            self.wfile.write(payload)
            return
        self.wfile.write(payload[: len(payload) // 2])
        self._end(reply.then)

    def _stream(self, reply: Reply, chunks: list[bytes]) -> None:
        self.protocol_version = "HTTP/1.1"  # chunked bodies are HTTP/1.1's
        self.close_connection = True
        self.send_response(reply.status)
        for name, value in {"Content-Type": "text/event-stream", **reply.headers}.items():
            self.send_header(name, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        if reply.then == "done":
            self.wfile.write(b"0\r\n\r\n")
            return
        self._end(reply.then)

    def _end(self, then: End) -> None:
        """End a reply cut short: ``close`` when the handler returns, ``reset`` now (no FIN
        first), ``stall`` once the client closes its end."""
        self.close_connection = True
        if then == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()  # the reset goes when the handler's files close
        elif then == "stall":
            self.connection.settimeout(STALL_S)
            with contextlib.suppress(OSError):
                self.connection.recv(1)  # b"" when the client leaves


@contextlib.contextmanager
def serving(default_body: Callable[[dict[str, Any]], Any]) -> Iterator[ScriptedServer]:
    """A running scripted server; ``default_body(request_json)`` answers unscripted POSTs."""
    srv = ScriptedServer(default_body)
    thread = threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
