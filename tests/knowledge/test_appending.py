"""What a knowledge base holds as segments are appended, rebased and restricted, alone."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ragbound.corpus import ChunkingParams, Document
from ragbound.corpus.units import unit_params
from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge import KnowledgeBase, corpus_hash
from ragbound.knowledge.appending import appended, rebased, refuse_clashes, restricted
from tests.texts import TOPICS

CHUNKING = ChunkingParams(chunk_words=25, overlap=10)


def kb_of(*topics: str) -> KnowledgeBase:
    """An unsaved BM25 knowledge base of these topics, with sentence units."""
    documents = [Document(id=t, text=" ".join(TOPICS[t] * 2), source=f"{t}.txt") for t in topics]
    return KnowledgeBase.from_documents(
        documents, embedder="bm25", chunking=CHUNKING, units=unit_params("chunk,sentence", 2)
    )


def test_appended_puts_the_new_rows_after_the_old_with_totals_to_match():
    base, more = kb_of("bees"), kb_of("trains")
    both = appended(base.contents(), more.pending, holds_vectors=False, updated_at="then")
    assert [c.id for c in both.chunks] == [c.id for c in [*base.chunks, *more.chunks]]
    assert both.manifest.n_chunks == len(base) + len(more)
    assert both.manifest.n_documents == 2 and both.manifest.updated_at == "then"
    assert both.manifest.corpus_hash == corpus_hash(both.chunks)
    assert [s.name for s in both.manifest.segments] == ["unsaved-1", "unsaved-1"]
    assert both.pending == (*base.pending, *more.pending)
    # the new units point at the new chunks' rows
    train_units = both.units.units[len(base.units.units) :]
    assert {both.chunks[u.chunk].doc_id for u in train_units} == {"trains"}
    assert both.vector_parts is None  # BM25 keeps no vectors


def test_a_backing_that_holds_vectors_refuses_a_segment_without_them():
    base, more = kb_of("bees"), kb_of("trains")
    with pytest.raises(ArtifactError, match="without vectors"):
        appended(base.contents(), more.pending, holds_vectors=True, updated_at="then")


def test_rebased_puts_mine_on_the_other_writers_commit(tmp_path):
    committed = kb_of("bees")
    committed.save(tmp_path / "kb")
    mine = KnowledgeBase.load(tmp_path / "kb")
    mine.add_documents([Document(id="owls", text="Owls hunt at night.", source="owls.txt")])
    theirs = KnowledgeBase.load(tmp_path / "kb")
    theirs.add_documents([Document(id="cats", text="Cats sleep all day.", source="cats.txt")])
    theirs.save()
    current = KnowledgeBase.load(tmp_path / "kb").contents()
    on_top = rebased(mine.contents(), current, holds_vectors=False)
    assert [c.doc_id for c in on_top.chunks][-2:] == ["cats", "owls"]
    assert on_top.base_names == current.base_names and len(on_top.base_names) == 2
    assert on_top.pending == mine.contents().pending and on_top.path == mine.path


def test_rebased_refuses_another_build_and_a_document_both_added(tmp_path):
    mine = kb_of("bees")
    other = kb_of("trains").contents()
    rechunked = replace(
        other, manifest=other.manifest.model_copy(update={"chunking": ChunkingParams()})
    )
    with pytest.raises(ArtifactError, match="was replaced"):
        rebased(mine.contents(), rechunked, holds_vectors=False)
    with pytest.raises(InputError, match=r"1 document id.*'bees'.*nothing was saved"):
        rebased(mine.contents(), kb_of("bees", "trains").contents(), holds_vectors=False)


def test_restricted_keeps_those_documents_rows_and_renumbers_their_units():
    whole = kb_of("bees", "trains")
    vectors = np.arange(len(whole), dtype=np.float32)[:, None]
    subset = restricted(whole.contents(), {"trains"}, vectors)
    assert {c.doc_id for c in subset.chunks} == {"trains"}
    rows = [i for i, c in enumerate(whole.chunks) if c.doc_id == "trains"]
    assert subset.vector_parts is not None
    assert subset.vector_parts[0][:, 0].tolist() == rows  # their own vectors, not embedded again
    assert all(subset.chunks[u.chunk].doc_id == "trains" for u in subset.units.units)
    assert subset.manifest.n_chunks == len(rows) and subset.manifest.n_documents == 1
    assert [s.name for s in subset.manifest.segments] == ["unsaved-1"]
    with pytest.raises(InputError, match="none of the given document ids"):
        restricted(whole.contents(), {"owls"}, None)


def test_refuse_clashes_names_at_most_five_ids():
    refuse_clashes({"a"}, {"b"}, "here", "fine")  # no clash, no error
    ids = [f"d{i}" for i in range(7)]
    with pytest.raises(InputError) as error:
        refuse_clashes(ids, ids, "already here", "rename them")
    assert str(error.value) == (
        "7 document id(s) already here: 'd0', 'd1', 'd2', 'd3', 'd4'; rename them"
    )
