"""A test double for OpenAI-compatible HTTP servers: a stdlib server on 127.0.0.1 that
answers each POST with the next scripted reply. It stands in for failures no user runs a
server for on purpose (429 with Retry-After, a 5xx, a malformed or changing reply)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted server reply (``body`` None: the server's default body)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


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
        content = self.server.default_body(body) if reply.body is None else reply.body
        payload = content if isinstance(content, bytes) else json.dumps(content).encode()
        try:
            self.send_response(reply.status)
            for name, value in {"Content-Type": "application/json", **reply.headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test)


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
