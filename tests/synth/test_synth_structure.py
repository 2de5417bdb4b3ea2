"""Finding which chunks make one document, on hand-written corpora."""

from __future__ import annotations

from typing import Any

import pytest

from ragbound.corpus import Chunk
from ragbound.synth.structure import DocumentStructure, id_prefix, infer_structure


def chunk(
    doc_id: str, *, source: str = "corpus.jsonl", position: int = 0, **metadata: Any
) -> Chunk:
    text = f"text of {doc_id} part {position}"
    return Chunk(
        id=f"{doc_id}#{position}",
        text=text,
        doc_id=doc_id,
        source=source,
        position=position,
        n_words=len(text.split()),
        metadata=metadata,
    )


def groups(structure: DocumentStructure) -> list[list[int]]:
    """Rows per document, documents in first-seen order."""
    found: dict[object, list[int]] = {}
    for row, key in enumerate(structure.keys):
        found.setdefault(key, []).append(row)
    return list(found.values())


def test_documents_of_several_chunks_are_used_as_they_are():
    chunks = [chunk("a", position=i) for i in range(3)] + [chunk("b", position=i) for i in (0, 1)]
    found = infer_structure(chunks)
    assert found.label == "document" and groups(found) == [[0, 1, 2], [3, 4]]


def test_whole_files_are_documents_even_of_one_chunk():
    chunks = [chunk(f"notes/{i}.txt", source=f"notes/{i}.txt") for i in range(4)]
    assert infer_structure(chunks).label == "document"


def test_a_paper_id_field_in_consecutive_runs_makes_the_documents():
    # one record per paragraph; "section" repeats all over, "journal" is coarser than "pmid"
    rows = [("11", "J1", "background"), ("11", "J1", "methods"), ("11", "J1", "results")]
    rows += [("12", "J1", "background"), ("12", "J1", "results")]
    rows += [("13", "J2", "background"), ("13", "J2", "methods")]
    chunks = [
        chunk(f"corpus.jsonl:{n}", pmid=pmid, journal=journal, section=section)
        for n, (pmid, journal, section) in enumerate(rows)
    ]
    found = infer_structure(chunks)
    assert found.label == "metadata:pmid"
    assert groups(found) == [[0, 1, 2], [3, 4], [5, 6]]


def test_a_field_whose_values_are_scattered_is_not_a_document():
    sections = ["intro", "methods", "intro", "methods", "intro", "methods"]
    chunks = [chunk(f"corpus.jsonl:{n}", section=s) for n, s in enumerate(sections)]
    assert infer_structure(chunks).kind == "adjacent"


def test_ids_sharing_a_prefix_before_a_numbered_suffix_make_the_documents():
    ids = ["21645374-0", "21645374-1", "21645374-2", "16418930-0", "16418930-1", "9488747-0"]
    # the records' own ids kept as metadata (loaded without --id-field)
    as_metadata = [chunk(f"corpus.jsonl:{n}", id=value) for n, value in enumerate(ids)]
    found = infer_structure(as_metadata)
    assert found.label == "id-prefix:id"
    assert groups(found) == [[0, 1, 2], [3, 4], [5]]
    assert "3 documents" in found.describe() and "'id'" in found.describe()
    # the same ids as document ids (loaded with --id-field id)
    assert infer_structure([chunk(value) for value in ids]).label == "id-prefix:doc_id"


def test_the_loaders_default_ids_share_only_the_file_name():
    # "file:line" ids: their prefix is the source, which is no grouping within one file
    chunks = [chunk(f"corpus.jsonl:{n}") for n in range(1, 6)]
    found = infer_structure(chunks)
    assert found.kind == "adjacent" and len(set(found.keys)) == 1
    assert "none found" in found.describe()


def test_several_files_of_several_records_make_documents_by_source():
    chunks = [
        chunk(f"paper{p}.jsonl:{n}", source=f"paper{p}.jsonl") for p in (1, 2) for n in (1, 2)
    ]
    found = infer_structure(chunks)
    assert found.label == "source" and groups(found) == [[0, 1], [2, 3]]


def test_a_grouping_that_leaves_most_chunks_alone_is_not_used():
    # only 2 of 5 records share a prefix: less than half are grouped
    ids = ["x-1", "x-2", "y-1", "z-1", "w-1"]
    assert infer_structure([chunk(f"c.jsonl:{n}", id=v) for n, v in enumerate(ids)]).kind == (
        "adjacent"
    )


@pytest.mark.parametrize(
    ("value", "prefix"),
    [
        ("12345-p3", "12345"),
        ("12345-0", "12345"),
        ("report_2.chunk7", "report_2"),
        ("a-b-3", "a-b"),
        ("guide.md#para 12", "guide.md"),
        ("12345", None),
        ("intro", None),
        ("-3", None),
    ],
)
def test_id_prefix(value: str, prefix: str | None):
    assert id_prefix(value) == prefix
