"""Raw HTTP/1.1 over loopback sockets, for the tests of what a server does with a client that
breaks the rules: a head too large, a request sent a byte at a time, a reply never read."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterable

WAIT_S = 30.0  # the most any read waits: far beyond the 1 s timeouts the tests set
CHUNK = 1 << 20


def connect(port: int, receive_buffer: int | None = None) -> socket.socket:
    """A connection to 127.0.0.1:``port`` (``receive_buffer``: SO_RCVBUF, set before it
    connects so the window it advertises is small)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(WAIT_S)
    sock.connect(("127.0.0.1", port))
    return sock


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset ends it too)."""
    received = bytearray()
    while True:
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            break
        if not data:
            break
        received += data
    return bytes(received)


def status(reply: bytes) -> int | None:
    """The status code of the reply's first response (None: nothing, or not HTTP)."""
    if not reply.startswith(b"HTTP/1.1 "):
        return None
    return int(reply[9:12])


def json_body(reply: bytes) -> dict:
    """The JSON body of a reply that holds one whole response with a Content-Length."""
    body = reply.partition(b"\r\n\r\n")[2]
    return json.loads(body)


def header(reply: bytes, name: str) -> str | None:
    head = reply.partition(b"\r\n\r\n")[0].decode("latin-1")
    for line in head.split("\r\n")[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


def send_streaming(sock: socket.socket, parts: Iterable[bytes]) -> tuple[bytes, int]:
    """Send ``parts`` while a thread reads the reply: (the reply, bytes sent before the
    server closed). Read as it comes, the server's early answer is not lost to a reset."""
    replies: list[bytes] = []
    reader = threading.Thread(target=lambda: replies.append(read_to_end(sock)), daemon=True)
    reader.start()
    sent = 0
    try:
        for part in parts:
            sock.sendall(part)
            sent += len(part)
    except OSError:  # closed by the server before all was sent
        pass
    reader.join(WAIT_S)
    return (replies[0] if replies else b""), sent


def filler(total: int, byte: bytes = b"a") -> Iterable[bytes]:
    """``total`` bytes of ``byte`` in 1 MiB pieces (never all in memory)."""
    piece = byte * CHUNK
    for start in range(0, total, CHUNK):
        yield piece[: min(CHUNK, total - start)]


def trickle(sock: socket.socket, data: bytes, every_s: float) -> bytes:
    """Send ``data`` a byte every ``every_s`` seconds until the server answers or closes;
    the reply (what the server sent, read until it closes)."""
    sock.settimeout(every_s)
    received = bytearray()
    for i in range(len(data)):
        try:
            sock.sendall(data[i : i + 1])
        except OSError:
            break
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            break
        received += chunk
        break
    sock.settimeout(WAIT_S)
    return bytes(received) + read_to_end(sock)


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` (what it sends before is read) within ``seconds``."""
    deadline = time.monotonic() + seconds
    sock.settimeout(seconds)
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False
