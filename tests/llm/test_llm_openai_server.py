"""The openai backend against a real OpenAI-compatible server on loopback: llama-cpp-python's
own server (``python -m llama_cpp.server``) on the bundled model."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragbound.knowledge import KnowledgeBase
from ragbound.llm import ChatMessage, GenerationParams, LLMError, make_llm
from tests.llm.llama_server import ALIAS, KEY, llama_server
from tests.markers import needs_local_server

pytestmark = [
    pytest.mark.slow,
    needs_local_server,
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with llama_server(tmp_path_factory.mktemp("server")) as base_url:
        yield base_url


def test_the_openai_backend_talks_to_a_real_server(server: str) -> None:
    llm = make_llm(f"openai:{ALIAS}", base_url=server, api_key=KEY)
    question = [ChatMessage(role="user", content="What is the capital of France? One word.")]
    reply = llm.complete(question, GenerationParams(max_tokens=16, seed=1))
    assert "paris" in reply.text.lower()
    assert reply.model and (reply.completion_tokens or 0) > 0 and reply.seconds > 0
    import asyncio

    again = asyncio.run(llm.acomplete(question, GenerationParams(max_tokens=16, seed=1)))
    assert "paris" in again.text.lower()


def test_a_wrong_key_is_a_clear_error_not_a_retry_loop(server: str) -> None:
    llm = make_llm(f"openai:{ALIAS}", base_url=server, api_key="wrong-key")
    start = time.monotonic()
    with pytest.raises(LLMError, match="401"):
        llm.complete([ChatMessage(role="user", content="hi")], GenerationParams(max_tokens=4))
    assert time.monotonic() - start < 30


def test_synthetic_calibration_through_the_server(
    server: str, minilm_kb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from ragbound.cli import app

    monkeypatch.setenv("RAGBOUND_LLM_BASE_URL", server)
    monkeypatch.setenv("RAGBOUND_LLM_API_KEY", KEY)
    monkeypatch.setenv("RAGBOUND_CACHE", str(tmp_path / "cache"))  # a cold response cache
    kb_dir = tmp_path / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(kb_dir)
    queries = tmp_path / "synthetic.jsonl"
    runner = CliRunner()
    args = ["synth", str(kb_dir), "--n", "4", "--out", str(queries), "--llm", f"openai:{ALIAS}"]
    synth = runner.invoke(app, args)
    assert synth.exit_code == 0, synth.output
    lines = queries.read_text().splitlines()
    assert len(lines) == 4 and f'"model":"{ALIAS}"' in lines[0].replace(" ", "")
    calibrate = ["calibrate", str(kb_dir), "--queries", str(queries), "--k", "4", "--alpha", "0.25"]
    assert runner.invoke(app, calibrate).exit_code == 0
    decide = runner.invoke(app, ["decide", str(kb_dir), "Who painted the Mona Lisa?", "--json"])
    assert decide.exit_code == 0 and '"p_value"' in decide.output
