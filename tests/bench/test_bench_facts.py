"""Atomic facts from documents: sentence windows, pre-skipped references, cited indices."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from ragbound.artifacts import read_manifest
from ragbound.bench.facts import (
    NO_FACT,
    build_facts,
    non_text_reason,
    parse_fact_reply,
    sentence_index,
)
from ragbound.bench.models import FACTS_FORMAT, FactSet
from ragbound.errors import InputError
from ragbound.llm import ChatMessage, GenerationParams, ParseError, load_prompt
from tests.cli.runner import run
from tests.llm.llm_fakes import ScriptedLLM

ROADS = (
    "Road Rules\n\n"
    "The speed limit on expressways is 90 km/h. "
    "See Table 2 for the fines. "
    "Learner drivers must display an L-plate. "
    "It must be fixed to the front and the back of the car. "
    "Drivers must stop at a red light. "
    "Motorcyclists must wear a helmet.\n"
)
NUMBERED = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)


def sentences_of(messages: list[ChatMessage]) -> dict[int, str]:
    """The numbered sentences a bench-facts call showed the model."""
    return {int(i): text for i, text in NUMBERED.findall(messages[-1].content)}


def fact_writer(messages: list[ChatMessage], params: GenerationParams) -> str:
    """One fact per sentence, except headings, which are listed as skipped."""
    facts, skipped = [], []
    for index, text in sentences_of(messages).items():
        if text.startswith("Road Rules"):
            skipped.append({"sentence": index, "reason": "a heading"})
        else:
            facts.append({"fact": f"Fact: {text}", "sentence": index})
    return json.dumps({"facts": facts, "skipped": skipped})


@pytest.fixture()
def roads(tmp_path: Path) -> Path:
    path = tmp_path / "roads.txt"
    path.write_text(ROADS, encoding="utf-8")
    return path


def test_facts_cite_their_sentence_and_document(roads: Path) -> None:
    llm = ScriptedLLM(responder=fact_writer)
    fact_set = build_facts(llm, [roads], window=2, concurrency=1)

    [doc] = fact_set.documents
    assert doc.id == "roads.txt"
    assert doc.sha256 == hashlib.sha256(roads.read_bytes()).hexdigest()
    assert doc.n_sentences == 7  # heading + 6 sentences
    # the table reference is skipped before any call; 6 sentences left -> 3 windows of 2
    assert len(llm.calls) == 3
    assert all("Table 2" not in m[-1].content for m, _ in llm.calls)
    assert [sorted(sentences_of(m)) for m, _ in llm.calls] == [[0, 1], [3, 4], [5, 6]]

    by_index = {fact.sentence_index: fact for fact in fact_set.facts}
    assert sorted(by_index) == [1, 3, 4, 5, 6]
    learner = by_index[3]
    assert learner.text == "Fact: Learner drivers must display an L-plate."
    assert learner.sentence == "Learner drivers must display an L-plate."
    assert learner.doc_id == "roads.txt"
    assert learner.id.startswith("fact-")
    prompt = load_prompt("bench-facts")
    assert learner.provenance.prompt_id == "bench-facts"
    assert learner.provenance.prompt_version == prompt.version
    assert learner.provenance.model == "fake:scripted"
    assert learner.provenance.source_hash == doc.sha256
    assert learner.provenance.params["max_tokens"] == 1024

    assert [s.sentence_index for s in fact_set.skipped] == [0, 2]  # document order
    reasons = {s.sentence_index: s.reason for s in fact_set.skipped}
    assert reasons[0] == "a heading"  # the model's reason is kept
    assert reasons[2] == "refers to non-text material ('See Table')"
    assert fact_set.errors == []
    # ids are stable across runs
    again = build_facts(ScriptedLLM(responder=fact_writer), [roads], window=2)
    assert [f.id for f in again.facts] == [f.id for f in fact_set.facts]


def test_window_shows_neighbours_and_bounds(roads: Path) -> None:
    llm = ScriptedLLM(responder=fact_writer)
    build_facts(llm, [roads], window=8)
    [(messages, _)] = llm.calls
    assert "Sentences 0 to 6:" in messages[-1].content
    assert "Cite only indices from 0 to 6" in messages[0].content


def test_fact_outside_its_window_is_dropped_and_reported(roads: Path) -> None:
    def writer(messages: list[ChatMessage], params: GenerationParams) -> str:
        indices = sorted(sentences_of(messages))
        facts = [{"fact": "cited inside", "sentence": indices[0]}]
        facts.append({"fact": "cited outside", "sentence": indices[-1] + 1})
        facts.append({"fact": "no index", "sentence": "first"})
        return json.dumps({"facts": facts})

    fact_set = build_facts(ScriptedLLM(responder=writer), [roads], window=3)
    assert [f.text for f in fact_set.facts] == ["cited inside", "cited inside"]
    assert len(fact_set.errors) == 4
    assert "roads.txt sentences 0-3: fact 'cited outside' cites sentence 4" in fact_set.errors[0]
    assert "'first'" in fact_set.errors[1]
    # sentences without a fact and without a stated reason are recorded too
    assert {s.sentence_index for s in fact_set.skipped if s.reason == NO_FACT} == {1, 3, 5, 6}


def test_unreadable_reply_is_reported_with_raw_output(roads: Path) -> None:
    llm = ScriptedLLM(responder=lambda m, p: "I cannot help with that.")
    fact_set = build_facts(llm, [roads])
    assert fact_set.facts == []
    [error] = fact_set.errors
    assert error.startswith("roads.txt sentences 0-6:")
    assert "raw output: I cannot help with that." in error
    assert len(llm.calls) == 3  # one call and two parse retries


def test_empty_document_is_an_error_unless_skipped(roads: Path, tmp_path: Path) -> None:
    blank = tmp_path / "blank.txt"
    blank.write_text("\f\n  \n", encoding="utf-8")
    with pytest.raises(InputError, match=r"empty document.*blank\.txt.*--skip-empty"):
        build_facts(ScriptedLLM(responder=fact_writer), [tmp_path])
    with pytest.warns(UserWarning, match="blank.txt: empty document skipped"):
        fact_set = build_facts(ScriptedLLM(responder=fact_writer), [tmp_path], skip_empty=True)
    assert [doc.id for doc in fact_set.documents] == ["roads.txt"]
    assert any("blank.txt: empty document skipped" in e for e in fact_set.errors)
    assert len(fact_set.facts) == 5
    with pytest.raises(InputError, match="no documents found"):
        build_facts(ScriptedLLM(), [blank], skip_empty=True)


def test_bad_window_and_paths(roads: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="window must be at least 1"):
        build_facts(ScriptedLLM(), [roads], window=0)
    with pytest.raises(InputError, match="no such file"):
        build_facts(ScriptedLLM(), [tmp_path / "missing.txt"])


def test_parse_fact_reply() -> None:
    reply = parse_fact_reply(
        'Here you go:\n```json\n{"facts": [{"fact": " A. ", "sentence": "3"}, {"fact": ""},'
        ' "junk"], "skipped": [{"sentence": 4, "reason": "a table"}]}\n```'
    )
    assert reply.facts == [("A.", "3")]
    assert reply.skipped == [(4, "a table")]
    assert parse_fact_reply('{"facts": []}').facts == []
    with pytest.raises(ParseError, match='no "facts" list'):
        parse_fact_reply('{"fact": "A", "sentence": 1}')
    with pytest.raises(ParseError):
        parse_fact_reply("no json here")


def test_sentence_index() -> None:
    assert [sentence_index(v) for v in (3, "3", " [3] ", 3.0)] == [3, 3, 3, 3]
    assert [sentence_index(v) for v in (True, 3.5, "three", None, "-1")] == [None] * 5


@pytest.mark.parametrize(
    "sentence",
    [
        "See Table 3 for the rates.",
        "Refer to the diagram below.",
        "The image above shows a junction.",
        "This sign warns of a sharp bend.",
        "As shown in Figure 2, the lane narrows.",
        "The following table lists the fees.",
    ],
)
def test_non_text_references_are_caught(sentence: str) -> None:
    assert non_text_reason(sentence) is not None


@pytest.mark.parametrize(
    "sentence",
    [
        "Drivers must stop at a red light.",
        "Turn left at the junction and follow the signs.",
        "The table tennis club meets weekly.",
        "Members sign the form before the interview.",
    ],
)
def test_plain_sentences_are_not_caught(sentence: str) -> None:
    assert non_text_reason(sentence) is None


def test_cli_facts_then_qa(monkeypatch, capsys, roads: Path, tmp_path: Path) -> None:
    import ragbound.llm

    def writer(messages: list[ChatMessage], params: GenerationParams) -> str:
        if messages[-1].content.startswith("Fact: "):
            fact = messages[-1].content.removeprefix("Fact: ")
            return json.dumps({"question": f"Is it true that {fact}?", "answer": fact})
        return fact_writer(messages, params)

    llm = ScriptedLLM(responder=writer)
    monkeypatch.setattr(ragbound.llm, "make_llm", lambda spec: llm)
    monkeypatch.setenv("RAGBOUND_CACHE", str(tmp_path / "cache"))
    facts_path, qa_path = tmp_path / "facts.json", tmp_path / "qa.json"
    code, out, err = run(
        monkeypatch, capsys, "bench", "facts", str(roads), "--out", str(facts_path), "--json"
    )
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["facts"], summary["sentences"], summary["skipped"]) == (5, 7, 2)
    fact_set = read_manifest(facts_path, FactSet, FACTS_FORMAT, "facts")
    assert len(fact_set.facts) == 5

    code, out, err = run(monkeypatch, capsys, "bench", "qa", str(facts_path), "--out", str(qa_path))
    assert code == 0, err
    assert "wrote 5 QA pairs from 5 facts" in out
    calls = len(llm.calls)
    # a rerun is answered from the response cache
    code, out, err = run(monkeypatch, capsys, "bench", "qa", str(facts_path), "--out", str(qa_path))
    assert code == 0, err
    assert len(llm.calls) == calls

    code, out, err = run(
        monkeypatch, capsys, "bench", "facts", str(tmp_path / "nope.txt"), "--out", str(facts_path)
    )
    assert code == 2 and "no such file" in err
