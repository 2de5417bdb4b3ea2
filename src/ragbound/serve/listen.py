"""Listen first, load after: the service's sockets are bound before the model loads, so a port
already in use is one error line at once, and uvicorn then serves on those very sockets (no
second bind that another process could win in between)."""

from __future__ import annotations

import contextlib
import errno
import resource
import socket
from typing import Any

import uvicorn
from uvicorn.server import STARTUP_FAILURE

from ragbound.errors import InputError
from ragbound.serve.connections import MAX_LINGERING, protocol_for
from ragbound.serve.settings import Connections

AddressInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, Any]
"""One result of :func:`socket.getaddrinfo`."""
OWN_FILES = 256  # the service's own open files: model, index, log, listening sockets, ...


def bind_sockets(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to every address of ``host`` at ``port``, as asyncio's ``create_server``
    binds them for uvicorn (``SO_REUSEADDR``; an IPv6 socket for IPv6 only; an address of a
    family the machine lacks is skipped); InputError ``port P on HOST is already in use
    (...)`` or ``cannot listen on HOST port P (...)``."""
    try:
        found = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise InputError(f"cannot listen on {host}: {exc.strerror}") from None
    bound: list[socket.socket] = []
    try:
        for info in dict.fromkeys(found):  # each address once
            sock = _bound_socket(info)
            if sock is not None:
                bound.append(sock)
    except OSError as exc:
        for sock in bound:
            sock.close()
        raise InputError(_bind_error(host, port, exc)) from None
    if not bound:
        raise InputError(f"cannot listen on {host} port {port} (no address of it is available)")
    return bound


def _bound_socket(info: AddressInfo) -> socket.socket | None:
    """A socket bound to one address; None when its family is not enabled here."""
    family, kind, proto, _, address = info
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRNOTAVAIL:  # as asyncio does: e.g. ::1 without IPv6
            return None
        raise
    return sock


def _bind_error(host: str, port: int, exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is already in use ({reason}): stop what listens there, "
            "or choose another --port"
        )
    return f"cannot listen on {host} port {port} ({reason})"


def serve_on(
    app: Any, sockets: list[socket.socket], host: str, port: int, bounds: Connections
) -> None:
    """Serve ``app`` with uvicorn on ``sockets`` until Ctrl-C or SIGTERM, as ``uvicorn.run``
    would on ``host:port``, each connection held to ``bounds`` (:mod:`ragbound.serve.
    connections`; exit status 3 when the app fails to start)."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=5,
        http=protocol_for(bounds),
        timeout_keep_alive=bounds.keep_alive_s,  # type: ignore[arg-type]  # a float works
    )
    server = uvicorn.Server(config)
    # uvicorn raises a caught Ctrl-C again after its graceful shutdown: that is the way out
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=sockets)
    if not server.started:
        raise SystemExit(STARTUP_FAILURE)


def reserve_file_handles(bounds: Connections) -> None:
    """Make room for ``bounds.max_connections`` open connections, the connections lingering
    after a refusal and the files the service itself holds: the soft limit on open files is
    raised (up to the hard limit) when it is lower. InputError naming ``--max-connections``
    when the hard limit is lower still: past it a connection cannot even be accepted, so the
    cap would never answer."""
    needed = bounds.max_connections + MAX_LINGERING + OWN_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise InputError(
            f"--max-connections {bounds.max_connections} needs {needed} open files, and this "
            f"process may open at most {hard} (ulimit -Hn): lower --max-connections to at "
            f"most {max(1, hard - MAX_LINGERING - OWN_FILES)} or raise the limit"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
