"""ChunkFile / ChunkSequence: chunks read from their file by offset behave like a list of them."""

from __future__ import annotations

import gc
import json
from collections.abc import Sequence
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from ragbound.corpus import Chunk, ChunkFile, ChunkSequence
from ragbound.errors import ArtifactError


def make_chunk(number: int) -> Chunk:
    return Chunk(
        id=f"c{number}",
        text=f'text of chunk {number} é\n"quoted" ' * (number % 3 + 1),
        doc_id=f"d{number // 3}",
        source="s.txt",
        position=number % 3,
        n_words=4,
        metadata={"n": number} if number % 2 else {},
    )


def write_chunk_file(path: Path, chunks: Sequence[Chunk], blank_lines: bool = False) -> Path:
    lines = [json.dumps(c.model_dump(mode="json"), ensure_ascii=False) for c in chunks]
    if blank_lines:
        lines = [line for pair in zip(lines, [""] * len(lines), strict=True) for line in pair]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def chunk_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Chunk], list[Path]]:
    folder = tmp_path_factory.mktemp("chunks")
    chunks = [make_chunk(i) for i in range(23)]
    files = [
        write_chunk_file(folder / "a.jsonl", chunks[:7]),
        write_chunk_file(folder / "b.jsonl", chunks[7:15], blank_lines=True),
        write_chunk_file(folder / "c.jsonl", chunks[15:]),
    ]
    return chunks, files


def sequence_of(chunk_files: tuple[list[Chunk], list[Path]]) -> tuple[list[Chunk], ChunkSequence]:
    chunks, files = chunk_files
    opened = [ChunkFile.open(path) for path in files]
    # a list part in the middle too, as an unsaved segment appended to loaded ones
    return chunks, ChunkSequence([opened[0], chunks[7:9]]) + ChunkSequence(
        [opened[1][2:], opened[2]]
    )


indices = st.integers(-30, 30)
slices = st.builds(
    slice, st.none() | indices, st.none() | indices, st.none() | st.sampled_from([1, 2, -1, 3])
)


@settings(max_examples=200, deadline=None)
@given(index=indices, window=slices, inner=slices)
def test_a_chunk_sequence_indexes_and_slices_like_the_list(chunk_files, index, window, inner):
    chunks, sequence = sequence_of(chunk_files)
    assert len(sequence) == len(chunks)
    if -len(chunks) <= index < len(chunks):
        assert sequence[index] == chunks[index]
    else:
        with pytest.raises(IndexError):
            sequence[index]
    part = sequence[window]
    assert list(part) == chunks[window] and len(part) == len(chunks[window])
    assert list(part[inner]) == chunks[window][inner]  # a window of a window


def test_a_chunk_sequence_iterates_adds_and_compares_like_the_list(chunk_files):
    chunks, sequence = sequence_of(chunk_files)
    assert list(sequence) == chunks and sequence == chunks
    extra = [make_chunk(99)]
    assert list(sequence + extra) == chunks + extra
    assert list(extra + sequence) == extra + chunks
    assert list(sequence[:0] + extra) == extra
    assert sequence.index(chunks[9]) == 9 and chunks[22] in sequence
    assert sequence != chunks[:-1] and sequence[3:5] != chunks[3:5][::-1]


def test_a_chunk_file_reads_across_its_read_blocks(tmp_path, monkeypatch):
    import ragbound.corpus.sequence as sequence_module

    monkeypatch.setattr(sequence_module, "_READ_BYTES", 100)  # smaller than one line
    chunks = [make_chunk(i) for i in range(12)]
    opened = ChunkFile.open(write_chunk_file(tmp_path / "c.jsonl", chunks, blank_lines=True))
    assert list(opened) == chunks and list(opened[5:9]) == chunks[5:9]
    assert opened.nbytes == 16 * len(chunks)


def test_a_chunk_file_builds_no_chunk_until_asked(tmp_path):
    path = write_chunk_file(tmp_path / "c.jsonl", [make_chunk(i) for i in range(50)])
    seen: list[str] = []
    gc.collect()
    before = sum(type(o) is Chunk for o in gc.get_objects())
    opened = ChunkSequence([ChunkFile.open(path, lambda chunk: seen.append(chunk.id))])
    gc.collect()
    assert sum(type(o) is Chunk for o in gc.get_objects()) == before
    assert seen == [f"c{i}" for i in range(50)] and opened[49].id == "c49"


def test_a_file_removed_after_opening_is_still_read(tmp_path):
    chunks = [make_chunk(i) for i in range(4)]
    opened = ChunkFile.open(write_chunk_file(tmp_path / "c.jsonl", chunks))
    (tmp_path / "c.jsonl").unlink()  # as a writer removes files no manifest references
    assert list(opened) == chunks


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"id": "x"}\n', r"c.jsonl:1 is invalid"),
        (b"\n[1, 2]\n", r"c.jsonl:2 is not a JSON object"),
        (b"{not json\n", r"c.jsonl:1 is corrupt"),
        (b'{"id": "\xff"}\n', r"c.jsonl is corrupt: not UTF-8"),
    ],
)
def test_a_bad_row_is_an_error_naming_the_file_and_line(tmp_path, content, message):
    (tmp_path / "c.jsonl").write_bytes(content)
    with pytest.raises(ArtifactError, match=message):
        ChunkFile.open(tmp_path / "c.jsonl")
    with pytest.raises(ArtifactError, match="not found"):
        ChunkFile.open(tmp_path / "missing.jsonl")
