"""Output parsing: JSON repair, tag extraction, and parse-retry against a scripted backend."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragbound.llm import (
    CachedLLM,
    GenerationParams,
    ParseError,
    ResponseCache,
    acomplete_parsed,
    complete_parsed,
    extract_tag,
    load_prompt,
    parse_json_object,
)
from tests.llm.llm_fakes import ScriptedLLM


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"score": 0.5}', {"score": 0.5}),
        ('```json\n{"score": 1, "feedback": "ok"}\n```', {"score": 1, "feedback": "ok"}),
        ('Here you go:\n{"score": 0.2}\nHope it helps!', {"score": 0.2}),
        ('{"a": 1, "b": [1, 2,],}', {"a": 1, "b": [1, 2]}),
        ("{'feedback': 'it\\'s fine', 'score': 0.9}", {"feedback": "it's fine", "score": 0.9}),
        ("{'q': 'say \"hi\"'}", {"q": 'say "hi"'}),
        ('{"ok": True, "bad": False, "none": None}', {"ok": True, "bad": False, "none": None}),
        ('{feedback: "fine", score: 1e-1}', {"feedback": "fine", "score": 0.1}),
        (
            '{"feedback": "line one\nline two", "score": 0}',
            {"feedback": "line one\nline two", "score": 0},
        ),
        (
            '{"feedback": "braces {like} this }", "score": 1}',
            {"feedback": "braces {like} this }", "score": 1},
        ),
        ('{"outer": {"inner": {"x": [1, {"y": 2}]}}}', {"outer": {"inner": {"x": [1, {"y": 2}]}}}),
    ],
)
def test_parse_json_object_reads_and_repairs(text: str, expected: dict) -> None:
    assert parse_json_object(text) == expected


def test_parse_json_object_takes_the_last_outermost_object() -> None:
    text = 'The format is {"score": [SCORE]}. My answer: {"score": 0.7, "detail": {"x": 1}}'
    assert parse_json_object(text) == {"score": 0.7, "detail": {"x": 1}}


def test_parse_json_object_skips_braces_that_are_not_objects() -> None:
    assert parse_json_object('Use {query} here. {"question": "Why?"}') == {"question": "Why?"}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no object at all",
        '{"score": high}',  # a bare word value is never guessed
        '{"score": 0.5',  # truncated output is not closed for the model
        "[1, 2, 3]",  # a list is not an object
        "{'unterminated: 1}",
        '{"detail": {"x": 1}, "score": high}',  # an inner object is not taken for the reply
    ],
)
def test_parse_json_object_raises_with_the_raw_text(text: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_json_object(text)
    assert info.value.raw == text
    assert "no JSON object" in str(info.value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@given(obj=st.dictionaries(st.text(), json_values, max_size=5), prose=st.sampled_from(["", "ok: "]))
def test_any_json_object_in_prose_round_trips(obj: dict, prose: str) -> None:
    assert parse_json_object(f"{prose}{json.dumps(obj)}\nthanks") == obj


@given(
    obj=st.dictionaries(
        st.from_regex(r"[A-Za-z][A-Za-z0-9 ']{0,8}", fullmatch=True),
        st.none() | st.booleans() | st.integers() | st.text(alphabet="ab'\" {}\n"),
        max_size=4,
    )
)
def test_python_dict_reprs_are_repaired(obj: dict) -> None:
    assert parse_json_object(repr(obj)) == obj


def test_extract_tag_returns_the_canonical_spelling_of_the_last_tag() -> None:
    text = "Format: <answer>yes|no</answer>. Thinking... <ANSWER>  No \n</Answer>"
    assert extract_tag(text, "answer", ["Yes", "No"]) == "No"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("I think yes", "no <answer>"),
        ("yes, and no", "no <answer>"),
        ("<answer>yes</answer> then <answer>perhaps</answer>", "'perhaps'"),
        ("<answer>Yes.</answer>", "'Yes.'"),
    ],
)
def test_extract_tag_refuses_missing_or_unlisted_values(text: str, message: str) -> None:
    with pytest.raises(ParseError) as info:
        extract_tag(text, "answer", ["yes", "no"])
    assert info.value.raw == text
    assert message in str(info.value)


@pytest.mark.parametrize("text", ["No", " no.\n", "Answer: NO", "answer:no!"])
def test_extract_tag_accepts_a_reply_that_is_only_an_allowed_value(text: str) -> None:
    assert extract_tag(text, "answer", ["Yes", "No"]) == "No"


def judge_variables() -> dict[str, str]:
    return {"query": "What do bees make?", "context": "Bees make honey."}


def test_complete_parsed_retries_with_a_new_seed_then_succeeds() -> None:
    llm = ScriptedLLM(["not json", '{"feedback": "on topic", "score": 0.9}'])
    prompt = load_prompt("relevance-judge")
    parsed = complete_parsed(
        llm, prompt, judge_variables(), parse_json_object, params=GenerationParams(seed=5)
    )
    assert parsed.value == {"feedback": "on topic", "score": 0.9}
    assert parsed.attempts == 2
    assert [p.seed for _, p in llm.calls] == [5, 6]
    assert [p.temperature for _, p in llm.calls] == [0.0, 0.7]
    assert llm.calls[0][0] == prompt.render(**judge_variables())


def test_complete_parsed_reports_the_last_raw_output_after_all_retries() -> None:
    llm = ScriptedLLM(["bad 1", "bad 2", "bad 3", "never used"])
    prompt = load_prompt("relevance-judge")
    with pytest.raises(ParseError) as info:
        complete_parsed(llm, prompt, judge_variables(), parse_json_object, retries=2)
    assert len(llm.calls) == 3
    assert info.value.raw == "bad 3"
    assert "relevance-judge" in str(info.value) and "3 attempts" in str(info.value)


def test_complete_parsed_through_the_cache_is_free_on_rerun(tmp_path: Path) -> None:
    prompt = load_prompt("relevance-judge")
    first = ScriptedLLM(["oops", '{"score": 1}'])
    parsed = complete_parsed(
        CachedLLM(first, ResponseCache(tmp_path)), prompt, judge_variables(), parse_json_object
    )
    again = ScriptedLLM([])
    rerun = complete_parsed(
        CachedLLM(again, ResponseCache(tmp_path)), prompt, judge_variables(), parse_json_object
    )
    assert rerun.value == parsed.value == {"score": 1}
    assert again.calls == [] and rerun.response.cached and rerun.attempts == 2
    entries = [json.loads(p.read_text()) for p in tmp_path.glob("??/*.json")]
    assert {e["provenance"]["prompt_id"] for e in entries} == {"relevance-judge"}
    assert {e["provenance"]["prompt_version"] for e in entries} == {1}


def test_acomplete_parsed_uses_the_async_call() -> None:
    llm = ScriptedLLM(["<label>maybe</label>", "<label>YES</label>"])
    prompt = load_prompt("relevance-judge")

    def parser(text: str) -> str:
        return extract_tag(text, "label", ["yes", "no"])

    parsed = asyncio.run(acomplete_parsed(llm, prompt, judge_variables(), parser))
    assert parsed.value == "yes" and parsed.attempts == 2 and llm.max_in_flight == 1
