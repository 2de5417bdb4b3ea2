"""Reading a knowledge-base folder's last commit and knowing when a writer is behind, alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragbound.corpus import Document
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.commits import behind, load_committed


def saved(folder: Path) -> Path:
    docs = [Document(id="bees", text="Honey bees live in colonies.", source="bees.txt")]
    KnowledgeBase.from_documents(docs, embedder="bm25").save(folder)
    return folder


def test_load_committed_reads_the_backing_and_rows(tmp_path: Path):
    backing, loaded = load_committed(saved(tmp_path / "kb"))
    assert backing.kind == "bm25"
    assert [c.doc_id for c in loaded.chunks] == ["bees"] and loaded.vectors is None
    with pytest.raises(InputError, match="does not exist"):
        load_committed(tmp_path / "nowhere")


def test_a_writer_is_behind_once_another_commits_in_its_folder(tmp_path: Path):
    folder = saved(tmp_path / "kb")
    mine = KnowledgeBase.load(folder)
    assert not behind(mine.contents(), mine.backing, folder)
    assert not behind(mine.contents(), mine.backing, tmp_path / "elsewhere")
    other = KnowledgeBase.load(folder)
    other.add_documents([Document(id="owls", text="Owls hunt at night.", source="owls.txt")])
    other.save()
    assert behind(mine.contents(), mine.backing, folder)
    unsaved = KnowledgeBase.from_documents(
        [Document(id="x", text="x y z", source="x.txt")], embedder="bm25"
    )
    assert not behind(unsaved.contents(), unsaved.backing, folder)  # never loaded from there
