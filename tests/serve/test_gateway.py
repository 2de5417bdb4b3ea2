"""The drop-in gateway over real HTTP, called with the official ``openai`` client.

The gateway (uvicorn in a thread, a real MiniLM gate with tripwires) sits in front of the
scripted upstream of ``scripted_upstream`` (a TEST DOUBLE replying a fixed text, so these
tests see exactly what was forwarded). ``test_gateway_llama`` runs the same against
llama-cpp-python's real server.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest
from opentelemetry.trace import StatusCode

from ragbound.errors import InputError
from ragbound.gate import DEFAULT_ABSTENTION, DEFAULT_REFUSAL, Gate
from ragbound.gate_texts import DEFAULT_CONTEXT_TEMPLATE
from ragbound.serve import GatewaySettings, ServeSettings, Tokens, create_app
from ragbound.serve.gateway import (
    DEFAULT_CONTEXT_CHARS,
    budgeted_context,
    check_context_template,
    conversation_id,
    cut_text,
)
from ragbound.serve.shown import DECISION_HEADER
from tests.serve.server import (
    ADMIN,
    READ,
    ThreadServer,
    ask,
    free_port,
    guarded_kb,
    scripted_upstream,
    wait_ready,
)
from tests.spans import STEPS, children, named, no_query_text, recording
from tests.support.instant_upstream import REPLY, ScriptedUpstream
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE
from tests.tripwires.tripwire_texts import UNSAFE

UPSTREAM_KEY = "upstream-key-not-the-callers"
FULL_ASK = {DECISION_HEADER: "full"}


@pytest.fixture(scope="module")
def gate(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Gate:
    return Gate.load(guarded_kb(minilm_kb_dir, tmp_path_factory.mktemp("gateway") / "kb"))


@pytest.fixture(scope="module")
def upstream():
    with scripted_upstream() as double:
        yield double


def gateway_app(gate: Gate, upstream_url: str, **gateway: object):
    settings = GatewaySettings(upstream=f"{upstream_url}/v1", api_key=UPSTREAM_KEY, **gateway)
    tokens = Tokens.from_lines([f"read:{READ}", f"admin:{ADMIN}"])
    return create_app(gate, ServeSettings(tokens=tokens, gateway=settings))


@pytest.fixture(scope="module")
def url(gate: Gate, upstream: ScriptedUpstream):
    with ThreadServer(gateway_app(gate, upstream.url)) as url:
        wait_ready(url)
        yield url


@pytest.fixture
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=READ, max_retries=0, timeout=60)


@pytest.fixture
def admin(url: str) -> openai.OpenAI:
    """A client holding the admin token, which may ask for the whole decision (FULL_ASK)."""
    return openai.OpenAI(base_url=f"{url}/v1", api_key=ADMIN, max_retries=0, timeout=60)


@pytest.fixture(autouse=True)
def upstream_answers(upstream: ScriptedUpstream):
    upstream.status = 200
    yield


# --------------------------------------------------------------------------- answer
def test_answer_goes_upstream_with_the_chunks_as_context(client, upstream, gate) -> None:
    query = IN_KNOWLEDGE[0]
    before = len(upstream.received)
    raw = client.chat.completions.with_raw_response.create(
        model="local-model", messages=ask(query, system="Be brief."), temperature=0.2
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == REPLY
    assert raw.headers["x-ragbound-action"] == "answer"
    decision = completion.model_extra["ragbound"]
    assert decision["action"] == "answer" and decision["shown"] == "summary"
    p_value = decision["p_value"]
    assert float(raw.headers["x-ragbound-p-value"]) == pytest.approx(p_value, 1e-5)
    assert p_value > decision["alpha"]

    assert len(upstream.received) == before + 1
    forwarded = upstream.received[-1]
    system, user = forwarded["messages"]
    assert system["role"] == "system" and system["content"].startswith("Be brief.\n\n")
    chunks = gate.decide(query).neighbours
    assert sum(len(c.text) + 2 for c in chunks) < DEFAULT_CONTEXT_CHARS  # all fit the budget
    for chunk in chunks:
        assert chunk.text in system["content"]  # upstream: the texts; the caller: their ids
    assert decision["chunk_ids"] == [c.chunk_id for c in chunks]
    assert user == {"role": "user", "content": query}
    assert forwarded["model"] == "local-model" and forwarded["temperature"] == 0.2
    # the caller's ragbound token never reaches the upstream; the upstream's own key does
    assert upstream.headers[-1]["authorization"] == f"Bearer {UPSTREAM_KEY}"


def test_a_streamed_answer_is_relayed_with_the_decision_first(client, upstream) -> None:
    stream = client.chat.completions.create(
        model="local-model", messages=ask(IN_KNOWLEDGE[5]), stream=True
    )
    chunks = list(stream)
    assert chunks[0].model_extra["ragbound"]["action"] == "answer"
    assert all("ragbound" not in (c.model_extra or {}) for c in chunks[1:])
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == REPLY
    assert upstream.received[-1]["stream"] is True
    assert upstream.received[-1]["messages"][0]["role"] == "system"  # a new first message


# --------------------------------------------------------------- answered by ragbound
ANSWERED_HERE = pytest.mark.parametrize(
    ("query", "action", "reply"),
    [(OUT_OF_KNOWLEDGE[0], "abstain", DEFAULT_ABSTENTION), (UNSAFE[1], "reject", DEFAULT_REFUSAL)],
)
"""A query the gateway answers itself, with its action and its reply."""


@ANSWERED_HERE
@pytest.mark.parametrize("stream", [False, True])
def test_abstain_and_reject_never_reach_the_upstream(
    client, upstream, query: str, action: str, reply: str, stream: bool
) -> None:
    before = len(upstream.received)
    raw = client.chat.completions.with_raw_response.create(
        model="local-model", messages=ask(query), stream=stream
    )
    assert raw.headers["x-ragbound-action"] == action
    if stream:
        chunks = list(raw.parse())
        decision = chunks[0].model_extra["ragbound"]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert chunks[-1].choices[0].finish_reason == "stop"
    else:
        completion = raw.parse()
        decision = completion.model_extra["ragbound"]
        text = completion.choices[0].message.content
        assert completion.model == "local-model" and completion.choices[0].finish_reason == "stop"
    assert text == reply
    assert decision["action"] == action
    cause = {"abstain": "out_of_knowledge", "reject": "forbidden"}[action]
    assert raw.headers["x-ragbound-cause"] == decision["cause"] == cause
    assert "x-ragbound-answerability-p-value" not in raw.headers  # no such test calibrated
    assert len(upstream.received) == before
    if action == "reject":
        assert decision["trigger_ids"]
        assert raw.headers["x-ragbound-triggers"] == ",".join(decision["trigger_ids"])
    else:
        assert decision["p_value"] <= decision["alpha"] and not decision["trigger_ids"]


def test_the_last_user_message_is_the_one_decided(admin, upstream) -> None:
    messages = [
        {"role": "user", "content": IN_KNOWLEDGE[3]},
        {"role": "assistant", "content": "About two thousand."},
        {"role": "user", "content": [{"type": "text", "text": IN_KNOWLEDGE[2]}]},
    ]
    completion = admin.chat.completions.create(model="m", messages=messages, extra_headers=FULL_ASK)
    assert completion.model_extra["ragbound"]["query"] == IN_KNOWLEDGE[2]
    assert upstream.received[-1]["messages"][1:] == messages


# ------------------------------------------------------------------ modes and errors
def test_pass_through_forwards_the_chat_unchanged(gate, upstream) -> None:
    with ThreadServer(gateway_app(gate, upstream.url, context_template=None)) as url:
        wait_ready(url)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=READ, max_retries=0)
        messages = ask(IN_KNOWLEDGE[3], system="Be brief.")
        completion = client.chat.completions.create(model="m", messages=messages)
    assert completion.choices[0].message.content == REPLY
    assert upstream.received[-1]["messages"] == messages


def test_the_upstream_s_own_errors_reach_the_caller(client, upstream) -> None:
    upstream.status = 400
    with pytest.raises(openai.BadRequestError, match="scripted failure") as failure:
        client.chat.completions.create(model="m", messages=ask(IN_KNOWLEDGE[4]))
    assert failure.value.response.headers["x-ragbound-action"] == "answer"


def test_an_unreachable_upstream_is_a_502(gate) -> None:
    with ThreadServer(gateway_app(gate, f"http://127.0.0.1:{free_port()}")) as url:
        wait_ready(url)
        reply = httpx.post(
            f"{url}/v1/chat/completions",
            json={"messages": ask(IN_KNOWLEDGE[0])},
            headers={"Authorization": f"Bearer {READ}"},
            timeout=60,
        )
    assert reply.status_code == 502
    assert "unreachable" in reply.json()["error"]


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"messages": [{"role": "system", "content": "hi"}]}, 422, "no user message"),
        ({"messages": []}, 422, "messages"),
        ({"model": "m"}, 422, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 422, "no text"),
    ],
)
def test_bad_chats_are_422_with_a_reason(url: str, body: dict, status: int, fragment: str) -> None:
    reply = httpx.post(
        f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {READ}"}
    )
    assert reply.status_code == status
    assert fragment in reply.json()["error"]


def test_the_gateway_needs_a_read_token(url: str) -> None:
    reply = httpx.post(f"{url}/v1/chat/completions", json={"messages": ask(IN_KNOWLEDGE[0])})
    assert reply.status_code == 401


def test_without_an_upstream_there_is_no_gateway_route(gate) -> None:
    paths = {getattr(route, "path", None) for route in create_app(gate).routes}
    assert "/v1/decide" in paths and "/v1/chat/completions" not in paths


# ------------------------------------------------------------------------ tracing
@pytest.fixture
def spans():
    with recording() as exporter:
        yield exporter


def test_tracing_puts_the_decision_and_the_upstream_call_under_the_chat(client, spans) -> None:
    query = IN_KNOWLEDGE[6]
    raw = client.chat.completions.with_raw_response.create(model="m", messages=ask(query))
    assert raw.headers["x-ragbound-action"] == "answer"
    (request,) = named(spans, "ragbound.chat")
    assert request.parent is None
    assert request.attributes["ragbound.action"] == "answer"
    p_value = raw.parse().model_extra["ragbound"]["p_value"]
    assert request.attributes["ragbound.p_value"] == pytest.approx(p_value)
    # the service embeds a batch on one thread and decides it on another: siblings
    under = ["ragbound.embed", "ragbound.decide", "ragbound.upstream"]
    assert [s.name for s in children(spans, request)] == under
    (decide,) = named(spans, "ragbound.decide")
    assert [s.name for s in children(spans, decide)] == STEPS[1:]
    assert decide.attributes["ragbound.p_value"] == pytest.approx(p_value)
    (call,) = named(spans, "ragbound.upstream")
    assert call.status.status_code != StatusCode.ERROR
    assert no_query_text(spans, query)


def test_tracing_shows_no_upstream_call_on_abstain_and_reject(client, spans) -> None:
    for query in (OUT_OF_KNOWLEDGE[2], UNSAFE[1]):
        client.chat.completions.create(model="m", messages=ask(query))
    actions = [s.attributes["ragbound.action"] for s in named(spans, "ragbound.chat")]
    assert actions == ["abstain", "reject"]
    assert not named(spans, "ragbound.upstream")


def test_tracing_marks_an_upstream_failure_as_an_error(client, upstream, spans) -> None:
    upstream.status = 500
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=ask(IN_KNOWLEDGE[7]))
    (call,) = named(spans, "ragbound.upstream")
    assert call.status.status_code == StatusCode.ERROR


# ------------------------------------------------------------------------ the parts
@pytest.mark.parametrize(
    ("template", "fragment"),
    [("no field", "no {context} field"), ("{context} {other}", "only the field {context}")],
)
def test_a_bad_context_template_is_refused(template: str, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment.replace("{", r"\{").replace("}", r"\}")):
        check_context_template(template)
    assert check_context_template("{{json}} {context}") == "{{json}} {context}"


def test_a_chat_is_decided_as_one_conversation_with_its_id(admin, upstream) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": IN_KNOWLEDGE[1]},
        {"role": "assistant", "content": "Honey."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And how do"},
                {"type": "image_url", "image_url": {"url": "x"}},
                {"type": "text", "text": "they store it?"},
            ],
        },
    ]
    completion = admin.chat.completions.create(
        model="m",
        messages=messages,
        metadata={"conversation_id": "chat-42"},
        extra_headers=FULL_ASK,
    )
    decision = completion.model_extra["ragbound"]
    assert decision["query"] == "And how do\nthey store it?"  # the text parts joined
    assert decision["conversation"]["turn"] == 1 and decision["conversation"]["id"] == "chat-42"
    assert upstream.received[-1]["messages"][1:] == messages[1:]


def test_the_conversation_id_is_a_string_in_the_metadata() -> None:
    assert conversation_id({"metadata": {"conversation_id": "c-1"}}) == "c-1"
    for fields in ({"metadata": {"conversation_id": 42}}, {"metadata": "c"}, {}, None):
        assert conversation_id(fields) is None


# ------------------------------------------------------------------ the context budget
def test_the_context_budget_keeps_whole_chunks_nearest_first(gate) -> None:
    decision = gate.decide(IN_KNOWLEDGE[0])
    texts = [c.text for c in decision.neighbours]
    assert len(texts) >= 3
    assert budgeted_context(decision, 5, None) == "\n\n".join(texts)
    assert budgeted_context(decision, 2, None) == "\n\n".join(texts[:2])
    two = len(texts[0]) + 2 + len(texts[1])
    assert budgeted_context(decision, 5, two) == "\n\n".join(texts[:2])
    assert budgeted_context(decision, 5, two + 1) == "\n\n".join(texts[:2])  # 3rd: no room
    assert budgeted_context(decision, 5, two - 1) == texts[0]  # the 2nd is dropped, not cut


def test_a_first_chunk_over_the_budget_is_cut_at_a_sentence_then_a_word() -> None:
    text = "Bees make honey from nectar.  They store it\nin wax cells. Workers fan it dry."
    assert cut_text(text, 1000) == " ".join(text.split())
    assert cut_text(text, 60) == "Bees make honey from nectar. They store it in wax cells."
    assert cut_text(text, 40) == "Bees make honey from nectar."
    # a sentence end that keeps less than half the budget: cut after a whole word instead
    short_first = "Bees. They store honey in wax cells and fan it dry with their wings."
    assert cut_text(short_first, 30) == "Bees. They store honey in wax"
    assert cut_text("Pneumonoultramicroscopic", 10) == "Pneumonoul"


def test_the_context_budget_is_what_goes_upstream(gate, upstream) -> None:
    query = IN_KNOWLEDGE[0]
    nearest = gate.decide(query).neighbours[0].text
    for options, expected in [
        ({"context_chunks": 1}, nearest),
        ({"context_chars": 40}, cut_text(nearest, 40)),
    ]:
        with ThreadServer(gateway_app(gate, upstream.url, **options)) as url:
            wait_ready(url)
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=READ, max_retries=0)
            client.chat.completions.create(model="m", messages=ask(query))
        system = upstream.received[-1]["messages"][0]["content"]
        assert system == DEFAULT_CONTEXT_TEMPLATE.format(context=expected)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"context_chunks": 0}, "context_chunks must be an integer >= 1"),
        ({"context_chars": -5}, "context_chars must be an integer >= 1"),
        ({"context_chunks": True}, "context_chunks"),
    ],
)
def test_a_bad_context_budget_is_refused(options: dict, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment):
        GatewaySettings(upstream="http://127.0.0.1:9/v1", **options)


@pytest.mark.parametrize("seconds", [0, -1.0, float("nan"), float("inf"), True, "5"])
def test_a_bad_upstream_timeout_is_refused(seconds: object) -> None:
    with pytest.raises(InputError, match="timeout_s must be a finite number of seconds > 0"):
        GatewaySettings(upstream="http://127.0.0.1:9/v1", timeout_s=seconds)  # type: ignore[arg-type]
