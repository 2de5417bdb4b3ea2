"""Tests of query files and single-query validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbound.corpus import MAX_QUERY_CHARS, load_queries, validate_query
from ragbound.errors import InputError


def write(path: Path, content: str | bytes) -> Path:
    """Write a fixture file."""
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


# --- validate_query --------------------------------------------------------------------------


def test_validate_query_strips() -> None:
    assert validate_query("  Where do owls live?\n") == "Where do owls live?"


def test_empty_query_names_its_location() -> None:
    with pytest.raises(InputError, match=r"^query 3 is empty$"):
        validate_query(" \t\n", location="query 3")


def test_non_string_query() -> None:
    with pytest.raises(InputError, match="query must be a string, got int"):
        validate_query(42)


def test_one_megabyte_query_is_refused_with_length_and_limit() -> None:
    huge = "a" * 1_000_000
    with pytest.raises(InputError, match=r"1,000,000 characters long; the limit is 10,000"):
        validate_query(huge)
    assert validate_query("a" * MAX_QUERY_CHARS) == "a" * MAX_QUERY_CHARS
    assert validate_query("abc", max_chars=3) == "abc"
    with pytest.raises(InputError, match="limit is 2"):
        validate_query("abc", max_chars=2)


def test_bad_max_chars() -> None:
    with pytest.raises(InputError, match="max_chars must be a positive integer"):
        validate_query("abc", max_chars=0)


# --- formats ---------------------------------------------------------------------------------


def test_txt_one_query_per_line_blank_lines_skipped(tmp_path: Path) -> None:
    path = write(tmp_path / "q.txt", "What is kelp?\n\n  How do bees fly?  \r\n")
    assert load_queries(path) == ["What is kelp?", "How do bees fly?"]


def test_unknown_extension_is_read_as_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "queries.log", "\ufeffFirst?\nSecond?\n".encode())
    assert load_queries(str(path)) == ["First?", "Second?"]


def test_jsonl_default_fields_in_order(tmp_path: Path) -> None:
    lines = [
        {"query": "From query?", "question": "not this", "text": "nor this"},
        {"question": "From question?", "text": "not this"},
        {"text": "From text?", "id": 3},
        "A bare string?",
    ]
    path = write(tmp_path / "q.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
    assert load_queries(path) == ["From query?", "From question?", "From text?", "A bare string?"]


def test_jsonl_explicit_field(tmp_path: Path) -> None:
    path = write(tmp_path / "q.jsonl", json.dumps({"prompt": "Custom?", "query": "no"}) + "\n")
    assert load_queries(path, field="prompt") == ["Custom?"]


def test_csv_column(tmp_path: Path) -> None:
    path = write(tmp_path / "q.csv", 'id,question\n1,Why is the sky blue?\n2,"Why, though?"\n')
    assert load_queries(path) == ["Why is the sky blue?", "Why, though?"]


def test_json_list_of_strings_and_objects(tmp_path: Path) -> None:
    path = write(tmp_path / "q.json", json.dumps(["Plain?", {"question": "Object?"}]))
    assert load_queries(path) == ["Plain?", "Object?"]


# --- bad input -------------------------------------------------------------------------------


def test_jsonl_missing_field_lists_fields(tmp_path: Path) -> None:
    path = write(tmp_path / "q.jsonl", '{"query": "ok?"}\n{"body": "x", "id": 1}\n')
    with pytest.raises(
        InputError,
        match=r"q\.jsonl:2 \(field 'query' or 'question' or 'text' or 'prompt'\): missing; "
        r"fields present: body, id$",
    ):
        load_queries(path)


def test_explicit_field_missing(tmp_path: Path) -> None:
    path = write(tmp_path / "q.jsonl", '{"query": "ok?"}\n')
    with pytest.raises(
        InputError, match=r"q\.jsonl:1 \(field 'prompt'\): missing; fields present: query$"
    ):
        load_queries(path, field="prompt")


def test_csv_missing_column_lists_columns(tmp_path: Path) -> None:
    path = write(tmp_path / "q.csv", "id,body\n1,Hi?\n")
    with pytest.raises(InputError, match=r"q\.csv:2 \(field 'query' or .*: id, body$"):
        load_queries(path)


def test_empty_query_in_jsonl_names_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path / "q.jsonl", '{"query": "ok?"}\n{"query": "  "}\n')
    with pytest.raises(InputError, match=r"q\.jsonl:2 \(field 'query'\): empty$"):
        load_queries(path)


def test_non_string_query_field(tmp_path: Path) -> None:
    path = write(tmp_path / "q.jsonl", '{"query": 5}\n')
    with pytest.raises(InputError, match=r"q\.jsonl:1 \(field 'query'\): expected a string"):
        load_queries(path)


def test_oversize_query_in_file(tmp_path: Path) -> None:
    path = write(tmp_path / "q.txt", "short?\n" + "b" * 1_000_000 + "\n")
    with pytest.raises(InputError, match=r"q\.txt:2: 1,000,000 characters long"):
        load_queries(path)


def test_malformed_jsonl(tmp_path: Path) -> None:
    path = write(tmp_path / "q.jsonl", '{"query": "ok?"}\n{"query": \n')
    with pytest.raises(InputError, match=r"q\.jsonl:2: not valid JSON"):
        load_queries(path)


def test_json_object_is_one_query(tmp_path: Path) -> None:
    path = write(tmp_path / "q.json", json.dumps({"query": "Alone?"}))
    assert load_queries(path) == ["Alone?"]


def test_json_item_of_wrong_type(tmp_path: Path) -> None:
    path = write(tmp_path / "q.json", json.dumps(["ok?", 3], indent=2))
    with pytest.raises(InputError, match=r"q\.json:3: expected a string or an object, got a num"):
        load_queries(path)


@pytest.mark.parametrize(
    ("name", "content"), [("q.txt", "\n  \n\n"), ("q.jsonl", "\n"), ("q.json", "[]")]
)
def test_file_with_no_queries(tmp_path: Path, name: str, content: str) -> None:
    path = write(tmp_path / name, content)
    with pytest.raises(InputError, match=rf"{name.replace('.', '[.]')}: no queries found"):
        load_queries(path)


def test_not_utf8_query_file(tmp_path: Path) -> None:
    path = write(tmp_path / "q.txt", b"ok?\n\xff\xfe bad\n")
    with pytest.raises(InputError, match=r"q\.txt:2: not UTF-8 .*byte offset 4"):
        load_queries(path)


def test_missing_query_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"missing\.txt: no such file"):
        load_queries(tmp_path / "missing.txt")
    with pytest.raises(InputError, match="not a file"):
        load_queries(tmp_path)


def test_synth_output_under_any_extension_is_read_as_its_queries(tmp_path: Path) -> None:
    rows = [{"query": "What is kelp?", "chunk_id": "c1"}, {"query": "Why?", "chunk_id": "c2"}]
    path = write(tmp_path / "queries.out", "".join(json.dumps(row) + "\n" for row in rows))
    assert load_queries(path) == ["What is kelp?", "Why?"]
    mixed = write(tmp_path / "mixed.txt", json.dumps(rows[0]) + "\nA plain question?\n")
    with pytest.raises(InputError, match=r"mixed\.txt:2: not a JSON object, but line 1 is one"):
        load_queries(mixed)


def test_tsv_column(tmp_path: Path) -> None:
    path = write(tmp_path / "q.tsv", "id\tprompt\n1\tWhy, though?\n")
    assert load_queries(path) == ["Why, though?"]
