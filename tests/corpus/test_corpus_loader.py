"""Tests of the document loader: every format, folder walking, stable ids and bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ragbound.corpus import (
    LINE_IDS,
    Document,
    chunk_documents,
    load_documents,
    load_documents_with_report,
)
from ragbound.errors import InputError


def write(path: Path, content: str | bytes) -> Path:
    """Write a fixture file, creating its folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def jsonl(*records: object) -> str:
    """Serialise records as JSONL text."""
    return "".join(json.dumps(record) + "\n" for record in records)


def make_corpus(root: Path) -> Path:
    """A small mixed-format corpus used by several tests."""
    write(root / "b.txt", "Bees make honey. They live in hives.")
    write(root / "a" / "z.md", "# Zebras\n\nZebras have stripes.")
    write(root / "a" / "recs.jsonl", jsonl({"text": "Owls hunt at night.", "topic": "birds"}))
    write(root / "c.csv", "id,text,lang\nk1,Kelp is a seaweed.,en\n")
    return root


# --- formats ---------------------------------------------------------------------------------


def test_txt_and_md_are_one_document_each_with_the_source_as_id(tmp_path: Path) -> None:
    write(tmp_path / "one.txt", "Plain text here.\nSecond line.")
    write(tmp_path / "two.md", "# Title\n\nBody.")
    docs = load_documents([tmp_path])
    assert [(d.id, d.source) for d in docs] == [("one.txt", "one.txt"), ("two.md", "two.md")]
    assert docs[0].text == "Plain text here.\nSecond line."
    assert docs[0].metadata == {}


def test_jsonl_records_get_line_ids_and_metadata(tmp_path: Path) -> None:
    text = jsonl({"text": "First.", "year": 2020}) + "\n" + jsonl({"text": "Third.", "tags": ["a"]})
    path = write(tmp_path / "recs.jsonl", text)
    docs = load_documents([path])
    assert [d.id for d in docs] == ["recs.jsonl:1", "recs.jsonl:3"]  # blank line 2 skipped
    assert docs[0].metadata == {"year": 2020}
    assert docs[1].metadata == {"tags": ["a"]}
    assert docs[1].text == "Third."


def test_jsonl_custom_text_and_id_fields(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", jsonl({"key": 7, "body": "Seven.", "x": None}))
    (doc,) = load_documents([path], text_field="body", id_field="key")
    assert doc == Document(id="7", text="Seven.", source="r.jsonl", metadata={"x": None})


def test_a_record_s_id_field_is_its_id_by_default(tmp_path: Path) -> None:
    records = [
        {"id": "pmid-0", "text": "Zero.", "pmid": 7},
        {"id": 12, "text": "One."},
        {"text": "No id."},
        {"id": None, "text": "Null id."},
        {"id": " ", "text": "Blank id."},
    ]
    path = write(tmp_path / "r.jsonl", jsonl(*records))
    docs = load_documents([path])
    assert [(d.id, d.metadata) for d in docs] == [
        ("pmid-0", {"pmid": 7}),
        ("12", {}),
        ("r.jsonl:3", {}),
        ("r.jsonl:4", {"id": None}),
        ("r.jsonl:5", {"id": " "}),
    ]
    csv_path = write(tmp_path / "c.csv", "id,text\nk1,Kelp.\n,No id.\n")
    assert [d.id for d in load_documents([csv_path])] == ["k1", "c.csv:3"]
    json_path = write(tmp_path / "l.json", json.dumps([{"id": "j1", "text": "J."}, {"text": "K."}]))
    assert [d.id for d in load_documents([json_path])] == ["j1", "l.json:1"]


def test_line_ids_keep_every_field_as_metadata(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", jsonl({"id": "a", "text": "A."}, {"id": "a", "text": "B."}))
    docs = load_documents([path], id_field=LINE_IDS)
    assert [(d.id, d.metadata) for d in docs] == [
        ("r.jsonl:1", {"id": "a"}),
        ("r.jsonl:2", {"id": "a"}),
    ]
    keyed = write(tmp_path / "k.json", json.dumps({"x1": {"text": "X."}}))
    assert [d.id for d in load_documents([keyed], id_field=LINE_IDS)] == ["k.json:0"]


def test_a_json_object_keyed_by_id_gives_its_keys_as_ids(tmp_path: Path) -> None:
    data = {"21645374": {"text": "Lace plants.", "id": "in-1"}, "16418930": {"text": "Leaves."}}
    path = write(tmp_path / "pubmed.json", json.dumps(data, indent=2))
    docs = load_documents([path])
    assert [(d.id, d.text, d.metadata) for d in docs] == [
        ("21645374", "Lace plants.", {"id": "in-1"}),
        ("16418930", "Leaves.", {}),
    ]
    data["16418930"]["id"] = "in-2"  # a named id field wins over the key
    write(tmp_path / "pubmed.json", json.dumps(data, indent=2))
    assert [d.id for d in load_documents([path], id_field="id")] == ["in-1", "in-2"]


def test_a_bad_default_id_says_how_to_choose_another(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", jsonl({"id": ["a"], "text": "A."}))
    with pytest.raises(
        InputError,
        match=r"r\.jsonl:1 \(field 'id'\): expected a string or number id, got a list; a record's "
        r"'id' field .* is its document id by default: name a unique field with --id-field, or "
        r"give --id-field @line for file-and-line ids$",
    ):
        load_documents([path])
    assert [d.id for d in load_documents([path], id_field=LINE_IDS)] == ["r.jsonl:1"]


def test_json_list_of_records_uses_index_ids(tmp_path: Path) -> None:
    path = write(tmp_path / "d.json", json.dumps([{"text": "Zero."}, {"text": "One.", "n": 1}]))
    docs = load_documents([path])
    assert [(d.id, d.text, d.metadata) for d in docs] == [
        ("d.json:0", "Zero.", {}),
        ("d.json:1", "One.", {"n": 1}),
    ]


def test_json_object_is_one_record(tmp_path: Path) -> None:
    path = write(tmp_path / "d.json", json.dumps({"text": "Alone.", "n": 1}))
    assert [(d.id, d.text, d.metadata) for d in load_documents([path])] == [
        ("d.json:0", "Alone.", {"n": 1})
    ]
    path = write(tmp_path / "e.json", json.dumps({"records": [{"text": "x"}]}))
    with pytest.raises(
        InputError, match=r"e\.json:1 \(field 'text'\): missing; fields present: records"
    ):
        load_documents([path])


def test_json_elements_must_be_objects(tmp_path: Path) -> None:
    path = write(tmp_path / "d.json", json.dumps([{"text": "ok"}, "not a record"], indent=1))
    with pytest.raises(InputError, match=r"d\.json:5: expected an object, got a string"):
        load_documents([path])


def test_csv_rows_use_starting_line_ids_and_other_columns_as_metadata(tmp_path: Path) -> None:
    content = 'text,lang\nFirst row.,en\n"Multi\nline row.",fr\n\nLast row.,de\n'
    path = write(tmp_path / "data.csv", content)
    docs = load_documents([path])
    assert [d.id for d in docs] == ["data.csv:2", "data.csv:3", "data.csv:6"]
    assert docs[1].text == "Multi\nline row."
    assert [d.metadata for d in docs] == [{"lang": "en"}, {"lang": "fr"}, {"lang": "de"}]


def test_csv_id_field(tmp_path: Path) -> None:
    path = write(tmp_path / "data.csv", "id,text\nk1,Kelp.\n")
    (doc,) = load_documents([path], id_field="id")
    assert (doc.id, doc.metadata) == ("k1", {})


def test_csv_long_field_is_read(tmp_path: Path) -> None:
    long_text = "word " * 60_000  # 300 kB, above the csv module's default field limit
    path = write(tmp_path / "big.csv", f"text\n{long_text}\n")
    (doc,) = load_documents([path])
    assert len(doc.text) == len(long_text)


def test_bom_is_dropped(tmp_path: Path) -> None:
    path = write(tmp_path / "bom.csv", "\ufefftext\nHello.\n".encode())
    (doc,) = load_documents([path])
    assert doc.text == "Hello."


def test_single_path_string_is_accepted(tmp_path: Path) -> None:
    write(tmp_path / "one.txt", "Text.")
    assert [d.id for d in load_documents(str(tmp_path))] == ["one.txt"]


# --- folders and sources ---------------------------------------------------------------------


def test_folder_walk_is_sorted_skips_hidden_and_unsupported(tmp_path: Path) -> None:
    root = make_corpus(tmp_path / "corpus")
    write(root / ".hidden.txt", "Hidden.")
    write(root / ".git" / "notes.txt", "Inside a hidden folder.")
    write(root / "a" / "paper.pdf", "%PDF")
    docs, report = load_documents_with_report([root])
    assert [d.source for d in docs] == ["a/recs.jsonl", "a/z.md", "b.txt", "c.csv"]
    assert [d.id for d in docs] == ["a/recs.jsonl:1", "a/z.md", "b.txt", "k1"]  # c.csv's id
    assert docs[0].metadata == {"topic": "birds"}
    assert report.skipped_files == [str(root / "a" / "paper.pdf")]
    assert report.n_documents == 4
    assert len(report.files) == 4


def test_entries_that_are_not_regular_files_are_skipped_with_one_warning(tmp_path: Path):
    root = make_corpus(tmp_path / "corpus")
    (root / "loop-a.txt").symlink_to("loop-b.txt")
    (root / "loop-b.txt").symlink_to("loop-a.txt")
    (root / "gone.md").symlink_to("nowhere.md")
    (root / "a" / "up").symlink_to("..", target_is_directory=True)  # a folder loop
    with pytest.warns(UserWarning, match="skipped 4 corpus entries") as caught:
        docs, report = load_documents_with_report([root])
    assert len(caught) == 1
    assert [d.source for d in docs] == ["a/recs.jsonl", "a/z.md", "b.txt", "c.csv"]
    assert report.skipped_special == [
        f"{root / 'a' / 'up'} (a symlinked folder, not followed)",
        f"{root / 'gone.md'} (a dangling symlink)",
        f"{root / 'loop-a.txt'} (a symlink loop)",
        f"{root / 'loop-b.txt'} (a symlink loop)",
    ]


def test_a_symlink_loop_named_directly_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.txt").symlink_to("b.txt")
    (tmp_path / "b.txt").symlink_to("a.txt")
    with pytest.raises(InputError, match=r"a\.txt: not a regular file \(a symlink loop\)"):
        load_documents([tmp_path / "a.txt"])


def test_directly_named_file_uses_its_name_as_source(tmp_path: Path) -> None:
    path = write(tmp_path / "deep" / "er" / "notes.md", "Notes.")
    (doc,) = load_documents([path])
    assert (doc.id, doc.source) == ("notes.md", "notes.md")


def test_directly_named_unsupported_file_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "paper.pdf", "%PDF")
    with pytest.raises(InputError, match=r"paper\.pdf: unsupported file type '\.pdf'"):
        load_documents([path])


def test_same_file_twice_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", "Text.")
    with pytest.raises(InputError, match="same file is also included"):
        load_documents([tmp_path, path])


def test_ids_are_stable_across_runs_and_locations(tmp_path: Path) -> None:
    first = make_corpus(tmp_path / "here" / "corpus")
    elsewhere = tmp_path / "somewhere" / "else" / "copy"
    shutil.copytree(first, elsewhere)
    runs = [load_documents([first]), load_documents([first]), load_documents([elsewhere])]
    ids = [[d.id for d in docs] for docs in runs]
    assert ids[0] == ids[1] == ids[2]
    chunk_ids = [[c.id for c in chunk_documents(docs, chunk_words=5, overlap=2)] for docs in runs]
    assert chunk_ids[0] == chunk_ids[1] == chunk_ids[2]
    assert len(set(chunk_ids[0])) == len(chunk_ids[0])


# --- empty texts -----------------------------------------------------------------------------


def test_empty_texts_are_skipped_and_reported(tmp_path: Path) -> None:
    write(tmp_path / "blank.txt", "  \n\t\n")
    write(tmp_path / "r.jsonl", jsonl({"text": "Kept."}, {"text": "   "}))
    docs, report = load_documents_with_report([tmp_path])
    assert [d.id for d in docs] == ["r.jsonl:1"]
    assert report.skipped_empty == [str(tmp_path / "blank.txt"), f"{tmp_path / 'r.jsonl'}:2"]


# --- bad input -------------------------------------------------------------------------------


def test_not_utf8_names_file_and_byte_offset(tmp_path: Path) -> None:
    path = write(tmp_path / "latin.txt", "caf\xe9 au lait".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin\.txt:1: not UTF-8 .*0xe9 at byte offset 3"):
        load_documents([tmp_path])
    assert path.exists()


def test_malformed_jsonl_names_file_and_line(tmp_path: Path) -> None:
    content = jsonl({"text": "ok"}, {"text": "ok too"}) + '{"text": "broken"\n'
    write(tmp_path / "corpus" / "a.jsonl", content)
    with pytest.raises(InputError, match=r"corpus[/\\]a\.jsonl:3: not valid JSON \("):
        load_documents([tmp_path / "corpus"])


def test_jsonl_line_that_is_not_an_object(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", '["a", "list"]\n')
    with pytest.raises(InputError, match=r"a\.jsonl:1: expected an object, got a list"):
        load_documents([path])


def test_nan_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", '{"text": "ok", "score": NaN}\n')
    with pytest.raises(InputError, match=r"a\.jsonl:1: not valid JSON \(NaN"):
        load_documents([path])


def test_malformed_json_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / "d.json", '[\n{"text": "a"},\n{"text" "b"}\n]')
    with pytest.raises(InputError, match=r"d\.json:3: not valid JSON"):
        load_documents([path])


def test_missing_text_field_lists_available_fields(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", jsonl({"text": "ok"}, {"id": 2, "body": "x"}))
    with pytest.raises(
        InputError, match=r"a\.jsonl:2 \(field 'text'\): missing; fields present: id, body"
    ):
        load_documents([path])


def test_missing_csv_column_lists_columns(tmp_path: Path) -> None:
    path = write(tmp_path / "data.csv", "id,text\n1,One.\n")
    with pytest.raises(
        InputError, match=r"data\.csv:2 \(field 'body'\): missing; fields present: id, text"
    ):
        load_documents([path], text_field="body")


def test_csv_row_with_wrong_number_of_fields(tmp_path: Path) -> None:
    path = write(tmp_path / "data.csv", "id,text\n1,One.\n2,Two.,extra\n")
    with pytest.raises(InputError, match=r"data\.csv:3: row has 3 fields but the header has 2"):
        load_documents([path])


def test_empty_csv_needs_a_header(tmp_path: Path) -> None:
    path = write(tmp_path / "data.csv", "")
    with pytest.raises(InputError, match=r"data\.csv: empty CSV file; a header row is required"):
        load_documents([path])


def test_text_field_must_be_a_string(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", jsonl({"text": 42}))
    with pytest.raises(InputError, match=r"a\.jsonl:1 \(field 'text'\): expected a string"):
        load_documents([path])


def test_bad_id_value(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", jsonl({"text": "x", "id": None}))
    with pytest.raises(InputError, match=r"a\.jsonl:1 \(field 'id'\): expected a string or number"):
        load_documents([path], id_field="id")


def test_duplicate_ids_name_both_places(tmp_path: Path) -> None:
    write(tmp_path / "a.jsonl", jsonl({"id": "x", "text": "One."}))
    write(tmp_path / "b.jsonl", jsonl({"id": "y", "text": "Two."}, {"id": "x", "text": "Three."}))
    with pytest.raises(InputError) as caught:
        load_documents([tmp_path], id_field="id")
    message = str(caught.value)
    assert "duplicate document id 'x'" in message
    assert f"{tmp_path / 'a.jsonl'}:1" in message
    assert f"{tmp_path / 'b.jsonl'}:2" in message
    assert "--id-field @line" not in message  # the id field was named
    with pytest.raises(InputError) as caught:
        load_documents([tmp_path])  # the same ids, by default
    assert str(caught.value).startswith(message)
    assert str(caught.value).endswith("or give --id-field @line for file-and-line ids")
    assert len(load_documents([tmp_path], id_field=LINE_IDS)) == 3


def test_corpus_with_no_documents(tmp_path: Path) -> None:
    write(tmp_path / "empty.txt", "   ")
    write(tmp_path / "image.png", b"\x89PNG")
    with pytest.raises(InputError, match=r"no documents found in .*1 empty record\(s\) skipped"):
        load_documents([tmp_path])


def test_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no documents found in"):
        load_documents([tmp_path])


def test_nonexistent_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(InputError, match=r"nope: no such file or folder"):
        load_documents([missing])


def test_no_paths(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no corpus paths given"):
        load_documents([])


def test_tsv_records_are_documents(tmp_path: Path) -> None:
    path = write(tmp_path / "data.tsv", "text\tlang\nFirst, with a comma.\ten\n")
    (doc,) = load_documents([path])
    assert (doc.id, doc.text, doc.metadata) == (
        "data.tsv:2",
        "First, with a comma.",
        {"lang": "en"},
    )
