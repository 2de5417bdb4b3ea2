"""QA pairs: one per fact from the LLM, or imported from JSON/JSONL/CSV (PolicyBench)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from benchmarks import datasets
from ragbound.artifacts import read_manifest
from ragbound.bench.models import QA_FORMAT, AtomicFact, FactSet, Provenance, QASet
from ragbound.bench.qa import generate_qa, import_qa, parse_qa_reply, qa_pair_id
from ragbound.errors import InputError
from ragbound.llm import ChatMessage, GenerationParams, ParseError
from tests.cli.runner import run
from tests.llm.llm_fakes import ScriptedLLM

POLICYBENCH = datasets.data_root() / "policybench" / "questions"
POLICYBENCH_SIZES = {
    "BTT_QA.json": 55,
    "CPF_filtered_qa.json": 112,
    "ICA_filtered_qa.json": 135,
    "medishield_QA.json": 29,
}


def make_facts(*texts: str) -> FactSet:
    provenance = Provenance(created_at="2025-01-01T00:00:00+00:00", source_hash="d" * 64)
    facts = [
        AtomicFact(
            id=f"fact-{i}",
            text=text,
            doc_id="roads.txt",
            sentence_index=i,
            sentence=text,
            provenance=provenance,
        )
        for i, text in enumerate(texts)
    ]
    return FactSet(documents=[], facts=facts)


def question_writer(messages: list[ChatMessage], params: GenerationParams) -> str:
    fact = messages[-1].content.removeprefix("Fact: ")
    if "helmet" in fact:
        return "Sorry, no."
    return f'Sure! {{"question": "What is true of {fact}?", "answer": "{fact}"}}'


def test_generate_one_pair_per_fact() -> None:
    facts = make_facts("expressways allow 90 km/h", "riders wear a helmet", "stop at red")
    llm = ScriptedLLM(responder=question_writer)
    qa_set = generate_qa(llm, facts, name="roads", concurrency=2)

    assert qa_set.name == "roads"
    assert [p.fact_id for p in qa_set.pairs] == ["fact-0", "fact-2"]
    first = qa_set.pairs[0]
    assert first.question == "What is true of expressways allow 90 km/h?"
    assert first.answer == "expressways allow 90 km/h"
    assert (first.doc_id, first.origin) == ("roads.txt", "generated")
    assert first.provenance.prompt_id == "bench-qa"
    assert first.provenance.model == "fake:scripted"
    assert first.provenance.source_hash == "d" * 64
    # the helmet fact never parsed (one call + two retries): reported with the raw reply
    [error] = qa_set.errors
    assert error.startswith("fact fact-1:") and "raw output: Sorry, no." in error
    assert len(llm.calls) == 5
    # the system prompt is the paper's A.1 question prompt
    assert "highly specialized test question generator" in llm.calls[0][0][0].content
    # stable ids: same facts, same replies, same ids
    again = generate_qa(ScriptedLLM(responder=question_writer), facts, name="roads")
    assert [p.id for p in again.pairs] == [p.id for p in qa_set.pairs]
    assert again.source_hash == qa_set.source_hash


def test_generate_needs_facts() -> None:
    with pytest.raises(InputError, match="no facts"):
        generate_qa(ScriptedLLM(), make_facts())


def test_parse_qa_reply() -> None:
    assert parse_qa_reply('{"question": " Q? ", "answer": " A. "}') == ("Q?", "A.")
    with pytest.raises(ParseError, match='no "answer"'):
        parse_qa_reply('{"question": "Q?", "answer": ""}')
    with pytest.raises(ParseError, match='no "question"'):
        parse_qa_reply('{"answer": "A"}')


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_import_json_list_jsonl_and_csv(tmp_path: Path) -> None:
    records = [{"q": "Who?", "a": "Me.", "key": 7}, {"q": "What?", "a": "This.", "key": "x"}]
    listing = write(tmp_path / "pairs.json", json.dumps(records))
    lines = write(tmp_path / "pairs.jsonl", "".join(json.dumps(r) + "\n\n" for r in records))
    table = write(tmp_path / "pairs.csv", "q,a,key\nWho?,Me.,7\n\nWhat?,This.,x\n")
    for path in (listing, lines, table):
        qa_set = import_qa(path, question_field="q", answer_field="a", id_field="key")
        assert [(p.id, p.question, p.answer) for p in qa_set.pairs] == [
            ("7", "Who?", "Me."),
            ("x", "What?", "This."),
        ]
        assert qa_set.name == "pairs"
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert qa_set.source_hash == digest
        assert all(p.provenance.source_hash == digest for p in qa_set.pairs)
        assert all(p.origin == "imported" and p.fact_id is None for p in qa_set.pairs)
    # without an id field the id hashes question and answer
    plain = import_qa(listing, question_field="q", answer_field="a", name="mine")
    assert plain.name == "mine"
    assert plain.pairs[0].id == qa_pair_id("Who?", "Me.")


def test_import_policybench_style_object(tmp_path: Path) -> None:
    data = {"knowledge_base_identifier": "X", "questions": [{"question": "Q?", "answer": "A."}]}
    qa_set = import_qa(write(tmp_path / "x.json", json.dumps(data)))
    assert [p.question for p in qa_set.pairs] == ["Q?"]
    with pytest.raises(
        InputError,
        match=r"y\.json:1: .*a list under 'questions', got an object with fields: items$",
    ):
        import_qa(write(tmp_path / "y.json", json.dumps({"items": []})))


def test_import_errors_name_file_record_and_field(tmp_path: Path) -> None:
    csv_file = write(tmp_path / "a.csv", "question,reply\nQ?,A.\n")
    with pytest.raises(
        InputError, match=r"a\.csv:2 \(field 'answer'\): missing; fields present: question, reply"
    ):
        import_qa(csv_file)
    jsonl = write(tmp_path / "b.jsonl", '{"question": "Q?", "answer": "A."}\n{"question": "R?"}\n')
    with pytest.raises(InputError, match=r"b\.jsonl:2 \(field 'answer'\): missing; .*: question$"):
        import_qa(jsonl)
    listing = write(tmp_path / "c.json", json.dumps([{"question": "Q?", "answer": "  "}]))
    with pytest.raises(InputError, match=r"c\.json:1 \(field 'answer'\): empty$"):
        import_qa(listing)
    numbers = write(tmp_path / "d.json", json.dumps([{"question": 3, "answer": "A."}]))
    with pytest.raises(
        InputError, match=r"d\.json:1 \(field 'question'\): expected a string, got a number$"
    ):
        import_qa(numbers)
    two = json.dumps([{"question": "Q", "answer": "A"}, "x"], indent=1)
    with pytest.raises(InputError, match=r"e\.json:6: expected an object with a question and an"):
        import_qa(write(tmp_path / "e.json", two))
    with pytest.raises(InputError, match=r"f\.json: no QA pairs"):
        import_qa(write(tmp_path / "f.json", "[]"))
    with pytest.raises(InputError, match=r"g\.txt:1: expected an object .*, got a line of plain"):
        import_qa(write(tmp_path / "g.txt", "Q? A."))
    with pytest.raises(InputError, match="no such file"):
        import_qa(tmp_path / "missing.json")
    with pytest.raises(InputError, match=r"h\.json.*not valid JSON"):
        import_qa(write(tmp_path / "h.json", "[{"))


def test_import_refuses_duplicates(tmp_path: Path) -> None:
    ids = write(tmp_path / "ids.csv", "id,question,answer\n1,Q?,A.\n2,R?,B.\n1,S?,C.\n")
    with pytest.raises(
        InputError, match=r"ids\.csv:4 \(field 'id'\): duplicate id '1', first at .*ids\.csv:2$"
    ):
        import_qa(ids, id_field="id")
    with pytest.raises(InputError, match=r"ids\.csv:2 \(field 'key'\): missing"):
        import_qa(ids, id_field="key")
    twice = write(tmp_path / "twice.jsonl", '{"question": "Q?", "answer": "A."}\n' * 2)
    with pytest.raises(InputError, match=r"twice\.jsonl:2: duplicate pair \(same question"):
        import_qa(twice)
    bad_id = write(
        tmp_path / "bad.json", json.dumps([{"id": None, "question": "Q", "answer": "A"}])
    )
    with pytest.raises(
        InputError, match=r"bad\.json:1 \(field 'id'\): expected a string or number id, got null$"
    ):
        import_qa(bad_id, id_field="id")


def test_cli_import(monkeypatch, capsys, tmp_path: Path) -> None:
    source = write(tmp_path / "pairs.csv", "Q,A,n\nWho?,Me.,1\nWhat?,This.,2\n")
    out = tmp_path / "qa.json"
    args = ["bench", "import", str(source), "--out", str(out), "--question-field", "Q"]
    code, stdout, err = run(monkeypatch, capsys, *args, "--answer-field", "A", "--id-field", "n")
    assert code == 0, err
    assert "imported 2 QA pairs as 'pairs'" in stdout
    qa_set = read_manifest(out, QASet, QA_FORMAT, "QA set")
    assert [p.id for p in qa_set.pairs] == ["1", "2"]
    code, stdout, err = run(monkeypatch, capsys, "bench", "import", str(source), "--out", str(out))
    assert code == 2
    assert "pairs.csv:2 (field 'question'): missing" in err


@pytest.mark.skipif(not POLICYBENCH.is_dir(), reason=f"PolicyBench not found at {POLICYBENCH}")
def test_policybench_imports_331_pairs() -> None:
    sets = {
        name: import_qa(POLICYBENCH / name, id_field="identifier") for name in POLICYBENCH_SIZES
    }
    assert {name: len(s.pairs) for name, s in sets.items()} == POLICYBENCH_SIZES
    assert sum(len(s.pairs) for s in sets.values()) == 331
    assert sets["BTT_QA.json"].pairs[0].id == "BTT_0"
    assert all(p.question and p.answer for s in sets.values() for p in s.pairs)
