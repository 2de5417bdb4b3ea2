"""The one parser of JSON request bodies, for every route of the service and the gateway.

Standard JSON only (RFC 8259, :func:`ragbound.records.standard_json`): ``NaN``, ``Infinity``,
``-Infinity`` and numbers beyond a float's range are refused with ``400`` naming them, wherever
they are in the body (a field the route ignores too), so no such value reaches a model, the
query log, the upstream server or an error answer. A body that is not UTF-8 is ``422``, as is
malformed JSON (FastAPI's ``json_invalid`` error, naming the position).

FastAPI reads a JSON body with ``await request.json()``; :class:`StandardJSONRoute` hands the
route a :class:`StandardJSONRequest` whose ``json()`` is this parser (FastAPI's documented way
to change how a body is read).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from ragbound.records import NonStandardJSON, standard_json


class BodyError(HTTPException):
    """A request body the service will not read (an HTTPException, so FastAPI passes it on
    instead of answering its own generic 400)."""


def parse_body(raw: bytes) -> Any:
    """A request body as JSON; BodyError 400 for non-standard JSON, 422 for a body that is not
    UTF-8; :class:`json.JSONDecodeError` for malformed JSON (FastAPI answers it 422)."""
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark is dropped, as json.loads does
    except UnicodeDecodeError as exc:
        raise BodyError(
            422, f"the body is not UTF-8 (invalid byte 0x{raw[exc.start]:02x} at {exc.start})"
        ) from None
    try:
        return standard_json(text)
    except json.JSONDecodeError:
        raise
    except NonStandardJSON as exc:
        raise BodyError(400, f"the body is not standard JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:  # an integer of over 4,300 digits; deep nesting
        raise BodyError(400, f"the body cannot be read as JSON: {exc}") from None


class StandardJSONRequest(Request):
    """A request whose JSON body is read by :func:`parse_body`."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_body(await self.body())
        return self._json


class StandardJSONRoute(APIRoute):
    """A route reading its body as :class:`StandardJSONRequest` (the app's ``route_class``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def standard(request: Request) -> Response:
            return await handler(StandardJSONRequest(request.scope, request.receive))

        return standard
