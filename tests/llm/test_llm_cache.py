"""The on-disk response cache: hits cost no call, keys cover the request, corruption is a miss."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from ragbound.llm import (
    CachedLLM,
    GenerationParams,
    LLMTimeoutError,
    ResponseCache,
    call,
    default_cache_root,
)
from ragbound.llm.cache import cache_key, request_record
from tests.llm.llm_fakes import ScriptedLLM, echo, user


def cached(tmp_path: Path, **kwargs: object) -> tuple[ScriptedLLM, CachedLLM]:
    fake = ScriptedLLM(responder=echo, **kwargs)  # type: ignore[arg-type]
    return fake, CachedLLM(fake, ResponseCache(tmp_path / "cache"))


def test_second_identical_call_is_a_hit_without_a_model_call(tmp_path: Path) -> None:
    fake, llm = cached(tmp_path)
    first = llm.complete(user("hello"), prompt_id="p", prompt_version=2)
    second = llm.complete(user("hello"), prompt_id="p", prompt_version=2)
    assert len(fake.calls) == 1
    assert (first.cached, second.cached) == (False, True)
    assert second.text == first.text == "answer: hello"
    assert second.created_at == first.created_at and second.seconds == first.seconds


def test_a_fresh_process_reads_the_same_entries(tmp_path: Path) -> None:
    cached(tmp_path)[1].complete(user("hello"))
    fake, llm = cached(tmp_path)
    assert llm.complete(user("hello")).cached and fake.calls == []


@pytest.mark.parametrize(
    "change",
    [
        {"model_id": "fake:other"},
        {"prompt_id": "other"},
        {"prompt_version": 3},
        {"text": "hello!"},
        {"params": GenerationParams(seed=1)},
        {"params": GenerationParams(temperature=0.5)},
        {"params": GenerationParams(max_tokens=10)},
        {"params": GenerationParams(stop=["\n"])},
        {"params": GenerationParams(top_logprobs=5)},
    ],
)
def test_every_part_of_the_request_is_in_the_key(tmp_path: Path, change: dict) -> None:
    base = {"model_id": "fake:scripted", "prompt_id": "p", "prompt_version": 2, "text": "hello"}
    base["params"] = GenerationParams()
    variant = base | change
    root = ResponseCache(tmp_path)
    for request in (base, variant):
        llm = CachedLLM(ScriptedLLM(responder=echo, model_id=request["model_id"]), root)
        reply = llm.complete(
            user(request["text"]),
            request["params"],
            prompt_id=request["prompt_id"],
            prompt_version=request["prompt_version"],
        )
        assert not reply.cached
    assert len(root) == 2


def test_a_key_made_before_top_logprobs_existed_is_unchanged() -> None:
    from ragbound.llm.cache import request_record

    record = request_record("fake:scripted", user("hello"), GenerationParams(), "p", 2)
    assert "top_logprobs" not in record["params"]
    asked = request_record("fake:scripted", user("hello"), GenerationParams(top_logprobs=3), "p", 2)
    assert asked["params"]["top_logprobs"] == 3


def test_entry_layout_and_provenance(tmp_path: Path) -> None:
    _, llm = cached(tmp_path)
    params = GenerationParams(seed=3)
    llm.complete(user("hi"), params, prompt_id="synth-query", prompt_version=1)
    record = request_record("fake:scripted", user("hi"), params, "synth-query", 1)
    key = cache_key(record)
    entry = json.loads((tmp_path / "cache" / key[:2] / f"{key}.json").read_text())
    assert entry["key"] == key and entry["request"] == record
    assert entry["response"]["text"] == "answer: hi"
    provenance = entry["provenance"]
    assert provenance["model_id"] == "fake:scripted" and provenance["model"] == "fake:scripted"
    assert (provenance["prompt_id"], provenance["prompt_version"]) == ("synth-query", 1)
    assert provenance["created_at"].endswith("+00:00")


@pytest.mark.parametrize(
    "content",
    [b"", b"{not json", b"[1, 2]", b'{"format": "ragbound-llm-response/1"}', b"\xff\xfe"],
)
def test_corrupt_entries_are_misses_and_get_overwritten(tmp_path: Path, content: bytes) -> None:
    fake, llm = cached(tmp_path)
    key = cache_key(request_record("fake:scripted", user("hi"), GenerationParams(), None, None))
    path = llm.cache.path(key)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert not llm.complete(user("hi")).cached
    assert llm.complete(user("hi")).cached
    assert len(fake.calls) == 1
    assert json.loads(path.read_text())["key"] == key


def test_an_entry_under_the_wrong_key_is_not_trusted(tmp_path: Path) -> None:
    fake, llm = cached(tmp_path)
    llm.complete(user("a"))
    key_a = cache_key(request_record("fake:scripted", user("a"), GenerationParams(), None, None))
    key_b = cache_key(request_record("fake:scripted", user("b"), GenerationParams(), None, None))
    llm.cache.path(key_b).parent.mkdir(parents=True, exist_ok=True)
    llm.cache.path(key_b).write_bytes(llm.cache.path(key_a).read_bytes())
    assert llm.complete(user("b")).text == "answer: b"
    assert len(fake.calls) == 2


def test_failures_are_not_cached(tmp_path: Path) -> None:
    fake = ScriptedLLM([LLMTimeoutError("slow")], responder=echo)
    llm = CachedLLM(fake, ResponseCache(tmp_path))
    with pytest.raises(LLMTimeoutError):
        llm.complete(user("x"))
    assert llm.complete(user("x")).text == "answer: x"
    assert len(fake.calls) == 2 and len(llm.cache) == 1


def test_an_unwritable_cache_warns_but_returns_the_reply(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    llm = CachedLLM(ScriptedLLM(responder=echo), ResponseCache(blocker / "cache"))
    with pytest.warns(UserWarning, match="could not write LLM cache entry"):
        assert llm.complete(user("x")).text == "answer: x"


def test_async_calls_share_the_cache(tmp_path: Path) -> None:
    fake, llm = cached(tmp_path)
    first = asyncio.run(llm.acomplete(user("a"), prompt_id="p", prompt_version=1))
    second = llm.complete(user("a"), prompt_id="p", prompt_version=1)
    third = asyncio.run(llm.acomplete(user("a"), prompt_id="p", prompt_version=1))
    assert (first.cached, second.cached, third.cached) == (False, True, True)
    assert len(fake.calls) == 1


def test_call_passes_prompt_provenance_only_to_cached_llms(tmp_path: Path) -> None:
    fake, llm = cached(tmp_path)
    call(llm, user("a"), prompt_id="p", prompt_version=4)
    entry = json.loads(next((tmp_path / "cache").glob("??/*.json")).read_text())
    assert entry["provenance"]["prompt_version"] == 4
    assert call(fake, user("a"), prompt_id="p").text == "answer: a"


def test_default_root_follows_ragbound_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RAGBOUND_CACHE", str(tmp_path))
    assert default_cache_root() == tmp_path / "llm"
    assert ResponseCache().root == tmp_path / "llm"
    assert CachedLLM(ScriptedLLM(responder=echo)).cache.root == tmp_path / "llm"
