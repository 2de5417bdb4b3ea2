"""The ``Host`` check against DNS rebinding.

A page whose own name resolves to 127.0.0.1 is same-origin with a local service and could read
its replies; its requests carry that name in ``Host``. So a service without tokens answers only
loopback names or ``--allowed-host`` ones (else ``421``); with tokens, which a page cannot
present, names are checked only when ``--allowed-host`` is given. The header's form is checked
always (RFC 9112 section 3.2): a malformed ``Host``, or more than one, is ``400``.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from ragbound.errors import InputError
from ragbound.serve.limits import ApiError

MAX_SHOWN = 100  # characters of a refused Host header echoed in the error
# a Host header as a client sends one: a name (RFC 3986's unreserved characters) or a bracketed
# IPv6 literal, then an optional port; sub-delimiters and percent-encoding, which RFC 3986
# allows in a name, are refused: no resolver or browser sends them
_HOST = re.compile(
    r"(?:\[(?P<ip6>[^\[\]]*)\]|(?P<name>[A-Za-z0-9._~-]*))(?::(?P<port>[0-9]{0,5}))?"
)


def host_name(header: str) -> str | None:
    """The host name of a ``Host`` header, without its port, lower case, without a trailing
    dot (``[::1]:8000`` -> ``::1``, ``LocalHost.:80`` -> ``localhost``); None for a header
    that is not one (``[::1``, ``::1``, ``a b``, ``host:1:2``, ``host:70000``)."""
    found = _HOST.fullmatch(header.strip())
    if found is None or int(found["port"] or 0) > 65535:
        return None
    if found["ip6"] is not None:
        try:
            ipaddress.IPv6Address(found["ip6"])
        except ValueError:
            return None
        return found["ip6"].lower()
    return found["name"].lower().rstrip(".")


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
    """ASGI middleware: ``400`` JSON for a request with more than one ``Host`` header or a
    malformed one, then (``allowed`` not None) ``421`` JSON for a request whose ``Host`` is
    neither a loopback name nor one of ``allowed`` (names as :func:`allowed_name` gives them).
    A request without a ``Host`` (HTTP/1.0) is no browser's, and passes."""

    def __init__(self, app, allowed: frozenset[str] | None):
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        refused = _refusal(scope, self.allowed) if scope["type"] == "http" else None
        if refused is None:
            await self.app(scope, receive, send)
            return
        await refused.response()(scope, receive, send)


def _refusal(scope: dict[str, Any], allowed: frozenset[str] | None) -> ApiError | None:
    """Why the request's ``Host`` is refused (400 or 421), or None."""
    headers = [value for key, value in scope.get("headers") or [] if key == b"host"]
    if not headers:
        return None
    if len(headers) > 1:
        return ApiError(400, f"the request has {len(headers)} Host headers; send one")
    header = headers[0].decode("latin-1")
    shown = header[:MAX_SHOWN]
    name = host_name(header)
    if name is None:
        return ApiError(
            400,
            f"Host {shown!r} is not a host: send a name, an IPv4 address or an IPv6 address "
            "in brackets, then an optional :port",
        )
    if allowed is None or is_loopback(name) or name in allowed:
        return None
    return ApiError(
        421,
        f"Host {shown!r} is not a name this service answers to: it answers loopback "
        "names (localhost, 127.0.0.1, [::1]) and those given with --allowed-host",
    )
