import json
from pathlib import Path

import numpy as np
import pytest

from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.stores import Retriever, SearchInfo


def test_build_save_load_round_trip(minilm_kb_dir: Path):
    kb = KnowledgeBase.load(minilm_kb_dir)
    assert len(kb) == 10 and kb.manifest.n_documents == 10
    assert kb.manifest.embedder.dimension == 384
    assert kb.manifest.embedder.similarity == "cosine"
    assert kb.vectors.dtype == np.float32 and kb.vectors.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(kb.vectors, axis=1), 1.0, atol=1e-5)
    manifest = json.loads((minilm_kb_dir / "manifest.json").read_text())
    assert manifest["format"] == "ragbound.kb/1"
    assert manifest["chunking"] == {"chunk_words": 200, "overlap": 40, "splitter": "blingfire"}


def test_search_finds_the_matching_document(minilm_kb_dir: Path):
    kb = KnowledgeBase.load(minilm_kb_dir)
    hits = kb.search(["Which dance do bees use to show where food is?"], k=3)
    assert kb.chunk_at(hits.indices[0, 0]).source == "bees/2.txt"
    assert (np.diff(hits.similarities, axis=1) <= 0).all()
    batch = kb.search(["Which dance do bees use to show where food is?", "train gauge"], k=3)
    np.testing.assert_allclose(batch.similarities[0], hits.similarities[0], atol=1e-5)


def test_same_corpus_gives_same_fingerprint(corpus_dir: Path, minilm_kb_dir: Path):
    again = KnowledgeBase.build([corpus_dir], embedder="minilm")
    assert again.fingerprint == KnowledgeBase.load(minilm_kb_dir).fingerprint
    assert [c.id for c in again.chunks] == [c.id for c in KnowledgeBase.load(minilm_kb_dir).chunks]


def test_add_embeds_only_new_chunks_and_keeps_old_vectors(
    minilm_kb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    kb = KnowledgeBase.load(minilm_kb_dir)
    kb.save(tmp_path / "kb")
    old_bytes = (tmp_path / "kb" / "segments" / "000001.vectors.npy").read_bytes()
    kb = KnowledgeBase.load(tmp_path / "kb")
    seen: list[int] = []
    encode = kb.embedder.encode
    monkeypatch.setattr(
        kb.embedder, "encode", lambda texts, **kw: seen.append(len(texts)) or encode(texts, **kw)
    )
    new = tmp_path / "new"
    new.mkdir()
    (new / "owls.txt").write_text("Owls hunt at night and can turn their heads very far.")
    assert kb.add([new]) == 1
    assert seen == [1]
    kb.save()
    assert (tmp_path / "kb" / "segments" / "000001.vectors.npy").read_bytes() == old_bytes
    loaded = KnowledgeBase.load(tmp_path / "kb")
    assert len(loaded) == 11 and loaded.fingerprint != KnowledgeBase.load(minilm_kb_dir).fingerprint
    hits = loaded.search(["What do owls do at night?"], k=1)
    assert loaded.chunk_at(hits.indices[0, 0]).source == "owls.txt"


def test_add_with_existing_document_id_changes_nothing(minilm_kb_dir: Path, corpus_dir: Path):
    kb = KnowledgeBase.load(minilm_kb_dir)
    with pytest.raises(InputError, match="already in the knowledge base"):
        kb.add([corpus_dir])
    assert len(kb) == 10


def test_crash_during_save_leaves_previous_knowledge_base_loadable(
    minilm_kb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    target = tmp_path / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(target)
    kb = KnowledgeBase.load(target)
    (tmp_path / "more.md").write_text("Penguins cannot fly but swim fast.")
    kb.add([tmp_path / "more.md"])
    import ragbound.knowledge as knowledge

    def explode(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(knowledge, "write_json", explode)
    with pytest.raises(OSError, match="disk full"):
        kb.save()
    survivor = KnowledgeBase.load(target)
    assert len(survivor) == 10


def test_corrupt_artifacts_are_detected(minilm_kb_dir: Path, tmp_path: Path):
    target = tmp_path / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(target)
    (target / "segments" / "000001.chunks.jsonl").write_text("{not json\n")
    with pytest.raises(ArtifactError, match=r"000001\.chunks\.jsonl:1 is corrupt"):
        KnowledgeBase.load(target)
    (target / "manifest.json").write_text("[]")
    with pytest.raises(ArtifactError, match="format"):
        KnowledgeBase.load(target)


def test_truncated_vectors_are_detected(minilm_kb_dir: Path, tmp_path: Path):
    target = tmp_path / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(target)
    np.save(target / "segments" / "000001.vectors.npy", np.zeros((3, 384), np.float32))
    with pytest.raises(ArtifactError, match=r"expected float32 \(10, 384\)"):
        KnowledgeBase.load(target)


def test_refuses_to_save_into_a_foreign_folder(minilm_kb_dir: Path, tmp_path: Path):
    (tmp_path / "precious.txt").write_text("do not touch")
    with pytest.raises(InputError, match="not empty"):
        KnowledgeBase.load(minilm_kb_dir).save(tmp_path)
    assert (tmp_path / "precious.txt").read_text() == "do not touch"


def test_missing_knowledge_base(tmp_path: Path):
    with pytest.raises(InputError, match="does not exist"):
        KnowledgeBase.load(tmp_path / "nope")


def test_k_larger_than_corpus_is_a_clear_error(minilm_kb_dir: Path):
    with pytest.raises(InputError, match="k=32 is larger than the knowledge base \\(10 chunks\\)"):
        KnowledgeBase.load(minilm_kb_dir).search(["bees"], k=32)


def test_empty_and_oversize_queries_are_refused(minilm_kb_dir: Path):
    kb = KnowledgeBase.load(minilm_kb_dir)
    with pytest.raises(InputError, match="query 2 is empty"):
        kb.search(["bees", "   "], k=2)
    with pytest.raises(InputError, match="query 1"):
        kb.search(["x" * 1_000_000], k=2)


def test_bm25_knowledge_base_round_trip(corpus_dir: Path, tmp_path: Path):
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    kb.save(tmp_path / "bm25")
    loaded = KnowledgeBase.load(tmp_path / "bm25")
    assert loaded.manifest.embedder.kind == "lexical"
    assert not list((tmp_path / "bm25" / "segments").glob("*.npy"))
    hits = loaded.search(["queen bee eggs"], k=2)
    assert loaded.chunk_at(hits.indices[0, 0]).source == "bees/4.txt"


def test_empty_corpus_is_refused(tmp_path: Path):
    (tmp_path / "blank.txt").write_text("   \n")
    with pytest.raises(InputError):
        KnowledgeBase.build([tmp_path], embedder="bm25")


def test_overwrite_swaps_in_a_new_knowledge_base(corpus_dir: Path, tmp_path: Path):
    target = tmp_path / "kb"
    KnowledgeBase.build([corpus_dir], embedder="bm25").save(target)
    bees = KnowledgeBase.build([corpus_dir / "bees"], embedder="bm25")
    with pytest.raises(InputError, match="already holds another knowledge base"):
        bees.save(target)
    assert len(KnowledgeBase.load(target)) == 10
    bees.save(target, overwrite=True)
    assert len(KnowledgeBase.load(target)) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kb"]  # no staging folders left


def test_dense_search_goes_through_an_exact_cosine_retriever(minilm_kb_dir: Path):
    kb = KnowledgeBase.load(minilm_kb_dir)
    assert isinstance(kb, Retriever) and kb.query_kind == "text" and kb.dimension == 384
    store = kb.store
    assert isinstance(store, Retriever) and store.query_kind == "vector"
    assert (store.similarity, store.dimension, len(store)) == ("cosine", 384, 10)
    assert kb.describe() == SearchInfo(
        backend="exact", exact=True, similarity="cosine", parameters={"precision": "float32"}
    )
    queries = ["Which dance do bees use?", "train gauge", "owls at night"]
    hits = kb.search(queries, k=4)
    full = kb.embed(queries) @ kb.vectors.T  # numpy brute force
    expected = np.argsort(-full, axis=1, kind="stable")[:, :4]
    np.testing.assert_array_equal(hits.indices, expected)
    np.testing.assert_allclose(hits.similarities, np.take_along_axis(full, expected, 1), atol=1e-6)


def test_bm25_search_goes_through_a_text_retriever_without_vectors(corpus_dir: Path):
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    assert isinstance(kb.store, Retriever) and kb.store.query_kind == "text"
    assert kb.describe().backend == "bm25s" and kb.store.dimension == 0
    with pytest.raises(InputError, match="a BM25 knowledge base has no vectors"):
        _ = kb.vectors
    hits = kb.search(["queen bee eggs", "steam trains"], k=3)
    np.testing.assert_array_equal(
        hits.indices, kb.store.search(["queen bee eggs", "steam trains"], 3).indices
    )


def test_an_unsaved_add_is_searched_at_once(corpus_dir: Path, tmp_path: Path):
    kb = KnowledgeBase.build([corpus_dir / "bees"], embedder="bm25")
    assert len(kb.store) == 5
    (tmp_path / "owls.txt").write_text("Owls hunt mice at night.")
    kb.add([tmp_path / "owls.txt"])
    assert len(kb.store) == 6
    assert kb.chunk_at(kb.search(["owls hunting mice"], k=1).indices[0, 0]).source.endswith(
        "owls.txt"
    )
