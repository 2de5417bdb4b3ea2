"""``POST /v1/responses`` over real HTTP, called with the official ``openai`` client.

The gateway (uvicorn in a thread, a real MiniLM gate with tripwires) sits in front of the
scripted chat-completions upstream of ``test_gateway`` (a TEST DOUBLE replying a fixed text,
so these tests see the chat request each Responses request was translated to).
``test_gateway_llama`` runs it against llama-cpp-python's real server.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from ragbound.errors import InputError
from ragbound.gate_texts import DEFAULT_CONTEXT_TEMPLATE
from ragbound.serve.gateway import budgeted_context
from ragbound.serve.responses import ResponsesRequest, ResponsesShape, to_chat
from ragbound.serve.shown import shown
from tests.serve import test_gateway
from tests.serve.server import READ, ThreadServer, auth, wait_ready
from tests.spans import named, recording
from tests.support.instant_upstream import REPLY
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

# the chat gateway's fixtures: its gate, scripted upstream and service (one each per module)
gate, upstream, url, client = (
    test_gateway.gate,
    test_gateway.upstream,
    test_gateway.url,
    test_gateway.client,
)
upstream_answers = test_gateway.upstream_answers
EVENT: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)


# --------------------------------------------------------------------------- answer
def test_an_answer_goes_upstream_as_a_chat_with_the_context(client, upstream, gate) -> None:
    query = IN_KNOWLEDGE[0]
    before = len(upstream.received)
    raw = client.responses.with_raw_response.create(
        model="local-model",
        instructions="Be brief.",
        input=query,
        max_output_tokens=40,
        temperature=0.2,
        store=True,
        extra_body={"seed": 7},
    )
    response = raw.parse()
    assert response.output_text == REPLY
    assert response.status == "completed" and response.object == "response"
    assert response.usage.input_tokens == 3 and response.usage.output_tokens == 5
    assert response.instructions == "Be brief." and response.model == "local-model"
    decision = response.model_extra["ragbound"]
    assert decision["action"] == "answer" and raw.headers["x-ragbound-action"] == "answer"
    assert float(raw.headers["x-ragbound-p-value"]) == pytest.approx(decision["p_value"], 1e-5)

    assert len(upstream.received) == before + 1
    forwarded = upstream.received[-1]
    context = DEFAULT_CONTEXT_TEMPLATE.format(context=budgeted_context(gate.decide(query), 5, 4000))
    assert forwarded["messages"] == [
        {"role": "system", "content": f"Be brief.\n\n{context}"},
        {"role": "user", "content": query},
    ]
    assert forwarded["model"] == "local-model" and forwarded["max_tokens"] == 40
    assert forwarded["temperature"] == 0.2 and forwarded["seed"] == 7  # not in the API: passed
    assert "store" not in forwarded and "max_output_tokens" not in forwarded


def test_a_streamed_answer_comes_as_the_responses_api_s_events(client, upstream) -> None:
    events = list(client.responses.create(model="m", input=IN_KNOWLEDGE[5], stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[2:4] == ["response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == REPLY
    assert events[0].response.model_extra["ragbound"]["action"] == "answer"
    final = events[-1].response
    assert final.output_text == REPLY and final.status == "completed"
    assert final.model_extra["ragbound"]["action"] == "answer"
    assert upstream.received[-1]["stream"] is True


def test_the_conversation_id_is_the_metadata_s(client) -> None:
    response = client.responses.create(
        model="m", input=IN_KNOWLEDGE[1], metadata={"conversation_id": "chat-7"}
    )
    assert response.model_extra["ragbound"]["conversation"]["id"] == "chat-7"
    assert response.metadata == {"conversation_id": "chat-7"}


def test_the_client_s_stream_helper_assembles_the_response(client) -> None:
    with client.responses.stream(model="m", input=IN_KNOWLEDGE[6]) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == REPLY == final.output_text


@pytest.mark.parametrize("query", [IN_KNOWLEDGE[0], OUT_OF_KNOWLEDGE[0]], ids=["upstream", "own"])
def test_responses_and_events_validate_as_the_openai_package_s_types(url: str, query: str) -> None:
    """Strictly (the client itself builds its objects without validating them)."""
    body = {"model": "m", "input": query, "max_output_tokens": 30}
    Response.model_validate(post(url, body).json())
    with httpx.stream(
        "POST", f"{url}/v1/responses", json={**body, "stream": True}, headers=auth(READ)
    ) as reply:
        lines = [line for line in reply.iter_lines() if line.startswith("data:")]
    events = [EVENT.validate_json(line.removeprefix("data:")) for line in lines]
    assert events[-1].type == "response.completed"
    Response.model_validate(events[-1].response.model_dump())


def test_a_conversation_as_input_items_is_translated_to_chat_messages(client, upstream) -> None:
    first = IN_KNOWLEDGE[3]
    items = [
        {"role": "developer", "content": "Answer in English."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": first}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "About two thousand."}],
        },
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "nothing"},
        {"role": "user", "content": [{"type": "input_text", "text": IN_KNOWLEDGE[2]}]},
    ]
    response = client.responses.create(model="m", input=items)
    assert response.model_extra["ragbound"]["action"] == "answer"
    messages = upstream.received[-1]["messages"]
    assert messages[0]["role"] == "system"
    assert messages[0]["content"].startswith("Answer in English.\n\n")
    call = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    assert messages[1:] == [
        {"role": "user", "content": first},
        # a function call after the assistant's message joins it (reasoning is dropped)
        {"role": "assistant", "content": "About two thousand.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "nothing"},
        {"role": "user", "content": IN_KNOWLEDGE[2]},
    ]


# --------------------------------------------------------------- answered by ragbound
@test_gateway.ANSWERED_HERE
@pytest.mark.parametrize("stream", [False, True])
def test_abstain_and_reject_are_answered_by_the_gateway(
    client, upstream, query: str, action: str, reply: str, stream: bool
) -> None:
    before = len(upstream.received)
    raw = client.responses.with_raw_response.create(model="m", input=query, stream=stream)
    assert raw.headers["x-ragbound-action"] == action
    if stream:
        events = list(raw.parse())
        assert events[0].type == "response.created" and events[-1].type == "response.completed"
        decision = events[0].response.model_extra["ragbound"]
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert events[-1].response.output_text == reply
    else:
        response = raw.parse()
        decision = response.model_extra["ragbound"]
        text = response.output_text
        assert response.status == "completed" and response.model == "m"
    assert text == reply
    assert decision["action"] == action
    assert len(upstream.received) == before
    if action == "reject":
        assert raw.headers["x-ragbound-triggers"] == ",".join(decision["trigger_ids"])


# ------------------------------------------------------------------------- bad input
def post(url: str, body: object) -> httpx.Response:
    return httpx.post(f"{url}/v1/responses", json=body, headers=auth(READ), timeout=60)


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"input": ""}, 422, "no text"),
        ({"input": "   "}, 422, "no text"),
        ({"input": []}, 422, "no messages"),
        ({"model": "m"}, 422, "input"),
        ({"input": 42}, 422, "input must be a string or a list of input items, not int"),
        ({"input": {"role": "user"}}, 422, "not dict"),
        ({"input": ["hello"]}, 422, "input"),
        ({"instructions": "Be kind.", "input": []}, 422, "no user message"),
        ({"input": [{"role": "system", "content": "hi"}]}, 422, "no user message"),
        ({"input": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "."}]},
         422, "the last message is the assistant's"),
        ({"input": [{"role": "robot", "content": "hi"}]}, 422, "unknown role 'robot'"),
        ({"input": [{"type": "carrier_pigeon"}]}, 422, "unknown item type 'carrier_pigeon'"),
        ({"input": [{"type": "web_search_call", "id": "ws"}]}, 422, "hosted tools"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
         422, "input_file part cannot be sent"),
        ({"input": [{"role": "user", "content": [{"text": "no type"}]}]}, 422, "'type'"),
        ({"input": [{"role": "user", "content": 7}]}, 422, "content must be a string"),
        ({"input": [{"type": "function_call", "name": "f"}]}, 422, "'call_id' string"),
        ({"input": "Hi?", "tools": [{"type": "web_search"}]}, 422, "only function tools"),
        ({"input": "Hi?", "tool_choice": {"type": "web_search"}}, 422, "tool_choice"),
        ({"input": "Hi?", "text": {"format": {"type": "xml"}}}, 422, "text.format"),
        ({"input": "Hi?", "previous_response_id": "resp_1"}, 400, "send the whole conversation"),
        ({"input": "Hi?", "conversation": "conv_1"}, 400, "conversation is not supported"),
        ({"input": "Hi?", "background": True}, 400, "background is not supported"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, 400, "item_reference"),
    ],
)  # fmt: skip
def test_bad_input_is_a_4xx_json_error(url: str, body: object, status: int, fragment: str) -> None:
    reply = post(url, body)
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"] == "application/json"
    assert fragment in reply.json()["error"]


def test_a_lone_surrogate_is_422_not_a_crash(url: str) -> None:
    body = '{"input": [{"role": "user", "content": "Do bees \\ud800 dance?"}]}'
    headers = {**auth(READ), "Content-Type": "application/json"}
    reply = httpx.post(f"{url}/v1/responses", content=body, headers=headers, timeout=60)
    assert reply.status_code == 422
    assert "lone surrogate" in reply.json()["error"]


def test_the_official_client_raises_on_previous_response_id(client, upstream) -> None:
    before = len(upstream.received)
    with pytest.raises(openai.BadRequestError) as failure:
        client.responses.create(model="m", input="And then?", previous_response_id="resp_1")
    assert "keeps no state" in failure.value.response.json()["error"]
    assert len(upstream.received) == before


def test_the_upstream_s_own_errors_reach_the_caller(client, upstream) -> None:
    upstream.status = 400
    with pytest.raises(openai.BadRequestError, match="scripted failure") as failure:
        client.responses.create(model="m", input=IN_KNOWLEDGE[4])
    assert failure.value.response.headers["x-ragbound-action"] == "answer"


def test_a_read_token_is_needed(url: str) -> None:
    assert httpx.post(f"{url}/v1/responses", json={"input": "Hi?"}).status_code == 401


def test_tracing_names_the_request_and_its_upstream_call(client) -> None:
    with recording() as spans:
        client.responses.create(model="m", input=IN_KNOWLEDGE[7])
        client.responses.create(model="m", input=OUT_OF_KNOWLEDGE[2])
    actions = [s.attributes["ragbound.action"] for s in named(spans, "ragbound.responses")]
    assert actions == ["answer", "abstain"]
    assert len(named(spans, "ragbound.upstream")) == 1


def test_pass_through_forwards_the_translated_chat(gate, upstream) -> None:
    with ThreadServer(test_gateway.gateway_app(gate, upstream.url, context_template=None)) as url:
        wait_ready(url)  # the gate loads on a thread: a request before it is a 503
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=READ, max_retries=0)
        client.responses.create(model="m", instructions="Be brief.", input=IN_KNOWLEDGE[3])
    assert upstream.received[-1]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": IN_KNOWLEDGE[3]},
    ]


# ------------------------------------------------------------------- the translation
def request(**fields: object) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"input": "Hi?", **fields})


def test_tools_and_formats_are_translated_to_their_chat_forms() -> None:
    tool = {"type": "function", "name": "f", "description": "d", "parameters": {}, "strict": True}
    schema = {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": True}
    chat = to_chat(
        request(
            tools=[tool],
            tool_choice={"type": "function", "name": "f"},
            text={"format": schema},
            parallel_tool_calls=False,
            include=["reasoning.encrypted_content"],
            metadata={"conversation_id": "c"},
        )
    ).model_dump(exclude_unset=True)
    function = {"name": "f", "description": "d", "parameters": {}, "strict": True}
    assert chat["tools"] == [{"type": "function", "function": function}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    json_schema = {"name": "n", "schema": {"type": "object"}, "strict": True}
    assert chat["response_format"] == {"type": "json_schema", "json_schema": json_schema}
    assert chat["parallel_tool_calls"] is False
    assert "include" not in chat and "metadata" not in chat
    plain = to_chat(request(text={"format": {"type": "text"}}, tool_choice="required"))
    assert "response_format" not in plain.model_dump(exclude_unset=True)
    assert plain.model_extra["tool_choice"] == "required"


def test_function_calls_become_one_assistant_message_with_tool_calls() -> None:
    calls = [
        {"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{}"}
        for i in (1, 2)
    ]
    outputs = [{"type": "function_call_output", "call_id": f"c{i}", "output": "ok"} for i in (1, 2)]
    chat = to_chat(request(input=[{"role": "user", "content": "Hi?"}, *calls, *outputs]))
    _, assistant, *tools = chat.model_dump(exclude_unset=True)["messages"]
    assert assistant["role"] == "assistant" and assistant["content"] is None
    assert [call["id"] for call in assistant["tool_calls"]] == ["c1", "c2"]
    assert [(t["role"], t["tool_call_id"]) for t in tools] == [("tool", "c1"), ("tool", "c2")]


def test_an_image_part_stays_a_part_and_parts_of_text_are_joined() -> None:
    image = {"type": "input_image", "image_url": "https://example.org/bee.png"}
    text = {"type": "input_text", "text": "What is this?"}
    chat = to_chat(request(input=[{"role": "user", "content": [text, image]}]))
    assert chat.model_dump(exclude_unset=True)["messages"][0]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": image["image_url"], "detail": "auto"}},
    ]
    with pytest.raises(InputError, match="input_image part cannot be sent"):
        to_chat(request(input=[{"role": "user", "content": [{"type": "input_image"}]}]))


def test_a_completion_s_tool_calls_and_length_stop_become_a_response(gate) -> None:
    decision = shown(gate.decide(IN_KNOWLEDGE[0]), full=False)  # as a reply shows it
    call = {"id": "c9", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    completion = {
        "model": "upstream-model",
        "choices": [
            {"message": {"content": "Part", "tool_calls": [call]}, "finish_reason": "length"}
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13},
    }
    response = ResponsesShape(request()).reply(completion, decision)
    message, function_call = response["output"]
    assert message["content"][0]["text"] == "Part"
    assert function_call == {
        "type": "function_call",
        "id": "fc_c9",
        "status": "completed",
        "call_id": "c9",
        "name": "f",
        "arguments": '{"a":1}',
    }
    assert response["status"] == "incomplete" and response["model"] == "upstream-model"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["usage"]["input_tokens"] == 11 and response["usage"]["total_tokens"] == 13


def relayed(lines: list[str], decision: dict) -> list[dict]:
    async def run() -> list[bytes]:
        async def source():
            for line in lines:
                yield line

        return [event async for event in ResponsesShape(request()).relay(source(), decision)]

    events = []
    for raw in asyncio.run(run()):
        kind, data = raw.decode().strip().split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert kind == f"event: {event['type']}"
        events.append(event)
    return events


def chunk(**delta: object) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]})


def test_streamed_tool_calls_are_assembled_into_function_call_items(gate) -> None:
    decision = shown(gate.decide(IN_KNOWLEDGE[0]), full=False)  # as a reply shows it
    first = {"index": 0, "id": "c1", "function": {"name": "look", "arguments": '{"q":'}}
    rest = {"index": 0, "function": {"arguments": '"bees"}'}}
    lines = [chunk(role="assistant"), "", chunk(tool_calls=[first]), chunk(tool_calls=[rest])]
    events = relayed([*lines, "data: [DONE]"], decision)
    kinds = [e["type"] for e in events]
    assert "response.output_text.delta" not in kinds
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert done["arguments"] == '{"q":"bees"}' and done["name"] == "look"
    (call,) = events[-1]["response"]["output"]
    assert call["type"] == "function_call" and call["call_id"] == "c1"


def test_an_error_in_the_upstream_s_stream_fails_the_response(gate) -> None:
    decision = shown(gate.decide(IN_KNOWLEDGE[0]), full=False)  # as a reply shows it
    error = "data: " + json.dumps({"error": {"message": "out of memory"}})
    events = relayed([chunk(content="Bees"), error], decision)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["message"] == "out of memory"
