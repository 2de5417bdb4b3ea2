"""The record reader: every format, content sniffing, field selection and one error format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragbound.errors import InputError
from ragbound.records import Record, read_records, read_text, read_texts


def write(path: Path, content: str | bytes) -> Path:
    """Write a fixture file."""
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def jsonl(*rows: object) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def lines_and_data(records: list[Record]) -> list[tuple[int, object]]:
    return [(record.line, record.data) for record in records]


# --- formats ---------------------------------------------------------------------------------


def test_text_one_record_per_non_blank_line(tmp_path: Path) -> None:
    path = write(tmp_path / "q.txt", "What is kelp?\n\n  \r\nHow do bees fly?\r\n")
    records = read_records(path)
    assert lines_and_data(records) == [(1, "What is kelp?"), (4, "How do bees fly?")]
    assert [(r.index, r.format, r.file) for r in records] == [
        (0, "text", str(path)),
        (1, "text", str(path)),
    ]


def test_jsonl_lines_and_bare_strings(tmp_path: Path) -> None:
    path = write(tmp_path / "q.jsonl", jsonl({"query": "A?"}, "B?") + "\n" + jsonl({"x": 1}))
    assert lines_and_data(read_records(path)) == [(1, {"query": "A?"}), (2, "B?"), (4, {"x": 1})]


def test_json_list_items_carry_the_line_they_start_on(tmp_path: Path) -> None:
    content = '[\n  {"q": "A?"},\n  {"q": "B?"}, {"q": "C?"},\n  {\n    "q": "D?"\n  }\n]\n'
    records = read_records(write(tmp_path / "q.json", content))
    assert [(r.line, r.index, r.data["q"]) for r in records] == [
        (2, 0, "A?"),
        (3, 1, "B?"),
        (3, 2, "C?"),
        (4, 3, "D?"),
    ]


def test_json_list_under_a_key(tmp_path: Path) -> None:
    data = {"name": "X", "questions": [{"q": "A?"}, {"q": "B?"}], "other": [1]}
    path = write(tmp_path / "k.json", json.dumps(data, indent=2))
    records = read_records(path, key="questions")
    assert [(r.line, r.data) for r in records] == [(4, {"q": "A?"}), (7, {"q": "B?"})]
    # without the key the object is one record; a plain list is read whatever the key
    assert lines_and_data(read_records(path)) == [(1, data)]
    listing = write(tmp_path / "l.json", json.dumps([{"q": "A?"}]))
    assert lines_and_data(read_records(listing, key="questions")) == [(1, {"q": "A?"})]
    with pytest.raises(
        InputError,
        match=r"m\.json:1: expected a JSON list of records, a JSON object keyed by id, or an "
        r"object with a list under 'questions', got an object with fields: items$",
    ):
        read_records(write(tmp_path / "m.json", '{"items": []}'), key="questions")


def test_a_json_object_keyed_by_id_is_one_record_per_member(tmp_path: Path) -> None:
    data = {
        "anatomy-000": {"question": "A?", "answer": "a"},
        "anatomy-001": {"question": "B?", "answer": "b"},
    }
    path = write(tmp_path / "keyed.json", json.dumps(data, indent=4))
    records = read_records(path)
    assert [(r.line, r.index, r.key, r.data) for r in records] == [
        (2, 0, "anatomy-000", data["anatomy-000"]),
        (6, 1, "anatomy-001", data["anatomy-001"]),
    ]
    assert read_texts(path) == ["A?", "B?"]
    assert [r.key for r in read_records(path, key="questions")] == ["anatomy-000", "anatomy-001"]
    # a member that is not an object makes the whole object one record, as before
    mixed = write(tmp_path / "mixed.json", json.dumps({"version": 1, **data}))
    assert [(r.key, r.data) for r in read_records(mixed)] == [(None, {"version": 1, **data})]


def test_a_missing_field_lists_a_few_fields_not_thousands(tmp_path: Path) -> None:
    big = {f"id{i}": {"question": f"Q{i}?"} for i in range(2_000)} | {"version": 1}
    path = write(tmp_path / "big.json", json.dumps(big))
    with pytest.raises(InputError) as caught:
        read_texts(path)
    message = str(caught.value)
    assert message.endswith(
        "id0, id1, id2, id3, id4, id5, id6, id7, id8, id9, id10, id11, ... and 1,989 more"
    )
    assert len(message) < 300


@pytest.mark.parametrize(
    ("name", "content", "field", "match"),
    [
        ("c.csv", "Question,Answer\nA?,a\n", "question", "Question"),
        ("d.csv", "Question,Answer\nA?,a\n", None, "Question"),
        ("j.jsonl", jsonl({"QUERY": "A?", "Text": "t"}), None, "QUERY"),
        ("t.jsonl", jsonl({"Text": "t"}), "TEXT", "Text"),
    ],
)
def test_a_field_that_differs_only_in_case_is_suggested(
    tmp_path: Path, name: str, content: str, field: str | None, match: str
) -> None:
    path = write(tmp_path / name, content)
    hint = f"; did you mean '{match}'? (field names are case-sensitive)"
    with pytest.raises(InputError) as caught:
        read_texts(path, field)
    assert str(caught.value).endswith(hint)
    with pytest.raises(InputError) as caught:
        read_records(path)[0].id(match.lower())
    assert str(caught.value).endswith(hint)


def test_no_suggestion_without_a_case_match(tmp_path: Path) -> None:
    path = write(tmp_path / "n.jsonl", jsonl({"body": "x", "query": "q"}))
    with pytest.raises(InputError) as caught:
        read_texts(path, "text")
    assert str(caught.value).endswith("fields present: body, query")


def test_csv_and_tsv_with_header_and_bom(tmp_path: Path) -> None:
    csv_path = write(
        tmp_path / "q.csv", '\ufeffid,text\n1,"A, with comma"\n\n2,"Two\nlines"\n'.encode()
    )
    assert lines_and_data(read_records(csv_path)) == [
        (2, {"id": "1", "text": "A, with comma"}),
        (4, {"id": "2", "text": "Two\nlines"}),
    ]
    tsv_path = write(tmp_path / "q.tsv", "\ufeffid\ttext\n1\tA, no split\n".encode())
    assert lines_and_data(read_records(tsv_path)) == [(2, {"id": "1", "text": "A, no split"})]


def test_bom_dropped_from_text_and_jsonl(tmp_path: Path) -> None:
    assert read_texts(write(tmp_path / "a.txt", "\ufeffFirst?\n".encode())) == ["First?"]
    bom_jsonl = write(tmp_path / "a.jsonl", ("\ufeff" + jsonl({"query": "Q?"})).encode())
    assert read_texts(bom_jsonl) == ["Q?"]


# --- content decides -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["queries.out", "queries.txt", "queries"])
def test_jsonl_saved_under_another_extension_is_read_as_jsonl(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / name, jsonl({"query": "A?", "chunk_id": "c1"}, {"query": "B?"}))
    assert read_texts(path) == ["A?", "B?"]
    assert {r.format for r in read_records(path)} == {"jsonl"}


def test_json_document_saved_as_text_is_read_as_json(tmp_path: Path) -> None:
    path = write(tmp_path / "q.txt", json.dumps([{"query": "A?"}, "B?"], indent=2))
    assert read_texts(path) == ["A?", "B?"]
    assert read_records(path)[0].line == 2


def test_ordinary_text_stays_text(tmp_path: Path) -> None:
    content = '{x} in set notation?\n[URGENT] What is RAG?\n"Quoted" question?\n{"a" 1}\n'
    path = write(tmp_path / "q.txt", content)
    assert read_texts(path) == content.strip().split("\n")
    assert {r.format for r in read_records(path)} == {"text"}


def test_text_with_some_json_object_lines_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "q.out", jsonl({"query": "A?"}) + "What is RAG?\n")
    with pytest.raises(
        InputError, match=r"q\.out:2: not a JSON object, but line 1 is one; the file is neither"
    ):
        read_records(path)
    assert read_texts(path, format="text") == ['{"query": "A?"}', "What is RAG?"]


def test_broken_json_document_saved_as_text_is_a_json_error(tmp_path: Path) -> None:
    path = write(tmp_path / "q.txt", '[\n  {"query": "A?"},\n  {"query": "B?",}\n]\n')
    with pytest.raises(InputError, match=r"q\.txt:3: not valid JSON"):
        read_records(path)


def test_json_extension_holding_jsonl_and_the_reverse(tmp_path: Path) -> None:
    lines = write(tmp_path / "lines.json", jsonl({"query": "A?"}, {"query": "B?"}))
    assert read_texts(lines) == ["A?", "B?"]
    document = write(tmp_path / "doc.jsonl", json.dumps([{"query": "A?"}], indent=1))
    assert read_texts(document) == ["A?"]
    one_line_list = write(tmp_path / "list.jsonl", '["a", "b"]\n')
    assert lines_and_data(read_records(one_line_list)) == [(1, ["a", "b"])]


# --- field selection -------------------------------------------------------------------------


def test_default_fields_in_order_and_named_field(tmp_path: Path) -> None:
    rows = [
        {"query": "Q", "question": "no", "text": "no"},
        {"question": "R", "text": "no"},
        {"text": "S", "prompt": "no"},
        {"prompt": "T"},
        "U",
    ]
    path = write(tmp_path / "q.jsonl", jsonl(*rows))
    assert read_texts(path) == ["Q", "R", "S", "T", "U"]
    reordered = [r.text(defaults=("text", "query")) for r in read_records(path)[:3]]
    assert reordered == ["no", "no", "S"]
    named = write(tmp_path / "n.csv", "body,query\nB,Q\n")
    assert read_texts(named, "body") == ["B"]
    record = read_records(named)[0]
    assert (record.pick(), record.text_field("body"), record.require("query")) == (
        "query",
        "body",
        "Q",
    )


def test_ids_are_strings_or_numbers(tmp_path: Path) -> None:
    path = write(tmp_path / "i.jsonl", jsonl({"id": 7}, {"id": " k "}, {"id": True}, {"id": ""}))
    first, second, third, fourth = read_records(path)
    assert (first.id("id"), second.id("id")) == ("7", "k")
    with pytest.raises(InputError, match=r"i\.jsonl:3 \(field 'id'\): expected a string or num"):
        third.id("id")
    with pytest.raises(InputError, match=r"i\.jsonl:4 \(field 'id'\): the id is empty$"):
        fourth.id("id")


# --- one error format ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "field", "message"),
    [
        (
            "m.jsonl",
            jsonl({"query": "A?"}, {"body": "B", "id": 2}),
            None,
            r"m\.jsonl:2 \(field 'query' or 'question' or 'text' or 'prompt'\): missing; "
            r"fields present: body, id$",
        ),
        ("n.jsonl", jsonl({"q": "A?"}), "prompt", r"n\.jsonl:1 \(field 'prompt'\): missing; "),
        (
            "e.jsonl",
            jsonl({"query": "A?"}, {"query": " \t"}),
            None,
            r"e\.jsonl:2 \(field 'query'\): empty$",
        ),
        ("s.csv", "id,text\n1,\n", "text", r"s\.csv:2 \(field 'text'\): empty$"),
        (
            "t.json",
            json.dumps([{"text": "ok"}, {"text": ["a"]}], indent=1),
            None,
            r"t\.json:5 \(field 'text'\): expected a string, got a list$",
        ),
        ("u.jsonl", "3\n", None, r"u\.jsonl:1: expected a string or an object, got a number$"),
    ],
)
def test_record_problems_are_file_line_field(
    tmp_path: Path, name: str, content: str, field: str | None, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        read_texts(write(tmp_path / name, content), field)


def test_invalid_json_line_names_the_right_line(tmp_path: Path) -> None:
    path = write(tmp_path / "b.jsonl", jsonl({"a": 1}) + "\n" + '{"a": \n' + jsonl({"a": 2}))
    with pytest.raises(InputError, match=r"b\.jsonl:3: not valid JSON \(Expecting value"):
        read_records(path)
    nan = write(tmp_path / "nan.out", '{"a": 1}\n{"a": NaN}\n')
    with pytest.raises(InputError, match=r"nan\.out:2: not valid JSON \(NaN is not allowed"):
        read_records(nan)


def test_invalid_utf8_names_line_and_byte(tmp_path: Path) -> None:
    path = write(tmp_path / "l.txt", b"ok\nfine\ncaf\xe9\n")
    with pytest.raises(
        InputError,
        match=r"l\.txt:3: not UTF-8 text \(invalid byte 0xe9 at byte offset 11\); re-encode",
    ):
        read_records(path)
    utf16 = write(tmp_path / "w.csv", "text\nHi\n".encode("utf-16"))
    with pytest.raises(InputError, match=r"w\.csv: UTF-16 text; re-encode the file as UTF-8"):
        read_text(utf16)


def test_empty_files(tmp_path: Path) -> None:
    for name in ("e.txt", "e.jsonl", "e.out"):
        path = write(tmp_path / name, "\n  \n")
        assert read_records(path) == []
        with pytest.raises(InputError, match=rf"{name.replace('.', '[.]')}: no records"):
            read_texts(path)
    assert read_records(write(tmp_path / "e.json", "[]")) == []
    with pytest.raises(InputError, match=r"e\.csv: empty CSV file; a header row is required"):
        read_records(write(tmp_path / "e.csv", ""))
    with pytest.raises(InputError, match=r"z\.json:1: not valid JSON"):
        read_records(write(tmp_path / "z.json", ""))


def test_csv_problems_name_the_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"r\.csv:3: row has 3 fields but the header has 2"):
        read_records(write(tmp_path / "r.csv", "a,b\n1,2\n1,2,3\n"))
    with pytest.raises(InputError, match=r"d\.tsv:1: duplicate column\(s\) in header: a"):
        read_records(write(tmp_path / "d.tsv", "a\ta\n1\t2\n"))


def test_missing_path_and_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope\.txt: no such file$"):
        read_records(tmp_path / "nope.txt")
    with pytest.raises(InputError, match=r": not a file$"):
        read_records(tmp_path)


# --- properties ------------------------------------------------------------------------------

_texts = st.lists(
    st.text(st.characters(blacklist_categories=("Cs", "Zl", "Zp", "Cc")), min_size=1).filter(
        lambda text: text.strip() and text.strip() == text
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(texts=_texts)
def test_jsonl_and_json_round_trip_any_text(tmp_path_factory, texts: list[str]) -> None:
    folder = tmp_path_factory.mktemp("round")
    as_lines = write(folder / "q.out", jsonl(*({"query": text} for text in texts)))
    as_list = write(folder / "q.json", json.dumps([{"query": t} for t in texts], indent=1))
    assert read_texts(as_lines) == texts
    assert read_texts(as_list) == texts
    assert [r.line for r in read_records(as_list)] == [2 + 3 * i for i in range(len(texts))]


# --- hostile JSON: nesting, lone surrogates (issue 47) ---------------------------------------


def _nested(depth: int, leaf: str = "1") -> str:
    """A JSON value nesting lists and objects ``depth`` levels deep (alternating)."""
    opens = "".join('{"a": ' if level % 2 else "[" for level in range(depth))
    closes = "".join("}" if level % 2 else "]" for level in reversed(range(depth)))
    return opens + leaf + closes


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".out"])
def test_nesting_to_the_limit_is_read_and_past_it_names_the_line(
    tmp_path: Path, suffix: str
) -> None:
    # a record is one level itself: its field holds MAX_JSON_DEPTH - 1 more
    fine = write(
        tmp_path / f"fine{suffix}", jsonl({"q": "a"}) + '{"q": "b", "x": ' + _nested(127) + "}\n"
    )
    assert [r.data["q"] for r in read_records(fine)] == ["a", "b"]
    deep = write(
        tmp_path / f"deep{suffix}", jsonl({"q": "a"}) + '{"q": "b", "x": ' + _nested(128) + "}\n"
    )
    with pytest.raises(
        InputError, match=rf"deep{suffix}:2: lists and objects nested deeper than 128"
    ):
        read_records(deep)


def test_brackets_inside_strings_do_not_count(tmp_path: Path) -> None:
    text = "[" * 500 + "]]]" + "{" * 300
    path = write(tmp_path / "q.jsonl", jsonl({"query": text}, {"query": '\\"[[[' * 200}))
    assert read_texts(path) == [text, '\\"[[[' * 200]


def test_a_json_document_names_the_line_where_nesting_passes_the_limit(tmp_path: Path) -> None:
    document = '[\n {"text": "a"},\n {"text": "b",\n  "x": ' + _nested(1000) + "}\n]\n"
    with pytest.raises(InputError, match=r"docs\.json:4: lists and objects nested deeper"):
        read_records(write(tmp_path / "docs.json", document))


def test_a_lone_surrogate_anywhere_names_file_line_and_field(tmp_path: Path) -> None:
    lines = '{"q": "fine \\ud83d\\ude00"}\n{"q": "ok", "meta": {"tags": ["x", "\\udc80"]}}\n'
    with pytest.raises(
        InputError,
        match=r"q\.jsonl:2 \(field 'meta\.tags\[1\]'\): holds a lone surrogate \(U\+DC80 at character 1\)",
    ):
        read_records(write(tmp_path / "q.jsonl", lines))
    document = '[\n {"q": "a"},\n {"\\ud800key": "b"}\n]'
    with pytest.raises(InputError, match=r"q\.json:3: a field name holds a lone surrogate"):
        read_records(write(tmp_path / "q.json", document))


def test_an_escaped_backslash_before_u_d800_is_text(tmp_path: Path) -> None:
    path = write(tmp_path / "q.jsonl", '{"q": "a path C:\\\\ud800"}\n')
    assert read_texts(path, "q") == ["a path C:\\ud800"]


@settings(max_examples=80, deadline=None)
@given(
    depth=st.integers(1, 3000),
    at=st.integers(0, 4),
    suffix=st.sampled_from([".jsonl", ".json", ".txt"]),
)
def test_any_nesting_is_read_or_one_input_error(
    tmp_path_factory, depth: int, at: int, suffix: str
) -> None:
    """Fuzzed: nesting of any depth on any line is read, or refused naming that line; never a
    RecursionError."""
    rows = [json.dumps({"q": f"q{i}"}) for i in range(5)]
    rows[at] = '{"q": "deep", "x": ' + _nested(depth) + "}"
    path = write(tmp_path_factory.mktemp("deep") / f"q{suffix}", "\n".join(rows) + "\n")
    if depth < 128:
        assert len(read_records(path)) == 5
        return
    with pytest.raises(InputError) as caught:
        read_records(path)
    assert f"q{suffix}:{at + 1}: lists and objects nested deeper than 128 levels" in str(
        caught.value
    )


@settings(max_examples=80, deadline=None)
@given(
    code=st.integers(0xD800, 0xDFFF),
    before=st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=5),
    at=st.integers(0, 2),
)
def test_any_lone_surrogate_is_one_input_error_naming_its_line(
    tmp_path_factory, code: int, before: str, at: int
) -> None:
    """Fuzzed: a lone surrogate escaped anywhere in a query file is refused naming its line."""
    rows = [json.dumps({"query": f"q{i}"}) for i in range(3)]
    rows[at] = '{"query": ' + json.dumps(before)[:-1] + f'\\u{code:04x}"' + "}"
    path = write(tmp_path_factory.mktemp("sur") / "q.jsonl", "\n".join(rows) + "\n")
    with pytest.raises(
        InputError,
        match=rf"q\.jsonl:{at + 1} \(field 'query'\): holds a lone surrogate \(U\+{code:04X}",
    ):
        read_records(path)
