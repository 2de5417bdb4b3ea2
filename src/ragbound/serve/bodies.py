"""The one parser of JSON request bodies, for every route of the service and the gateway.

Standard JSON only (:func:`ragbound.records.standard_json`): ``NaN``, ``Infinity`` and numbers
beyond a float's range, anywhere in the body, are ``400``; a body that is not UTF-8, malformed
JSON, and a string holding a lone surrogate (which JSON can spell and UTF-8 cannot encode) are
``422``, so no such value reaches a model, the log, the upstream or a header
(docs/reliability.md says why). :class:`StandardJSONRoute` makes ``request.json()`` this parser.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from ragbound.records import NonStandardJSON, standard_json, unicode_problem

# a \uD800-\uDFFF escape: the only way a lone surrogate gets into JSON text read from UTF-8
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class BodyError(HTTPException):
    """A request body the service will not read (an HTTPException, so FastAPI passes it on
    instead of answering its own generic 400)."""


def parse_body(raw: bytes) -> Any:
    """A request body as JSON; BodyError 400 for non-standard JSON, 422 for a body that is not
    UTF-8 or holds a lone surrogate; :class:`json.JSONDecodeError` for malformed JSON (FastAPI
    answers it 422)."""
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark is dropped, as json.loads does
    except UnicodeDecodeError as exc:
        raise BodyError(
            422, f"the body is not UTF-8 (invalid byte 0x{raw[exc.start]:02x} at {exc.start})"
        ) from None
    try:
        value = standard_json(text)
    except json.JSONDecodeError:
        raise
    except NonStandardJSON as exc:
        raise BodyError(400, f"the body is not standard JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:  # an integer of over 4,300 digits; deep nesting
        raise BodyError(400, f"the body cannot be read as JSON: {exc}") from None
    problem = lone_surrogate(text, value)
    if problem is not None:
        raise BodyError(422, f"invalid request: {problem}")
    return value


def lone_surrogate(text: str, value: Any) -> str | None:
    """Where the JSON ``value`` parsed from ``text`` holds a lone surrogate, and what
    (``field 'messages[0].name': holds a lone surrogate (U+D800 at character 1) ...``), or
    None. Only a text that spells a surrogate escape is walked."""
    if not SURROGATE_ESCAPE.search(text):
        return None
    found = unicode_problem(value)
    if found is None:
        return None
    path, problem = found
    return f"the body {problem}" if path is None else f"field {path!r}: {problem}"


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
