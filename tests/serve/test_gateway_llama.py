"""The gateway end to end: ``ragbound serve --upstream`` (a child process) in front of
llama-cpp-python's real server on the bundled model, called with the official openai client:
chat completions, and the Responses API, which the gateway translates to chat completions
(llama.cpp's server has no ``/v1/responses``)."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from ragbound.gate import DEFAULT_ABSTENTION, DEFAULT_REFUSAL
from tests.llm.llama_server import ALIAS, KEY, llama_server
from tests.markers import needs_local_server
from tests.serve.server import READ, ChildServer, guarded_kb, log_lines, token_file
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE
from tests.tripwires.tripwire_texts import UNSAFE

pytestmark = [pytest.mark.slow, needs_local_server]


@pytest.fixture(scope="module")
def gateway(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("gateway-llama")
    kb = guarded_kb(minilm_kb_dir, root / "kb")
    key_file = root / "upstream.key"
    key_file.write_text(KEY + "\n", encoding="utf-8")
    with llama_server(root) as upstream:
        child = ChildServer(
            str(kb), "--upstream", upstream, "--upstream-key-file", str(key_file),
            "--token-file", str(token_file(root)), "--log", str(root / "log.jsonl"),
            "--threads", "1", "--context-chunks", "3",
        )  # fmt: skip
        try:
            child.ready()
            yield child.url, root / "log.jsonl"
        finally:
            child.stop()


def ask(client: openai.OpenAI, query: str, **options):
    return client.chat.completions.create(
        model=ALIAS,
        messages=[{"role": "user", "content": query}],
        max_tokens=48,
        temperature=0,
        seed=1,
        **options,
    )


def test_a_real_llm_answers_from_the_gateway_s_context(gateway) -> None:
    url, log = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=READ, max_retries=0, timeout=300)

    answered = ask(client, IN_KNOWLEDGE[1])  # what do worker bees make from nectar?
    assert answered.model_extra["ragbound"]["action"] == "answer"
    assert "honey" in answered.choices[0].message.content.lower()
    assert answered.usage.completion_tokens > 0  # written by the model, not by ragbound

    chunks = list(ask(client, IN_KNOWLEDGE[8], stream=True))  # electric trains' power
    assert chunks[0].model_extra["ragbound"]["action"] == "answer"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed.strip()

    abstained = ask(client, OUT_OF_KNOWLEDGE[0])
    assert abstained.choices[0].message.content == DEFAULT_ABSTENTION
    rejected = list(ask(client, UNSAFE[1], stream=True))
    assert rejected[0].choices[0].delta.content == DEFAULT_REFUSAL

    actions = [line["action"] for line in log_lines(log)]
    assert actions == ["answer", "answer", "abstain", "reject"]


def test_the_responses_api_through_the_gateway_to_a_real_llm(gateway) -> None:
    url, _ = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=READ, max_retries=0, timeout=300)
    options = {"model": ALIAS, "max_output_tokens": 48, "temperature": 0, "extra_body": {"seed": 1}}

    answered = client.responses.create(
        instructions="Answer in one sentence.", input=IN_KNOWLEDGE[1], **options
    )  # what do worker bees make from nectar?
    assert answered.model_extra["ragbound"]["action"] == "answer"
    assert "honey" in answered.output_text.lower()
    assert answered.usage.output_tokens > 0 and answered.usage.input_tokens > 0  # the model's

    conversation = [
        {"role": "user", "content": IN_KNOWLEDGE[1]},
        {"role": "assistant", "content": answered.output_text},
        {"role": "user", "content": [{"type": "input_text", "text": IN_KNOWLEDGE[8]}]},
    ]  # then: what powers electric trains?
    events = list(client.responses.create(input=conversation, stream=True, **options))
    assert events[0].type == "response.created"
    assert events[0].response.model_extra["ragbound"]["action"] == "answer"
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert streamed.strip() and events[-1].type in ("response.completed", "response.incomplete")
    assert events[-1].response.output_text == streamed

    abstained = client.responses.create(input=OUT_OF_KNOWLEDGE[0], **options)
    assert abstained.output_text == DEFAULT_ABSTENTION
    rejected = list(client.responses.create(input=UNSAFE[1], stream=True, **options))
    assert rejected[-1].response.output_text == DEFAULT_REFUSAL
    assert rejected[0].response.model_extra["ragbound"]["action"] == "reject"
