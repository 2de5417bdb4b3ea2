"""The FastAPI app: thin routes over :class:`Service` (decisions come from ``decide_many``).

Routes: ``POST /v1/decide``, ``POST /v1/decide/batch``, ``GET/POST/DELETE /v1/tripwires``,
``GET /healthz``, ``/readyz``, ``/metrics``, ``/dashboard``, ``/v1/stats`` and FastAPI's
``/openapi.json``. Every error is JSON ``{"error": ..., "limit": ..., "max": ...}``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import sys
from collections.abc import AsyncIterator, Sequence

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.exceptions import HTTPException

import ragbound.tracing as tracing
from ragbound._version import __version__
from ragbound.conversations.model import Conversation, Query, conversation
from ragbound.corpus import validate_query
from ragbound.detect.calibration import APPROXIMATE
from ragbound.errors import ArtifactError, InputError
from ragbound.gate import Decision
from ragbound.serve.auth import Role, allows
from ragbound.serve.bodies import BodyError, StandardJSONRoute
from ragbound.serve.dashboard import Stats, content_security_policy, new_nonce, page
from ragbound.serve.gateway import (
    ChatRequest,
    ChatShape,
    Upstream,
    UpstreamError,
    conversation_id,
    decision_headers,
)
from ragbound.serve.hosts import HostCheck
from ragbound.serve.limits import ApiError, AsciiJSONResponse, RequestLimits
from ragbound.serve.models import (
    AddTripwires,
    BatchRequest,
    BatchResponse,
    ChangeResponse,
    CheckRequest,
    ErrorBody,
    Readiness,
    RemoveTripwires,
    TripwireList,
)
from ragbound.serve.querylog import QueryLogError
from ragbound.serve.responses import ResponsesRequest, ResponsesShape, to_chat
from ragbound.serve.service import GateSource, Service
from ragbound.serve.settings import Limits, ServeSettings
from ragbound.serve.shown import DECISION_HEADER, asks_full, shown
from ragbound.tripwires import Tripwire, tripwire_id

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
ERROR_CODES = (400, 401, 403, 413, 421, 422, 503)
ERRORS = {code: {"model": ErrorBody} for code in ERROR_CODES}
# a route answering text or HTML still answers its errors in JSON (a model would be documented
# under the route's own media type)
JSON_ERRORS = {
    code: {"content": {"application/json": {"schema": ErrorBody.model_json_schema()}}}
    for code in ERROR_CODES
}


def create_app(gate: GateSource, settings: ServeSettings | None = None) -> FastAPI:
    """The service's app for ``gate`` (a :class:`Gate` or a function loading one)."""
    settings = settings or ServeSettings()
    service = Service(gate, settings)
    upstream = Upstream(settings.gateway) if settings.gateway is not None else None

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await service.batcher.start()
        if settings.worker is None:
            service.start_loading()  # /healthz answers while the model loads
        else:  # a worker accepts once ready: the others answer meanwhile
            await asyncio.to_thread(service.load)
        try:
            yield
        finally:
            await service.batcher.stop()
            service.close()
            if upstream is not None:
                await upstream.close()

    app = FastAPI(
        title="ragbound",
        version=__version__,
        summary="Calibrated out-of-knowledge and tripwire decisions for RAG queries.",
        lifespan=lifespan,
        responses=ERRORS,  # type: ignore[arg-type]
    )
    app.router.route_class = StandardJSONRoute  # every JSON body read by the one parser
    app.state.service = service
    # inside RequestLimits: a refused Host is counted in the metrics; its form is checked
    # always, its name unless checked_hosts() is None
    app.add_middleware(HostCheck, allowed=settings.checked_hosts())
    app.add_middleware(
        RequestLimits,
        max_body_bytes=settings.limits.max_body_bytes,
        worker=None if settings.worker is None else settings.worker.name,
        metrics=service.metrics,
    )
    _add_error_handlers(app)
    _add_decide_routes(app, service)
    _add_tripwire_routes(app, service)
    _add_ops_routes(app, service)
    _add_dashboard_routes(app, service)
    if upstream is not None:
        _add_gateway_routes(app, service, upstream)
    return app


# ------------------------------------------------------------------------- auth
_bearer = HTTPBearer(auto_error=False, description="read:TOKEN or admin:TOKEN from --token-file")


def _require(service: Service, needed: Role):
    """A dependency admitting a token of role ``needed`` (any request when there are none)."""

    # async: FastAPI runs a plain function dependency on its thread pool, a hop per request
    async def check(credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
        _admit(service, credentials.credentials if credentials else None, needed)

    return check


def _require_bearer_or_basic(service: Service, needed: Role):
    """As :func:`_require`, also taking the token as the password of HTTP Basic auth (``curl
    -u any:TOKEN``). The challenge stays Bearer, so a browser never pops up its own login:
    the dashboard page asks for the token itself."""

    def check(request: Request) -> None:
        _admit(service, _presented(request), needed)

    return check


def _presented(request: Request) -> str | None:
    """The request's token: a bearer token, or the password of HTTP Basic auth."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() != "basic":
        return None
    try:
        return base64.b64decode(value.strip(), validate=True).decode().partition(":")[2] or None
    except (binascii.Error, UnicodeDecodeError):
        return None


def _admit(service: Service, presented: str | None, needed: Role) -> None:
    tokens = service.settings.tokens
    if tokens is None:
        return
    if presented is None:
        raise ApiError(401, "missing bearer token (Authorization: Bearer TOKEN)")
    role = tokens.role_of(presented)
    if role is None:
        raise ApiError(401, "unknown bearer token")
    if not allows(role, needed):
        raise ApiError(403, f"this needs an {needed} token")


# ----------------------------------------------------------------------- errors
def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(InputError)
    async def input_error(_: Request, exc: InputError) -> JSONResponse:
        return ApiError(422, str(exc)).response()

    @app.exception_handler(ArtifactError)
    async def artifact_error(_: Request, exc: ArtifactError) -> JSONResponse:
        return ApiError(503, str(exc)).response()

    @app.exception_handler(BodyError)
    async def body_error(_: Request, exc: BodyError) -> JSONResponse:
        return ApiError(exc.status_code, str(exc.detail)).response()

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        # FastAPI's own 400 is a body it cannot read (bodies.py answers JSON's): invalid, 422
        status = 422 if exc.status_code == 400 else exc.status_code
        body = {"error": str(exc.detail)}
        return AsciiJSONResponse(body, status_code=status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors()
        )
        body = {"error": f"invalid request: {problems}", "detail": exc.errors()}
        return AsciiJSONResponse(body, status_code=422)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        sys.stderr.write(f"error: unexpected {type(exc).__name__}: {exc}\n")
        return ApiError(500, f"internal error ({type(exc).__name__})").response()


# ---------------------------------------------------------------------- decisions


def _add_decide_routes(app: FastAPI, service: Service) -> None:
    reader = [Depends(_require(service, "read"))]

    @app.post("/v1/decide", response_model=Decision, dependencies=reader, tags=["decide"])
    async def decide(body: CheckRequest) -> Response:
        """Decide one query, or one conversation at its last user message (``messages``, given
        the turns before it: the text searched is in ``test.query``, the turn and how the
        conversation was read in ``conversation``): ``answer`` (with its context), ``abstain``
        (out of knowledge, or unanswerable) or ``reject`` (forbidden, by any user turn), and
        why in ``cause`` and ``reason``. The boundary test's verdict is in ``test``, the
        answerability test's in ``answerability`` (null: the calibration has none, or the
        query was already forbidden or out of knowledge), the tripwires' in ``tripwires``."""
        item = body.query if body.messages is None else _chat(body.messages, body.conversation_id)
        return _json((await _decide(service, [item]))[0])

    @app.post(
        "/v1/decide/batch", response_model=BatchResponse, dependencies=reader, tags=["decide"]
    )
    async def decide_batch(body: BatchRequest) -> Response:
        """Decide up to ``max_batch`` queries, or conversations, together, in order."""
        what = "queries" if body.conversations is None else "conversations"
        given = body.queries or body.conversations or []
        limit = service.settings.limits.max_batch
        if len(given) > limit:
            raise ApiError(413, f"{len(given)} {what}; at most {limit}", "max_batch", limit)
        if not given:
            raise ApiError(422, f"no {what} to decide")
        items: list[Query] = [
            chat if isinstance(chat, str) else _chat(chat.messages, chat.id, f"conversation {i}")
            for i, chat in enumerate(given, start=1)
        ]
        return _json(BatchResponse(results=await _decide(service, items)))


def _json(model: BaseModel) -> Response:
    """``model`` as JSON, serialised once by pydantic: returned as a model, FastAPI would
    validate it again against the route's response model (which still documents it)."""
    return Response(model.model_dump_json(), media_type="application/json")


def _chat(
    messages: Sequence[BaseModel], chat_id: str | None, location: str = "messages"
) -> Conversation:
    """A request's messages (pydantic models with ``role`` and ``content``) as a Conversation
    (InputError, so 422, naming the message at fault); its size is held to the service's
    limits by :func:`_decide`."""
    raw = [message.model_dump() for message in messages]
    unbounded = sys.maxsize
    return conversation(
        raw,
        id=(chat_id or "").strip() or None,  # a blank id is no id
        location=location,
        max_messages=unbounded,
        max_chars=unbounded,
        max_turn_chars=unbounded,
    )


async def _decide(service: Service, items: list[Query]) -> list[Decision]:
    """Decisions for queries and conversations (already validated Conversations, from this
    module's routes or the gateway's), each first held to the service's limits."""
    limits = service.settings.limits
    checked: list[Query] = []
    for i, item in enumerate(items):
        one = len(items) == 1
        if isinstance(item, Conversation):
            _check_chat(item, limits, "messages" if one else f"conversation {i + 1}")
            checked.append(item)
            continue
        location = "query" if one else f"query {i + 1}"
        _check_length(item, limits, location)
        checked.append(validate_query(item, max_chars=limits.max_query_chars, location=location))
    _check_ready(service)
    try:
        return await service.batcher.submit(checked, timeout=limits.request_timeout_s)
    except TimeoutError:
        raise ApiError(
            503,
            f"no decision within {limits.request_timeout_s:g} s; retry later",
            "request_timeout_s",
            limits.request_timeout_s,
        ) from None
    except QueryLogError as exc:  # decided, not logged: not answered
        raise ApiError(503, f"cannot write the query log ({exc.reason}); retry later") from None


def _check_length(text: str, limits: Limits, location: str) -> None:
    """422 naming ``max_query_chars`` for a query, or a decided turn, longer than it."""
    if len(text) > limits.max_query_chars:
        raise ApiError(
            422,
            f"{location} has {len(text)} characters; at most {limits.max_query_chars}",
            "max_query_chars",
            limits.max_query_chars,
        )


def _check_chat(chat: Conversation, limits: Limits, location: str) -> None:
    """413 naming the limit for a conversation of too many messages or characters, 422 for
    a decided turn longer than a query may be."""
    if len(chat.messages) > limits.max_messages:
        raise ApiError(
            413,
            f"{location}: {len(chat.messages)} messages; at most {limits.max_messages} (send "
            "the recent part of a longer chat)",
            "max_messages",
            limits.max_messages,
        )
    chars = sum(len(message.text) for message in chat.messages)
    if chars > limits.max_conversation_chars:
        raise ApiError(
            413,
            f"{location}: {chars} characters of text; at most {limits.max_conversation_chars}",
            "max_conversation_chars",
            limits.max_conversation_chars,
        )
    _check_length(chat.last_user, limits, f"{location}, its last user message")


def _check_ready(service: Service) -> None:
    if not service.ready:
        raise ApiError(503, f"not ready: {service.error or 'the model is loading'}")


# -------------------------------------------------------------------- tripwires
def _add_tripwire_routes(app: FastAPI, service: Service) -> None:
    admin = [Depends(_require(service, "admin"))]

    @app.get("/v1/tripwires", response_model=TripwireList, dependencies=admin, tags=["tripwires"])
    async def list_tripwires() -> TripwireList:
        """The tripwires decisions use now."""
        _check_ready(service)
        guard = service.gate.tripwires if service.gate is not None else None
        store = guard.tripwires if guard is not None else None
        return TripwireList(
            set_hash=store.manifest.set_hash if store is not None else None,
            n=len(store) if store is not None else 0,
            topics=store.topics() if store is not None else {},
            tripwires=store.tripwires if store is not None else [],
        )

    @app.post(
        "/v1/tripwires", response_model=ChangeResponse, dependencies=admin, tags=["tripwires"]
    )
    async def add_tripwires(body: AddTripwires) -> ChangeResponse:
        """Embed and add tripwires; the next decision uses them (no restart). Decisions
        meanwhile are answered with the set before (the new one is built off their path)."""
        _check_ready(service)
        new = [
            Tripwire(
                id=t.id or tripwire_id(t.topic.strip(), t.text.strip()),
                **t.model_dump(exclude={"id"}),
            )
            for t in body.tripwires
        ]
        source = body.source or "api"
        return await _change(service, lambda store: store.add(new, source=source))

    @app.delete(
        "/v1/tripwires", response_model=ChangeResponse, dependencies=admin, tags=["tripwires"]
    )
    async def remove_tripwires(body: RemoveTripwires) -> ChangeResponse:
        """Remove tripwires by id and by topic; the next decision goes without them."""
        _check_ready(service)
        return await _change(service, lambda store: store.remove(ids=body.ids, topics=body.topics))


async def _change(service: Service, apply) -> ChangeResponse:
    # on a thread of its own: embedding the new set never holds up the decision thread
    change = await asyncio.to_thread(service.live.change, apply)
    gate = service.gate
    tripwire_set = gate.tripwire_set if gate is not None else None
    return ChangeResponse(change=change, tripwire_set=tripwire_set)  # type: ignore[arg-type]


# -------------------------------------------------------------------------- ops
def _add_ops_routes(app: FastAPI, service: Service) -> None:
    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """The process is up (the model may still be loading: see /readyz)."""
        return {"status": "ok"}

    @app.get(
        "/readyz", response_model=Readiness, responses={503: {"model": Readiness}}, tags=["ops"]
    )
    async def readyz() -> JSONResponse:
        """200 once the model is loaded and the calibration present; 503 before, on failure,
        or while the calibration's canaries have moved (``canary``: their last search).
        ``approximate`` (with ``note`` "p-values approximate: no real questions"): the
        calibration's questions are all synthetic; ``questions`` says where they came from.
        503 too while the query log cannot be written (``error`` "cannot write the query
        log"), until a write, or a probe of the disk, succeeds."""
        gate = service.gate
        writer = service.writer
        writable = writer.error is None or await asyncio.to_thread(writer.writable, service.ready)
        if not service.ready or gate is None or not writable:
            error = service.error or writer.error or "the model is loading"
            body = Readiness(ready=False, error=error, canary=service.canary)
            return JSONResponse(body.model_dump(), status_code=503)
        kb = gate.guard.kb
        body = Readiness(
            ready=True,
            embedder=kb.manifest.embedder_spec,
            kb_fingerprint=kb.fingerprint,
            calibration_id=gate.guard.calibration_id,
            tripwire_set=gate.tripwire_set,
            canary=service.canary,
            questions=gate.guard.questions,
            approximate=gate.guard.approximate,
            note=APPROXIMATE if gate.guard.approximate else None,
        )
        return JSONResponse(body.model_dump())

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        responses=JSON_ERRORS,  # type: ignore[arg-type]
        dependencies=[Depends(_require(service, "read"))],
        tags=["ops"],
    )
    async def metrics() -> PlainTextResponse:
        """Prometheus text: latency, decisions by action and by cause
        (``ragbound_decisions_by_cause_total``), p-values, tripwire hits, the shift monitor,
        the share of decided queries flagged beside alpha (``ragbound_p_at_most_alpha_share``,
        ``ragbound_alpha``), whether the calibration is approximate."""
        return PlainTextResponse(service.metrics_text(), media_type=PROMETHEUS_TEXT)


# -------------------------------------------------------------------- dashboard
def _add_dashboard_routes(app: FastAPI, service: Service) -> None:
    reader = [Depends(_require_bearer_or_basic(service, "read"))]

    @app.get("/v1/stats", response_model=Stats, dependencies=reader, tags=["ops"])
    async def stats() -> JSONResponse:
        """The dashboard's data: decision counts (by action and by cause), the p-value
        histogram of recent decisions (against the uniform calibration reference), recent
        forbidden queries with their tripwires, the shift monitor's windows."""
        return JSONResponse(service.stats().model_dump(), headers={"Cache-Control": "no-store"})

    @app.get(
        "/dashboard",
        response_class=HTMLResponse,
        responses=JSON_ERRORS,  # type: ignore[arg-type]
        tags=["ops"],
    )
    async def dashboard() -> HTMLResponse:
        """One self-contained page polling ``/v1/stats`` every 2 s (strict CSP, no assets).
        It holds no data, so it needs no token: with tokens, it asks for a read token and
        sends it as ``Authorization: Bearer`` (kept in the tab's sessionStorage)."""
        nonce = new_nonce()
        headers = {
            "Content-Security-Policy": content_security_policy(nonce),
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        }
        return HTMLResponse(page(nonce), headers=headers)


# ---------------------------------------------------------------------- gateway
SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
# one server-sent event, as OpenAPI 3.2's ``itemSchema`` for text/event-stream describes it (on
# 3.0 and 3.1, ``schema`` stands for it: what schemathesis checks each parsed event against)
SSE_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "event": {"type": "string"},
        "data": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer", "minimum": 0},
    },
}


def _gateway_responses(reply: str, more: dict[int, dict] | None = None) -> dict:
    """A gateway route's documented replies: ``reply`` as JSON or server-sent events, the
    upstream's failures, and ``more``."""
    content = {
        "application/json": {"schema": {"type": "object"}},
        "text/event-stream": {"schema": SSE_EVENT},
    }
    return {
        200: {"description": reply, "content": content},
        502: {"model": ErrorBody, "description": "the upstream server is unreachable"},
        504: {"model": ErrorBody, "description": "the upstream server timed out"},
        **(more or {}),
    }


def _add_gateway_routes(app: FastAPI, service: Service, upstream: Upstream) -> None:
    reader = [Depends(_require(service, "read"))]
    chat_replies = _gateway_responses(
        "an OpenAI chat.completion, or with stream: true server-sent chat.completion.chunk "
        "events ending in [DONE]"
    )
    state = {
        "model": ErrorBody,
        "description": "previous_response_id, conversation, prompt, background or an "
        "item_reference: state the gateway does not keep",
    }
    responses_replies = _gateway_responses(
        "an OpenAI Response, or with stream: true the Responses API's server-sent events "
        "(response.created ... response.completed)",
        {400: state},
    )

    @app.post("/v1/chat/completions", dependencies=reader, tags=["gateway"], responses=chat_replies)
    async def chat_completions(body: ChatRequest, request: Request):
        """OpenAI-compatible chat completions, the chat decided as one conversation at its
        last user message: ``reject`` (forbidden) and ``abstain`` (out of knowledge, or
        unanswerable) are answered here (the refusal, or the "I don't know" of the cause),
        ``answer`` goes upstream with the retrieved chunks as context. The decision's summary
        (action, cause, p-values, chunk and tripwire ids; never their text) is in the
        ``ragbound`` field (the first chunk of a stream) and its outline in the
        ``X-Ragbound-*`` headers (``X-Ragbound-Action``, ``X-Ragbound-Cause``, ...); the whole
        decision with ``X-Ragbound-Decision: full`` and an admin token (403 with a read
        token)."""
        full = _shows_full(service, request)
        with tracing.span("ragbound.chat", stream=body.stream) as span:
            decision = await _decide_chat(service, body, span, conversation_id(body.model_extra))
            return await _chat_reply(body, decision, upstream, ChatShape(body), full)

    @app.post("/v1/responses", dependencies=reader, tags=["gateway"], responses=responses_replies)
    async def responses(body: ResponsesRequest, request: Request):
        """OpenAI's Responses API, translated to a chat completion and decided, answered and
        shown like one on ``/v1/chat/completions`` (the instructions a system message); the
        reply is a Response or its events. The gateway keeps no state: send the whole
        conversation as ``input`` (``previous_response_id`` is refused)."""
        full = _shows_full(service, request)
        chat = to_chat(body)
        with tracing.span("ragbound.responses", stream=body.stream) as span:
            chat_id = conversation_id(body.model_extra)
            decision = await _decide_chat(service, chat, span, chat_id, "input, as chat messages")
            return await _chat_reply(chat, decision, upstream, ResponsesShape(body), full)


async def _decide_chat(
    service: Service, chat: ChatRequest, span, chat_id: str | None, location: str = "messages"
) -> Decision:
    """The chat's decision, as one conversation; its action and p-value on ``span``."""
    conv = _chat(chat.messages, chat_id, location)
    decision = (await _decide(service, [conv]))[0]
    if span.is_recording():
        span.set_attributes(
            tracing.named({"action": decision.action, "p_value": decision.test.p_value})
        )
    return decision


def _shows_full(service: Service, request: Request) -> bool:
    """Whether a gateway reply shows the whole decision: asked with ``X-Ragbound-Decision:
    full`` (422 for another value than summary or full) by an admin token (403 for a read
    token; without tokens every caller may). Checked before the decision is made."""
    if not asks_full(request.headers.get(DECISION_HEADER)):
        return False
    tokens = service.settings.tokens
    if tokens is None:
        return True
    presented = _presented(request)  # a Basic one never got past the route's bearer check
    if presented is None or tokens.role_of(presented) != "admin":
        raise ApiError(403, f"{DECISION_HEADER}: full needs an admin token")
    return True


async def _chat_reply(
    chat: ChatRequest,
    decision: Decision,
    upstream: Upstream,
    shape: ChatShape | ResponsesShape,
    full: bool,
):
    """The gateway's own reply to a ``reject`` or ``abstain`` (the text of its cause), else
    the upstream's, in the route's ``shape``, showing the decision whole (``full``) or its
    summary."""
    headers = {**decision_headers(decision), DECISION_HEADER: "full" if full else "summary"}
    seen = shown(decision, full)
    text = upstream.settings.own_text(decision)
    if text is not None:
        if chat.stream:
            return _sse(shape.own_stream(seen, text), headers)
        return JSONResponse(shape.own(seen, text), headers=headers)
    forwarded = upstream.settings.forwarded(chat, decision)
    try:
        # on a stream, until the upstream's headers: the relay goes on after the route returns
        with tracing.span("ragbound.upstream", stream=chat.stream):
            if chat.stream:
                return _sse(shape.relay(await upstream.stream(forwarded), seen), headers)
            reply = shape.reply(await upstream.complete(forwarded), seen)
            return JSONResponse(reply, headers=headers)
    except UpstreamError as exc:  # its own error body when it sent one, with the decision
        error = exc.body if isinstance(exc.body, dict) else {"error": str(exc)}
        return JSONResponse(error, status_code=exc.status, headers=headers)


def _sse(events, headers: dict[str, str]) -> StreamingResponse:
    return StreamingResponse(
        events, media_type="text/event-stream", headers={**headers, **SSE_HEADERS}
    )
