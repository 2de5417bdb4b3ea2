"""The HTTP connections of ``ragbound serve``: bounded before the app sees a request.

uvicorn's httptools protocol reads a request head of any size, waits for a head or a body
forever and takes every connection offered. :class:`BoundedProtocol` is that protocol with the
bounds of :class:`~ragbound.serve.settings.Connections`, kept where the bytes arrive (before a
head is buffered whole, before any token check). Every refusal is the service's JSON error
with ``Connection: close``, then a lingering close (at most ``LINGER_S``): the server reads and
drops what the client still sends, so the client reads the answer instead of a reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import struct
import sys
import termios
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from ragbound.serve.settings import Connections

LINGER_S = 1.0  # at most this long reading and dropping what a refused client still sends
MAX_LINGERING = 64  # connections lingering at once; past it a refused one is closed at once
RETRY_AFTER_S = 1  # the Retry-After of a 503 for a full server
# the ioctl reading a socket's unsent bytes (SIOCOUTQ): Linux only
_OUTQ = termios.TIOCOUTQ if sys.platform == "linux" else None
HEAD_OVERHEAD = 16  # bytes of a request line besides its target ("GET  HTTP/1.1\r\n")


class _Refused(Exception):
    """Raised in a parser callback to stop reading a request that broke a limit."""


class Refusal:
    """An HTTP error answered by the connection itself: status, message, limit and its value."""

    def __init__(self, status: int, message: str, limit: str, value: float) -> None:
        self.status, self.message, self.limit, self.value = status, message, limit, value

    def response(self, default_headers: list[tuple[bytes, bytes]]) -> bytes:
        """The whole HTTP/1.1 response, ``Connection: close`` (503: ``Retry-After``)."""
        error = {"error": self.message, "limit": self.limit, "max": self.value}
        body = json.dumps(error, separators=(",", ":"))  # as the app's errors
        headers = [*default_headers, (b"content-type", b"application/json")]
        headers += [(b"content-length", str(len(body)).encode()), (b"connection", b"close")]
        if self.status == 503:
            headers.append((b"retry-after", str(RETRY_AFTER_S).encode()))
        lines = [
            STATUS_LINE[self.status],
            *(name + b": " + value + b"\r\n" for name, value in headers),
        ]
        return b"".join([*lines, b"\r\n", body.encode("ascii")])


def protocol_for(bounds: Connections) -> type[BoundedProtocol]:
    """The protocol class uvicorn makes each connection with, holding ``bounds`` and its own
    set of lingering connections (one class per server)."""
    return type("BoundedProtocol", (BoundedProtocol,), {"bounds": bounds, "lingering": set()})


class BoundedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds of :class:`Connections` (module doc)."""

    bounds: ClassVar[Connections] = Connections()
    lingering: ClassVar[set[BoundedProtocol]] = set()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refusal: Refusal | None = None
        self._closing = False  # refused or cut: what arrives now is dropped
        self._in_head = True  # the bytes arriving belong to a request head
        self._head_bytes = 0  # read since the current head began (whole reads)
        self._header_count = 0
        self._body_bytes = 0
        self._body_since = 0.0  # loop time the body's allowance is counted from
        self._unsent = 0  # bytes waiting to be written when the send timer was last armed
        self._timers: dict[str, asyncio.TimerHandle] = {}

    # ------------------------------------------------------------------ the connection
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        full = len(self.connections) >= self.bounds.max_connections
        super().connection_made(transport)
        if full:
            cap = self.bounds.max_connections
            message = f"too many open connections (at most {cap}); retry later"
            self._refuse(Refusal(503, message, "max_connections", cap))
            return
        self._arm("head", self.bounds.head_timeout_s, self._head_expired)

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self.lingering.discard(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return  # a refused client's bytes: dropped, never parsed or kept
        self._unset_keepalive_if_required()
        if self._in_head:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError:
            if self._refusal is not None:
                self._refuse(self._refusal)
                return
            message = "Invalid HTTP request received."
            self.logger.warning(message)
            self.send_400_response(message)
            return
        if self._in_head and self._head_bytes > self.bounds.max_head_bytes:
            self._refuse(self._head_too_large())

    def pause_writing(self) -> None:
        super().pause_writing()
        self._unsent = self._unsent_bytes()
        self._arm("send", self.bounds.send_timeout_s, self._send_due)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._disarm("send")

    # -------------------------------------------------------------- parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        if "head" not in self._timers:  # a kept-alive connection's next request began
            self._arm("head", self.bounds.head_timeout_s, self._head_expired)

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        limit = self.bounds.max_url_bytes
        if len(self.url) > limit:
            message = f"request target longer than {limit} bytes"
            self._stop(Refusal(414, message, "max_url_bytes", limit))

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self._header_count += 1
        limit = self.bounds.max_headers
        if self._header_count > limit:
            self._stop(Refusal(431, f"more than {limit} header fields", "max_headers", limit))

    def on_headers_complete(self) -> None:
        self._disarm("head")
        self._in_head = False
        # the head as parsed: the reads that held it may have held some of the body too
        parsed = len(self.url) + HEAD_OVERHEAD
        parsed += sum(len(name) + len(value) + 4 for name, value in self.headers)
        if parsed > self.bounds.max_head_bytes:
            self._stop(self._head_too_large())
        super().on_headers_complete()
        self._body_bytes, self._body_since = 0, self.loop.time()
        self._arm("body", self.bounds.body_timeout_s, self._body_due)

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm("body")
        self._in_head, self._head_bytes, self._header_count = True, 0, 0
        super().on_message_complete()

    # --------------------------------------------------------------------- timeouts
    def _head_expired(self) -> None:
        self._timers.pop("head", None)
        if self.cycle is not None and not self.cycle.response_complete:
            # a pipelined head stalls behind a reply still going: that reply ends the connection
            self.cycle.keep_alive = False
            self._closing = True
            return
        if self._head_bytes == 0:  # nothing sent: closed without a word
            self._linger()
            return
        limit = self.bounds.head_timeout_s
        message = f"request head not complete within {limit:g} s"
        self._refuse(Refusal(408, message, "head_timeout_s", limit))

    def _body_due(self) -> None:
        """The body's allowance ran out unless more came (or the server stopped reading)."""
        self._timers.pop("body", None)
        bounds, now = self.bounds, self.loop.time()
        if self.flow.read_paused:  # the server holds the body back: not the client's time
            self._body_bytes, self._body_since = 0, now
            self._arm("body", bounds.body_timeout_s, self._body_due)
            return
        due = self._body_since + bounds.body_timeout_s + self._body_bytes / bounds.body_min_rate
        if now < due:
            self._arm("body", due - now, self._body_due)
            return
        message = (
            f"request body not complete within {bounds.body_timeout_s:g} s, plus 1 s per "
            f"{bounds.body_min_rate} bytes received"
        )
        self._cut(Refusal(408, message, "body_timeout_s", bounds.body_timeout_s))

    def _send_due(self) -> None:
        """Cut the connection unless the client took some of the reply since the last look."""
        self._timers.pop("send", None)
        unsent = self._unsent_bytes()
        if unsent < self._unsent:  # a slow reader, still reading
            self._unsent = unsent
            self._arm("send", self.bounds.send_timeout_s, self._send_due)
            return
        self._closing = True
        self.transport.abort()  # the app then sees a client gone, as when one hangs up

    def _unsent_bytes(self) -> int:
        """Bytes of the reply the client has not taken: the transport's buffer, and on Linux
        the socket's send queue (the kernel's buffer, megabytes on loopback, frees room for
        the transport's only in large steps: a slow reader drains it without the transport's
        buffer moving)."""
        size = self.transport.get_write_buffer_size()
        sock = self.transport.get_extra_info("socket")
        if sock is not None and _OUTQ is not None:
            with contextlib.suppress(OSError, ValueError):
                queued = fcntl.ioctl(sock.fileno(), _OUTQ, b"\0\0\0\0")
                size += struct.unpack("i", queued)[0]
        return size

    def _arm(self, name: str, delay: float, callback) -> None:
        self._disarm(name)
        self._timers[name] = self.loop.call_later(delay, callback)

    def _disarm(self, name: str) -> None:
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    # --------------------------------------------------------------------- refusals
    def _head_too_large(self) -> Refusal:
        limit = self.bounds.max_head_bytes
        return Refusal(431, f"request head larger than {limit} bytes", "max_head_bytes", limit)

    def _stop(self, refusal: Refusal) -> None:
        """Stop the parser inside a callback: :meth:`data_received` answers ``refusal``."""
        self._refusal = refusal
        raise _Refused(refusal.message)

    def _cut(self, refusal: Refusal) -> None:
        """Answer ``refusal`` to a request the app already has, unless its reply began; the
        app then reads a disconnect and whatever it sends is dropped."""
        cycle = self.cycle
        started = cycle is not None and cycle.response_started
        if cycle is not None:
            cycle.disconnected = True
            cycle.message_event.set()
        if started:
            self._closing = True
            self.transport.close()
            return
        self._refuse(refusal)

    def _refuse(self, refusal: Refusal) -> None:
        """Answer ``refusal`` and close the connection (lingering)."""
        if not self.transport.is_closing():
            self.transport.write(refusal.response(self.server_state.default_headers))
        self._linger()

    def _linger(self) -> None:
        """Stop writing, drop what still arrives for at most ``LINGER_S``, then close: closed
        with unread bytes, a connection is reset, and the client may lose the answer."""
        self._closing = True
        self.connections.discard(self)  # no longer counted, nor waited for at shutdown
        for name in list(self._timers):
            self._disarm(name)
        transport = self.transport
        if transport.is_closing() or len(self.lingering) >= MAX_LINGERING:
            transport.close()
            return
        self.lingering.add(self)
        if transport.can_write_eof():
            transport.write_eof()
        self._arm("linger", LINGER_S, self._end_linger)

    def _end_linger(self) -> None:
        self._timers.pop("linger", None)
        self.lingering.discard(self)
        transport = self.transport
        if transport.get_write_buffer_size():  # the client reads nothing: nothing to wait for
            transport.abort()
        else:
            transport.close()
