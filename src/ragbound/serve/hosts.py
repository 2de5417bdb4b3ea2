"""The ``Host`` check against DNS rebinding.

A page on any web site can make a browser send requests to ``http://127.0.0.1:8000``; the
browser's same-origin rule keeps the replies from the page unless the attacker's own name
resolves to 127.0.0.1 (DNS rebinding): then the page is same-origin with the service, and a
service without tokens answers it. Such a request carries the attacker's name in ``Host``, so
a service without tokens answers only requests whose ``Host`` is a loopback name (``localhost``,
``127.0.0.1``, ``[::1]``, any port: a port forward keeps working) or a name given with
``--allowed-host``; any other is answered ``421`` JSON. With tokens, a browser page cannot
present one, so the check is on only when ``--allowed-host`` names the hosts.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from ragbound.errors import InputError
from ragbound.serve.limits import ApiError

MAX_SHOWN = 100  # characters of a refused Host header echoed in the error


def host_name(header: str) -> str:
    """The host name of a ``Host`` header, without its port, lower case, without a trailing
    dot (``[::1]:8000`` -> ``::1``, ``LocalHost.:80`` -> ``localhost``)."""
    value = header.strip()
    if value.startswith("["):
        name = value[1:].partition("]")[0]
    else:
        name = value.rpartition(":")[0] if value.count(":") == 1 else value
    return name.lower().rstrip(".")


def allowed_name(entry: str) -> str:
    """An ``--allowed-host`` entry as :func:`host_name` compares it; InputError for a blank
    one or one with a port."""
    name = entry.strip().lower().strip("[]").rstrip(".")
    if not name or any(char.isspace() or char in "/@" for char in name):
        raise InputError(f"--allowed-host must be a host name or address, got {entry!r}")
    if ":" in name and not _is_ip(name):
        raise InputError(f"--allowed-host takes a host name without a port, got {entry!r}")
    return name


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses; a name or ``0.0.0.0`` is not."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class HostCheck:
    """ASGI middleware: ``421`` JSON for a request whose ``Host`` is neither a loopback name
    nor one of ``allowed`` (names as :func:`allowed_name` gives them). A request without a
    ``Host`` (HTTP/1.0) is no browser's, and passes."""

    def __init__(self, app, allowed: frozenset[str]):
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        header = _host_header(scope) if scope["type"] == "http" else None
        if header is None or self._admits(host_name(header)):
            await self.app(scope, receive, send)
            return
        shown = header[:MAX_SHOWN]
        response = ApiError(
            421,
            f"Host {shown!r} is not a name this service answers to: it answers loopback "
            "names (localhost, 127.0.0.1, [::1]) and those given with --allowed-host",
        ).response()
        await response(scope, receive, send)

    def _admits(self, name: str) -> bool:
        return is_loopback(name) or name in self.allowed


def _host_header(scope: dict[str, Any]) -> str | None:
    for key, value in scope.get("headers") or []:
        if key == b"host":
            return value.decode("latin-1")
    return None
