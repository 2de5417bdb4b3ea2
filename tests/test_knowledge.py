import gc
import hashlib
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from ragbound.corpus import LINE_IDS, Chunk, ChunkSequence
from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge import LOCK_WHAT, KnowledgeBase
from ragbound.locking import writer_lock
from ragbound.stores import Retriever, SearchInfo


def segment_files(kb_dir: Path, suffix: str) -> list[Path]:
    """The committed manifest's segment files of one kind, in manifest order."""
    manifest = json.loads((kb_dir / "manifest.json").read_text())
    return [kb_dir / "segments" / f"{s['name']}{suffix}" for s in manifest["segments"]]


def test_build_save_load_round_trip(minilm_kb_dir: Path):
    kb = KnowledgeBase.load(minilm_kb_dir)
    assert len(kb) == 10 and kb.manifest.n_documents == 10
    assert kb.manifest.embedder.dimension == 384
    assert kb.manifest.embedder.similarity == "cosine"
    assert kb.vectors.dtype == np.float32 and kb.vectors.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(kb.vectors, axis=1), 1.0, atol=1e-5)
    manifest = json.loads((minilm_kb_dir / "manifest.json").read_text())
    assert manifest["format"] == "ragbound.kb/1"
    assert manifest["chunking"] == {"chunk_words": 200, "overlap": 40, "splitter": "ragbound"}


def live_chunks() -> int:
    gc.collect()
    return sum(type(o) is Chunk for o in gc.get_objects())


def test_a_loaded_knowledge_base_keeps_its_chunks_on_disk_and_round_trips(
    minilm_kb_dir: Path, corpus_dir: Path, tmp_path: Path
):
    before = live_chunks()
    kb = KnowledgeBase.load(minilm_kb_dir)
    assert live_chunks() == before  # no Chunk object until one is asked for
    assert isinstance(kb.chunks, ChunkSequence) and kb.chunks.nbytes == 16 * len(kb)
    kb.search(["Which dance do bees use?"], k=3)
    assert live_chunks() == before  # a dense search reads no chunk text
    built = KnowledgeBase.build([corpus_dir], embedder="minilm")
    assert kb.chunks == built.chunks and kb.chunk_at(-1) == built.chunks[-1]
    kb.save(tmp_path / "copy")
    again = KnowledgeBase.load(tmp_path / "copy")
    assert list(again.chunks) == list(kb.chunks) and again.fingerprint == kb.fingerprint


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
    [old_file] = segment_files(tmp_path / "kb", ".vectors.npy")
    old_bytes = old_file.read_bytes()
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
    assert segment_files(tmp_path / "kb", ".vectors.npy")[0] == old_file
    assert old_file.read_bytes() == old_bytes
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
    import ragbound.knowledge.local as knowledge

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
    [chunk_file] = segment_files(target, ".chunks.jsonl")
    chunk_file.write_text("{not json\n")
    with pytest.raises(ArtifactError, match=rf"{chunk_file.name} is damaged: its SHA-256"):
        KnowledgeBase.load(target)
    (target / "manifest.json").write_text("[]")
    with pytest.raises(ArtifactError, match="format"):
        KnowledgeBase.load(target)


def test_truncated_vectors_are_detected(minilm_kb_dir: Path, tmp_path: Path):
    target = tmp_path / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(target)
    unrecorded(target)
    np.save(segment_files(target, ".vectors.npy")[0], np.zeros((3, 384), np.float32))
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
    with pytest.raises(InputError, match="already holds a knowledge base"):
        bees.save(target)
    assert len(KnowledgeBase.load(target)) == 10
    bees.save(target, overwrite=True)
    assert len(KnowledgeBase.load(target)) == 5
    # replaced in place: no staging folder beside it, only the writers' lock file
    assert sorted(p.name for p in tmp_path.iterdir()) == [".kb.lock", "kb"]


def test_overwrite_replaces_a_folder_whose_manifest_this_version_cannot_read(
    corpus_dir: Path, tmp_path: Path
):
    target = tmp_path / "kb"
    KnowledgeBase.build([corpus_dir], embedder="bm25").save(target)
    manifest = target / "manifest.json"
    old = json.loads(manifest.read_text())
    old["chunking"]["splitter"] = "blingfire"  # chunked by a splitter this version lacks
    manifest.write_text(json.dumps(old))
    with pytest.raises(ArtifactError, match="index the documents again"):
        KnowledgeBase.load(target)
    KnowledgeBase.build([corpus_dir / "bees"], embedder="bm25").save(target, overwrite=True)
    assert len(KnowledgeBase.load(target)) == 5


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


class ExternalLock:
    """Hold a knowledge base's writer lock from another thread (another writer, in effect)."""

    def __init__(self, kb_dir: Path):
        self.kb_dir = kb_dir
        self.held, self.release = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._hold)

    def _hold(self) -> None:
        with writer_lock(self.kb_dir, what=LOCK_WHAT):
            self.held.set()
            self.release.wait()

    def __enter__(self) -> "ExternalLock":
        self.thread.start()
        self.held.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join()


def unrecorded(kb_dir: Path) -> None:
    """Make the manifest look as written before checksums were recorded."""
    path = kb_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    for segment in manifest["segments"]:
        segment.pop("chunks_sha256", None)
        segment.pop("vectors_sha256", None)
    path.write_text(json.dumps(manifest))


def bm25_kb(corpus: Path, target: Path) -> Path:
    KnowledgeBase.build([corpus], embedder="bm25").save(target)
    return target


def write_doc(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder / name


def test_manifest_records_each_files_sha256(minilm_kb_dir: Path):
    manifest = json.loads((minilm_kb_dir / "manifest.json").read_text())
    [segment] = manifest["segments"]
    for key, suffix in (("chunks_sha256", ".chunks.jsonl"), ("vectors_sha256", ".vectors.npy")):
        data = (minilm_kb_dir / "segments" / f"{segment['name']}{suffix}").read_bytes()
        assert segment[key] == hashlib.sha256(data).hexdigest()


def test_a_manifest_without_checksums_still_loads_and_is_checked_by_parsing(
    corpus_dir: Path, tmp_path: Path
):
    target = bm25_kb(corpus_dir, tmp_path / "kb")
    unrecorded(target)
    assert len(KnowledgeBase.load(target)) == 10
    [chunk_file] = segment_files(target, ".chunks.jsonl")
    chunk_file.write_bytes(chunk_file.read_bytes().replace(b"bees", b"\xff\xfe", 1))
    with pytest.raises(ArtifactError, match=rf"{chunk_file.name} is corrupt: not UTF-8"):
        KnowledgeBase.load(target)


def test_nan_vectors_are_refused_without_checksums(minilm_kb_dir: Path, tmp_path: Path):
    target = tmp_path / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(target)
    unrecorded(target)
    [vector_file] = segment_files(target, ".vectors.npy")
    vectors = np.load(vector_file)
    vectors[3, 7] = np.nan
    np.save(vector_file, vectors)
    with pytest.raises(ArtifactError, match=rf"{vector_file.name}: holds NaN"):
        KnowledgeBase.load(target)


def test_an_old_style_segment_name_loads_and_takes_an_add(corpus_dir: Path, tmp_path: Path):
    target = bm25_kb(corpus_dir / "bees", tmp_path / "kb")
    manifest = json.loads((target / "manifest.json").read_text())
    [segment] = manifest["segments"]
    for suffix in (".chunks.jsonl",):
        (target / "segments" / f"{segment['name']}{suffix}").rename(
            target / "segments" / f"000001{suffix}"
        )
    segment["name"] = "000001"
    (target / "manifest.json").write_text(json.dumps(manifest))
    kb = KnowledgeBase.load(target)
    kb.add([write_doc(tmp_path / "new", "owls.txt", "Owls hunt mice at night.")])
    kb.save()
    assert len(KnowledgeBase.load(target)) == 6
    assert (target / "segments" / "000001.chunks.jsonl").exists()


def _records(path: Path, *ids: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"id": i, "text": f"Record {i} is about bees and honey."}) for i in ids]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_records_keep_their_ids_and_an_add_loads_as_the_build_did(tmp_path: Path):
    target = tmp_path / "kb"
    KnowledgeBase.build([_records(tmp_path / "a.jsonl", "r1", "r2")], embedder="bm25").save(target)
    kb = KnowledgeBase.load(target)
    kb.add([_records(tmp_path / "new" / "b.jsonl", "r3")])
    assert [c.doc_id for c in kb.chunks] == ["r1", "r2", "r3"]


def test_a_knowledge_base_with_line_ids_keeps_them_on_add(tmp_path: Path):
    target = tmp_path / "kb"
    corpus = _records(tmp_path / "a.jsonl", "r1", "r1")  # one id twice: fine by line
    KnowledgeBase.build([corpus], embedder="bm25", id_field=LINE_IDS).save(target)
    kb = KnowledgeBase.load(target)
    kb.add([_records(tmp_path / "new" / "b.jsonl", "r2", "r2")])
    kb.save()
    ids = [c.doc_id for c in KnowledgeBase.load(target).chunks]
    assert ids == ["a.jsonl:1", "a.jsonl:2", "b.jsonl:1", "b.jsonl:2"]


def test_an_add_saved_after_another_writer_committed_keeps_both(corpus_dir: Path, tmp_path: Path):
    target = bm25_kb(corpus_dir / "bees", tmp_path / "kb")
    first, second = KnowledgeBase.load(target), KnowledgeBase.load(target)
    first.add([write_doc(tmp_path / "a", "owls.txt", "Owls hunt mice at night.")])
    second.add([write_doc(tmp_path / "b", "moles.txt", "Moles dig tunnels under lawns.")])
    first.save()
    second.save()  # appends to what first committed, not to its stale copy
    loaded = KnowledgeBase.load(target)
    assert sorted(c.doc_id for c in loaded.chunks)[-2:] == ["moles.txt", "owls.txt"]
    assert len(loaded) == len(second) == 7 and loaded.fingerprint == second.fingerprint


def test_the_same_document_added_by_two_writers_lands_once(corpus_dir: Path, tmp_path: Path):
    target = bm25_kb(corpus_dir / "bees", tmp_path / "kb")
    first, second = KnowledgeBase.load(target), KnowledgeBase.load(target)
    owls = write_doc(tmp_path / "a", "owls.txt", "Owls hunt mice at night.")
    first.add([owls])
    second.add([owls])
    first.save()
    with pytest.raises(InputError, match=r"added to .* by another writer meanwhile: 'owls.txt'"):
        second.save()
    assert len(KnowledgeBase.load(target)) == 6


def test_threads_adding_at_once_all_land(corpus_dir: Path, tmp_path: Path):
    target = bm25_kb(corpus_dir / "bees", tmp_path / "kb")

    def add(i: int) -> None:
        kb = KnowledgeBase.load(target)
        kb.add([write_doc(tmp_path / f"t{i}", f"doc{i}.txt", f"Animal number {i} sleeps.")])
        kb.save()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(add, range(8)))
    loaded = KnowledgeBase.load(target)
    assert len(loaded) == 13 and len(loaded.manifest.segments) == 9
    assert len(list((target / "segments").iterdir())) == 9  # no stray files


def test_files_a_crashed_write_left_are_removed_and_never_trusted(corpus_dir: Path, tmp_path: Path):
    target = bm25_kb(corpus_dir / "bees", tmp_path / "kb")
    stale = target / "segments" / "000002-deadbeef.chunks.jsonl"
    stale.write_text('{"junk": true}\n' * 200)
    (target / ".manifest.json.x1.tmp").write_text("{")
    kb = KnowledgeBase.load(target)
    kb.add([write_doc(tmp_path / "new", "owls.txt", "Owls hunt mice at night.")])
    kb.save()
    assert not stale.exists() and not (target / ".manifest.json.x1.tmp").exists()
    assert len(KnowledgeBase.load(target)) == 6


def test_index_reuses_a_folder_only_a_crashed_build_left(corpus_dir: Path, tmp_path: Path):
    target = tmp_path / "kb"
    write_doc(target / "segments", "000001-0badc0de.chunks.jsonl", "{}\n")
    (target / ".manifest.json.abc.tmp").write_text("{")
    bm25_kb(corpus_dir, target)
    assert len(KnowledgeBase.load(target)) == 10
    assert sorted(p.name for p in target.iterdir()) == ["manifest.json", "segments"]


def test_overwrite_refuses_other_files_and_names_them(corpus_dir: Path, tmp_path: Path):
    target = bm25_kb(corpus_dir, tmp_path / "kb")
    (target / "notes.txt").write_text("mine")
    bees = KnowledgeBase.build([corpus_dir / "bees"], embedder="bm25")
    with pytest.raises(InputError, match=r"1 file.* ragbound did not write: notes.txt"):
        bees.save(target, overwrite=True)
    assert len(KnowledgeBase.load(target)) == 10 and (target / "notes.txt").exists()
    told: list[str] = []
    bees.save(target, overwrite=True, delete_other_files=True, notify=told.append)
    assert len(KnowledgeBase.load(target)) == 5 and not (target / "notes.txt").exists()
    assert told == [f"warning: deleted 1 other file(s) in {target}: notes.txt"]


def test_overwrite_removes_the_old_calibration_and_tripwires_and_says_so(
    corpus_dir: Path, tmp_path: Path
):
    target = bm25_kb(corpus_dir, tmp_path / "kb")
    write_doc(target / "calibration", "manifest.json", "{}")
    (target / "tripwires.json").write_text("{}")
    write_doc(target / "tripwires", "x.npy", "")
    told: list[str] = []
    KnowledgeBase.build([corpus_dir / "bees"], embedder="bm25").save(
        target, overwrite=True, notify=told.append
    )
    assert sorted(p.name for p in target.iterdir()) == ["manifest.json", "segments"]
    assert len(list((target / "segments").iterdir())) == 1  # the old segment is gone
    assert [m.split(" (")[0] for m in told] == [
        "warning: removed the calibration of the replaced knowledge base",
        "warning: removed the tripwires of the replaced knowledge base",
    ]


def test_a_second_writer_is_refused_after_the_timeout(
    corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    target = bm25_kb(corpus_dir / "bees", tmp_path / "kb")
    kb = KnowledgeBase.load(target)
    kb.add([write_doc(tmp_path / "new", "owls.txt", "Owls hunt mice at night.")])
    monkeypatch.setenv("RAGBOUND_LOCK_TIMEOUT", "0")
    with (
        ExternalLock(target),
        pytest.raises(ArtifactError, match=r"writing the knowledge base .* gave up after 0 s"),
    ):
        kb.save()
    assert len(KnowledgeBase.load(target)) == 5


def test_a_reader_overtaken_by_an_overwrite_reads_again(
    corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The overwrite commits and removes the old files right after the reader read the old
    manifest (the window a real reader hits only by luck): the reader reads again."""
    import ragbound.knowledge.commits as knowledge

    target = bm25_kb(corpus_dir, tmp_path / "kb")
    bees = KnowledgeBase.build([corpus_dir / "bees"], embedder="bm25")
    read_manifest = knowledge.read_manifest
    calls: list[int] = []

    def overtaken(*args, **kwargs):
        manifest = read_manifest(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            bees.save(target, overwrite=True)  # another writer, between read and open
        return manifest

    monkeypatch.setattr(knowledge, "read_manifest", overtaken)
    assert len(KnowledgeBase.load(target)) == 5  # the new one, read again after the commit
