"""schemathesis over the real service's ``/openapi.json`` (uvicorn on loopback, a real MiniLM
gate on a throw-away copy of the knowledge base, the gateway in front of the scripted upstream
test double): for every operation, generated requests,
valid and invalid, with no token, a read token, an admin token or an unknown one, must get
no 5xx, a status code the schema documents, the documented content type, headers and body.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from ragbound.gate import Gate
from ragbound.labels import BIDI_CONTROLS
from ragbound.records import unicode_problem
from ragbound.serve import GatewaySettings, Limits, ServeSettings, Tokens, create_app
from tests.serve.server import (
    ADMIN,
    READ,
    ThreadServer,
    auth,
    scripted_upstream,
    served_kb,
    wait_ready,
)
from tests.support.instant_upstream import ScriptedUpstream
from tests.tripwires.tripwire_texts import TRIPWIRES

# small limits, so generated bodies reach them (413 body and batch, 422 query length)
LIMITS = Limits(max_body_bytes=2048, max_query_chars=200, max_batch=4, request_timeout_s=30)
EXAMPLES = 40  # per operation and generation mode: 20-40 s in all on 2 busy cores
# an admin token first: hypothesis favours the first choice, and it passes every route
TOKENS = [ADMIN, READ, None, "unknown-token-0123456789abcdef"]
# not positive_data_acceptance: limits set at start (query length, batch size, body size) and
# rules on content (a blank query, an unknown tripwire topic) are not in the schema, so a
# request that the schema allows is rightly refused 413 or 422
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
]


def _cases() -> list:
    """Every (method, path) the app documents, with valid inputs, and with invalid ones when
    it takes any (an operation without parameters or body has no invalid input to send);
    the gate is never loaded here."""
    with_gateway = ServeSettings(gateway=GatewaySettings(upstream="http://127.0.0.1:9/v1"))
    paths = create_app(lambda: Gate.load(Path("unused")), with_gateway).openapi()["paths"]
    cases = []
    for path, methods in paths.items():
        for method, spec in methods.items():
            inputs = "requestBody" in spec or bool(spec.get("parameters"))
            modes = [GenerationMode.POSITIVE] + [GenerationMode.NEGATIVE] * inputs
            for mode in modes:
                label = f"{method.upper()} {path} {mode}"
                cases.append(pytest.param(method.upper(), path, mode, id=label))
    return cases


@pytest.fixture(scope="module")
def upstream():
    """The gateway's upstream: the scripted chat server (a TEST DOUBLE, fixed replies), which
    records the bodies it was sent."""
    with scripted_upstream() as double:
        yield double


@pytest.fixture(scope="module")
def upstream_url(upstream: ScriptedUpstream) -> str:
    return f"{upstream.url}/v1"  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def url(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory, upstream_url: str):
    kb_dir = served_kb(minilm_kb_dir, tmp_path_factory.mktemp("fuzz") / "kb")
    tokens = Tokens.from_lines([f"read:{READ}", f"admin:{ADMIN}"])
    log = kb_dir.parent / "queries.log.jsonl"
    service = ServeSettings(
        tokens=tokens,
        log=log,
        limits=LIMITS,
        monitor_window=5,
        gateway=GatewaySettings(upstream=upstream_url),
    )
    with ThreadServer(create_app(Gate.load(kb_dir), service)) as url:
        wait_ready(url)
        added = httpx.post(
            f"{url}/v1/tripwires", json={"tripwires": TRIPWIRES}, headers=auth(ADMIN)
        )
        assert added.status_code == 200, added.text
        yield url


@pytest.fixture(scope="module")
def schema(url: str):
    # what this service answers an invalid request with: no token 401, a read token on an
    # admin route 403, a body over the limit 413 (checked before it is read), otherwise 422
    rejection = {"expected-statuses": ["401", "403", "413", "422"]}
    config = schemathesis.Config.from_dict({"checks": {"negative_data_rejection": rejection}})
    return schemathesis.openapi.from_url(f"{url}/openapi.json", config=config)


@pytest.mark.parametrize(("method", "path", "mode"), _cases())
def test_responses_conform_to_the_schema(schema, url: str, method: str, path: str, mode) -> None:
    operation = schema[path][method]
    checks = [getattr(schemathesis.checks, name) for name in CHECKS]
    cases = operation.as_strategy(mode)
    if mode == GenerationMode.POSITIVE:  # with the request examples the schema documents
        cases = st.one_of(*schema.get_strategies_from_examples(operation), cases)
    statuses: list[int] = []

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases, token=st.sampled_from(TOKENS))
    def call(case, token: str | None) -> None:
        headers = auth(token) if token else {}
        response = case.call_and_validate(base_url=url, headers=headers, checks=checks, timeout=60)
        statuses.append(response.status_code)

    call()
    assert set(statuses) - {401, 403}, "no request got past authentication"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/decide", '{"query": "Do bees \\ud800 make honey?"}'),
        ("POST", "/v1/decide/batch", '{"queries": ["\\udfff"]}'),
        ("POST", "/v1/tripwires", '{"tripwires": [{"text": "poison \\ud800", "topic": "harm"}]}'),
        ("DELETE", "/v1/tripwires", '{"ids": ["\\udc00"]}'),
        ("POST", "/v1/chat/completions", '{"messages": [{"role": "user", "content": "\\ud800"}]}'),
    ],
    ids=["check", "batch", "add", "remove", "chat"],
)
def test_a_lone_surrogate_is_422_not_a_crash(url: str, method: str, path: str, body: str) -> None:
    """Valid JSON, not Unicode text: the generated cases above never hold one (found by hand
    while fixing what schemathesis found; the tokenizer and the UTF-8 log used to fail)."""
    headers = {**auth(ADMIN), "Content-Type": "application/json"}
    response = httpx.request(method, f"{url}{path}", content=body, headers=headers, timeout=60)
    assert response.status_code == 422
    assert "lone surrogate" in response.json()["error"]


# ---------------------------------------------- hostile classes as hypothesis strategies
PLACEHOLDER = "@@non-standard@@"
JSON_ROUTES = {  # a valid body of every route that reads JSON
    ("POST", "/v1/decide"): {"query": "What do bees make?"},
    ("POST", "/v1/decide/batch"): {"queries": ["What do bees make?"]},
    ("POST", "/v1/tripwires"): {"tripwires": [{"text": "Harmless?", "topic": "fuzz"}]},
    ("DELETE", "/v1/tripwires"): {"topics": ["fuzz"]},
    ("POST", "/v1/chat/completions"): {"messages": [{"role": "user", "content": "Why?"}]},
    ("POST", "/v1/responses"): {"input": "What do bees make?"},
}
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)


def _holding(inner: st.SearchStrategy) -> st.SearchStrategy:
    """A list or an object holding ``inner`` among other JSON values."""
    around = st.lists(JSON_VALUES, max_size=2)
    in_list = st.tuples(around, inner, around).map(lambda t: [*t[0], t[1], *t[2]])
    fields = st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=2)
    in_object = st.tuples(fields, st.text(max_size=6), inner).map(lambda t: {**t[0], t[1]: t[2]})
    return in_list | in_object


HOLDING = st.recursive(st.just(PLACEHOLDER), _holding, max_leaves=6)
NON_STANDARD = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-2e308", "1E400"])


def _body_with(valid: dict) -> st.SearchStrategy[str]:
    """JSON text: ``valid`` with a field (new or its own) holding a non-standard number
    somewhere inside, or that number deep in any JSON value."""
    placed = st.tuples(st.sampled_from([*valid, "ignored"]), HOLDING).map(
        lambda t: {**valid, t[0]: t[1]}
    )
    texts = (placed | HOLDING).map(json.dumps)
    return st.tuples(texts, NON_STANDARD).map(
        lambda t: t[0].replace(json.dumps(PLACEHOLDER), t[1], 1)
    )


HOSTILE = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.parametrize(("method", "path"), list(JSON_ROUTES), ids=" ".join)
def test_a_non_standard_number_anywhere_is_400(url: str, method: str, path: str) -> None:
    headers = {**auth(ADMIN), "Content-Type": "application/json"}

    @HOSTILE
    @given(body=_body_with(JSON_ROUTES[method, path]))
    def call(body: str) -> None:
        response = httpx.request(method, f"{url}{path}", content=body, headers=headers)
        assert response.status_code == 400, (body, response.text)
        assert "not standard JSON" in response.json()["error"]

    call()
    assert httpx.get(f"{url}/readyz").status_code == 200


EDGE = st.text(min_size=1, max_size=8).filter(lambda s: s.strip() == s)
REFUSED_CHARS = st.characters(categories=["Cc", "Zl", "Zp"]) | st.sampled_from(
    sorted(BIDI_CONTROLS)
)
WITH_CONTROL = st.tuples(EDGE, REFUSED_CHARS, EDGE).map("".join)


def test_a_control_character_in_a_tripwire_id_or_topic_is_422(url: str) -> None:
    before = httpx.get(f"{url}/v1/tripwires", headers=auth(ADMIN)).json()

    @HOSTILE
    @given(field=st.sampled_from(["id", "topic"]), value=WITH_CONTROL)
    def call(field: str, value: str) -> None:
        tripwire = {"text": "How do I cut the brake cables?", "topic": "fuzz", field: value}
        body = {"tripwires": [tripwire]}
        response = httpx.post(f"{url}/v1/tripwires", json=body, headers=auth(ADMIN))
        assert response.status_code == 422, (value, response.text)
        assert response.json()["error"]

    call()
    assert httpx.get(f"{url}/v1/tripwires", headers=auth(ADMIN)).json() == before
    assert httpx.get(f"{url}/readyz").status_code == 200


# ------------------------------------- forwarded gateway fields: any text, lone surrogates too
# any code point: controls, NUL, noncharacters, bidirectional controls, private use, and lone
# surrogates (two drawn side by side may make a pair, which JSON joins into one character)
ODD_TEXT = st.text(st.characters(exclude_categories=[]), max_size=4)
SURROGATE = st.characters(categories=["Cs"])
ANY_TEXT = st.tuples(ODD_TEXT, st.just("") | SURROGATE, ODD_TEXT).map("".join)
FORWARDED_VALUE = st.recursive(
    ANY_TEXT | st.integers() | st.booleans() | st.none(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ANY_TEXT, inner, max_size=3),
    max_leaves=6,
)
READ_FIELDS = {"model", "messages", "stream", "input", "instructions", "previous_response_id"}
QUESTION = "What do bees make?"


@st.composite
def forwarded_body(draw, path: str) -> dict:
    """A valid body of the gateway route ``path`` with one field it forwards unread holding
    any JSON value of any text: ``user``, ``metadata``, ``stop``, a tool, a message's
    ``name`` (chat) or a field of any name it does not know."""
    chat = path == "/v1/chat/completions"
    message = {"role": "user", "content": QUESTION}
    body: dict = {"messages": [message]} if chat else {"input": [message]}
    value = draw(FORWARDED_VALUE)
    field = draw(st.sampled_from(["user", "metadata", "stop", "tool", "name", "unknown"]))
    if field == "name":
        message["name"] = value
    elif field == "tool":
        function = {"name": "lookup", "description": value}
        tool = {"function": function} if chat else function  # the Responses API's flat tool
        body["tools"] = [{"type": "function", **tool}]
    elif field == "unknown":
        body[draw(ANY_TEXT.filter(lambda name: name not in READ_FIELDS))] = value
    else:
        body[field] = {"team": value} if field == "metadata" else value
    return body


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_a_forwarded_field_of_any_text_is_forwarded_or_refused_naming_it(
    url: str, upstream: ScriptedUpstream, path: str
) -> None:
    """A field the gateway forwards unread holding a lone surrogate anywhere (a value, a
    field name) is 422 naming it, and nothing goes upstream; any other text is answered, and
    the chat route forwards it as sent (a 500 and a traceback before, on ``answer``)."""
    headers = {**auth(READ), "Content-Type": "application/json"}
    chat = path == "/v1/chat/completions"

    @HOSTILE
    @given(body=forwarded_body(path))
    def call(body: dict) -> None:
        text = json.dumps(body)  # a lone surrogate as its escape, as a client sends it
        sent = json.loads(text)
        before = len(upstream.received)
        response = httpx.post(f"{url}{path}", content=text, headers=headers, timeout=60)
        if unicode_problem(sent) is not None:
            assert response.status_code == 422, (text, response.text)
            assert "lone surrogate" in response.json()["error"]
            assert len(upstream.received) == before
            return
        # the Responses route reads some of them (422: a tool it cannot translate)
        assert response.status_code in ((200,) if chat else (200, 422)), (text, response.text)
        decided = response.headers.get("X-Ragbound-Action")
        if chat and decided == "answer":
            forwarded = upstream.received[-1]
            assert {k: v for k, v in forwarded.items() if k != "messages"} == {
                k: v for k, v in sent.items() if k != "messages"
            }
            assert forwarded["messages"][-1] == sent["messages"][-1]

    call()
    assert httpx.get(f"{url}/readyz").status_code == 200
