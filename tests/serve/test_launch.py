"""What ``ragbound serve`` assembles before it serves (ragbound.serve.launch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragbound.detect import Guard
from ragbound.errors import InputError
from ragbound.gate import DEFAULT_ABSTENTION, DEFAULT_CONTEXT_K, DEFAULT_REFUSAL
from ragbound.gate_texts import DEFAULT_CONTEXT_TEMPLATE
from ragbound.knowledge import KnowledgeBase
from ragbound.serve import ServeSettings
from ragbound.serve.gateway import (
    CONNECT_TIMEOUT_S,
    DEFAULT_CONTEXT_CHARS,
    DEFAULT_UPSTREAM_TIMEOUT_S,
    Upstream,
)
from ragbound.serve.launch import context_budget, gate_loader, gateway_settings, log_rotation
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE

URL = "http://127.0.0.1:9/v1"
REPLIES = {"refusal": DEFAULT_REFUSAL, "abstention": DEFAULT_ABSTENTION}


def test_the_serve_options_set_the_budget() -> None:
    default = gateway_settings(URL, None, None, False, REPLIES, context_budget(None, None))
    assert default is not None
    assert (default.context_chunks, default.context_chars) == (5, DEFAULT_CONTEXT_CHARS)
    unbounded = gateway_settings(URL, None, None, False, REPLIES, context_budget(8, 0))
    assert unbounded is not None
    assert (unbounded.context_chunks, unbounded.context_chars) == (8, None)


def test_the_upstream_timeout_option_sets_connect_and_read() -> None:
    default = gateway_settings(URL, None, None, False, REPLIES, {})
    short = gateway_settings(URL, None, None, False, REPLIES, {}, 1.5)
    assert default is not None and short is not None
    assert default.timeout_s == DEFAULT_UPSTREAM_TIMEOUT_S
    timeout = Upstream(short).client.timeout
    assert (timeout.connect, timeout.read, timeout.write) == (1.5, 1.5, 1.5)
    assert Upstream(default).client.timeout.connect == CONNECT_TIMEOUT_S


def test_without_an_upstream_there_is_no_gateway_and_its_options_are_refused(tmp_path: Path):
    assert gateway_settings(None, None, None, False, REPLIES, {}) is None
    key = tmp_path / "key.txt"
    key.write_text("sk-upstream\n")
    for given in [(key, None, False, {}, None), (None, None, True, {}, None)]:
        key_file, template, pass_through, budget, timeout = given
        with pytest.raises(InputError, match="need --upstream"):
            gateway_settings(None, key_file, template, pass_through, REPLIES, budget, timeout)
    with pytest.raises(InputError, match="need --upstream"):
        gateway_settings(None, None, None, False, REPLIES, {}, 2.0)


def test_the_key_file_s_first_line_is_the_api_key_and_an_empty_one_is_refused(tmp_path: Path):
    key = tmp_path / "key.txt"
    key.write_text("  sk-upstream  \nsecond line\n")
    settings = gateway_settings(URL, key, None, False, REPLIES, {})
    assert settings is not None and settings.api_key == "sk-upstream"
    key.write_text("\n\n")
    with pytest.raises(InputError, match=r"key\.txt: empty; expected the upstream's API key"):
        gateway_settings(URL, key, None, False, REPLIES, {})


def test_templates_are_read_and_checked_naming_their_option(tmp_path: Path):
    template = tmp_path / "context.txt"
    template.write_text("Passages:\n{context}\n")
    settings = gateway_settings(URL, None, template, False, REPLIES, {})
    assert settings is not None and settings.context_template == "Passages:\n{context}\n"
    default = gateway_settings(URL, None, None, False, REPLIES, {})
    assert default is not None and default.context_template == DEFAULT_CONTEXT_TEMPLATE
    template.write_text("no field here\n")
    with pytest.raises(InputError, match=r"context\.txt: "):
        gateway_settings(URL, None, template, False, REPLIES, {})
    with pytest.raises(InputError, match="--refusal"):
        gateway_settings(URL, None, None, False, {"refusal": "{nosuch}"}, {})


def test_pass_through_forwards_without_context(tmp_path: Path):
    settings = gateway_settings(URL, None, None, True, REPLIES, {})
    assert settings is not None and settings.context_template is None
    with pytest.raises(InputError, match="--pass-through forwards chats unchanged"):
        gateway_settings(URL, None, None, True, REPLIES, context_budget(2, None))


def test_the_log_rotates_only_a_log(tmp_path: Path):
    log = tmp_path / "decisions.jsonl"
    rotation = log_rotation(log, 1000, True)
    assert (rotation.max_bytes, rotation.daily) == (1000, True)
    assert log_rotation(None, None, False) == log_rotation(log, None, False)
    for max_bytes, daily in [(1000, False), (None, True)]:
        with pytest.raises(InputError, match="rotate the --log: give --log"):
            log_rotation(None, max_bytes, daily)


def test_the_gate_holds_as_many_neighbours_as_the_gateway_may_add(corpus_dir: Path, tmp_path: Path):
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    kb.save(tmp_path / "kb")
    Guard.calibrate(
        KnowledgeBase.load(tmp_path / "kb"), IN_KNOWLEDGE + MORE_IN_KNOWLEDGE, k=3
    ).save()
    plain = gate_loader(tmp_path / "kb", ServeSettings())()
    assert plain.context_k == DEFAULT_CONTEXT_K and plain.reading == "follow"
    gateway = gateway_settings(URL, None, None, False, REPLIES, context_budget(8, None))
    wide = gate_loader(tmp_path / "kb", ServeSettings(gateway=gateway), reading="last")()
    assert wide.context_k == 8 and wide.reading == "last"
