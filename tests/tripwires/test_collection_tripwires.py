"""Tripwires in the user's own collection (RAR's design): ``tripwire add`` on a knowledge base
attached to Chroma (a real ``chroma run``), Qdrant or LanceDB (embedded) writes flagged records there;
the verdicts equal those of ragbound's own tripwire files; the knowledge never returns or
counts a tripwire; records flagged by the application itself (LangChain's ``add_documents``)
are tripwires too; ``tripwire remove`` deletes them."""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np
import pytest

from ragbound.detect import Guard
from ragbound.errors import ArtifactError
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.tripwire_flags import TRIPWIRE_FLAG
from ragbound.tripwires import LiveTripwires, TripwireTest, TripwireWatch, read_tripwires
from ragbound.tripwires.collection import COLLECTION_POLL_S
from ragbound.tripwires.store import tripwire_collection
from tests.cli.runner import run
from tests.qdrantfill import fill
from tests.support.chroma_server import ChromaServer, fill_collection
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE
from tests.tripwires.tripwire_texts import OFF_TOPIC, SAFE, UNSAFE, write_tripwire_file

QUERIES = UNSAFE + SAFE + [OFF_TOPIC]


@pytest.fixture(scope="module")
def local(minilm_kb_dir: Path) -> KnowledgeBase:
    return KnowledgeBase.load(minilm_kb_dir)


@pytest.fixture(scope="module")
def own_verdicts(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list:
    """The verdicts of ragbound's own knowledge base with the tripwires as files."""
    from tests.tripwires.tripwire_texts import tripwired_copy

    kb = tripwired_copy(minilm_kb_dir, tmp_path_factory.mktemp("own") / "kb")
    return TripwireTest(kb).check_many(QUERIES)


def _chroma_kb(chroma: ChromaServer, local: KnowledgeBase, out: Path) -> KnowledgeBase:
    name = f"app_{secrets.token_hex(3)}"
    texts = [c.text for c in local.chunks]
    fill_collection(chroma, name, texts, local.vectors, ids=[c.doc_id for c in local.chunks])
    return KnowledgeBase.attach(chroma.url(name), out)


def _qdrant_kb(local: KnowledgeBase, tmp_path: Path) -> KnowledgeBase:
    url = fill(tmp_path / "qdrant", local.chunks, local.vectors)
    return KnowledgeBase.attach(url, tmp_path / "kb")


def _same_verdicts(mine: list, theirs: list) -> None:
    assert [v.forbidden for v in mine] == [v.forbidden for v in theirs]
    assert [v.rule for v in mine] == [v.rule for v in theirs]
    assert [[t.id for t in v.triggers] for v in mine] == [
        [t.id for t in v.triggers] for v in theirs
    ]
    for a, b in zip(mine, theirs, strict=True):
        np.testing.assert_allclose(
            [t.similarity for t in a.triggers], [t.similarity for t in b.triggers], atol=1e-5
        )
    assert mine[0].tripwire_set == theirs[0].tripwire_set


def _added_to(kb: KnowledgeBase, tmp_path: Path) -> LiveTripwires:
    store = LiveTripwires.open(kb)
    assert len(store) == 0 and store.manifest.home == "collection"
    store.add(read_tripwires(write_tripwire_file(tmp_path / "t.jsonl")))
    return store


def _knowledge_untouched(kb: KnowledgeBase, before, n_chunks: int) -> None:
    """The knowledge searches, counts and fingerprints as before the tripwires came."""
    again = KnowledgeBase.load(kb.path)
    assert len(again) == n_chunks and again.fingerprint == kb.fingerprint
    after = again.search(QUERIES, 4)
    np.testing.assert_array_equal(after.indices, before.indices)
    texts = {again.chunk_at(int(i)).text for i in after.indices.ravel()}
    assert not texts & {t.text for t in LiveTripwires.open(again).tripwires}


def test_chroma_holds_the_tripwires_and_decides_like_the_files(
    chroma: ChromaServer, local: KnowledgeBase, own_verdicts: list, tmp_path: Path
):
    kb = _chroma_kb(chroma, local, tmp_path / "kb")
    before = kb.search(QUERIES, 4)
    guard = Guard.calibrate(kb, IN_KNOWLEDGE + MORE_IN_KNOWLEDGE, k=4, alpha=0.1)
    guard.save()
    store = _added_to(kb, tmp_path)
    name = kb.backing.location.collection
    records = chroma.client().get_collection(name).get(where={TRIPWIRE_FLAG: "harm"})
    assert len(records["ids"]) == 2 and all(r.startswith("ragbound-") for r in records["ids"])
    _same_verdicts(TripwireTest(KnowledgeBase.load(kb.path)).check_many(QUERIES), own_verdicts)
    _knowledge_untouched(kb, before, len(local))
    assert Guard.load(kb.path).check(OUT_OF_KNOWLEDGE[0]).p_value is not None  # still valid
    store.remove(topics=["harm"])
    assert not chroma.client().get_collection(name).get(where={TRIPWIRE_FLAG: "harm"})["ids"]
    assert LiveTripwires.open(KnowledgeBase.load(kb.path)).topics() == {"sabotage": 2}


def test_a_record_the_application_flags_through_langchain_is_a_tripwire(
    chroma: ChromaServer, local: KnowledgeBase, tmp_path: Path
):
    from langchain_chroma import Chroma
    from langchain_core.documents import Document

    from ragbound.adapters.langchain_store import RagboundEmbeddings

    kb = _chroma_kb(chroma, local, tmp_path / "kb")
    name = kb.backing.location.collection
    store = Chroma(
        client=chroma.client(),
        collection_name=name,
        embedding_function=RagboundEmbeddings(kb.query_embedder()),
    )
    text = UNSAFE[1]  # the query itself: it would be the nearest record of all
    store.add_documents([Document(text, metadata={TRIPWIRE_FLAG: "sabotage"})], ids=["app-1"])
    # a knowledge base loaded before the add skips the record in its search
    hits = kb.search([text], 4)
    assert text not in {kb.chunk_at(int(i)).text for i in hits.indices[0]}
    again = KnowledgeBase.load(kb.path)
    assert len(again) == len(local)
    found = LiveTripwires.open(again)
    assert [(t.id, t.topic, t.text) for t in found.tripwires] == [("app-1", "sabotage", text)]
    verdict = TripwireTest(again).check(text)
    assert verdict.triggers[0].id == "app-1" and verdict.triggers[0].rank == 1


def test_cli_adds_lists_and_removes_in_the_collection(
    chroma: ChromaServer, local: KnowledgeBase, tmp_path: Path, monkeypatch, capsys
):
    kb = _chroma_kb(chroma, local, tmp_path / "kb")
    file = str(write_tripwire_file(tmp_path / "t.jsonl"))
    code, out, err = run(monkeypatch, capsys, "tripwire", "add", str(kb.path), file)
    assert code == 0, err
    code, out, _ = run(monkeypatch, capsys, "tripwire", "list", str(kb.path))
    assert "harm" in out and "sabotage" in out
    code, out, err = run(
        monkeypatch, capsys, "tripwire", "remove", str(kb.path), "--topic", "sabotage"
    )
    assert code == 0, err
    name = kb.backing.location.collection
    left = chroma.client().get_collection(name).get(include=["metadatas"])
    flagged = [m[TRIPWIRE_FLAG] for m in left["metadatas"] if m and TRIPWIRE_FLAG in m]
    assert flagged == ["harm", "harm"]


def test_qdrant_holds_the_tripwires_and_decides_like_the_files(
    local: KnowledgeBase, own_verdicts: list, tmp_path: Path
):
    kb = _qdrant_kb(local, tmp_path)
    before = kb.search(QUERIES, 4)
    store = _added_to(kb, tmp_path)
    _same_verdicts(TripwireTest(KnowledgeBase.load(kb.path)).check_many(QUERIES), own_verdicts)
    _knowledge_untouched(kb, before, len(local))
    stored = tripwire_collection(kb).read()
    assert all(TRIPWIRE_FLAG in m for m in stored.metadatas) and len(stored.keys) == 4
    store.remove(ids=[store.tripwires[0].id])
    assert len(LiveTripwires.open(KnowledgeBase.load(kb.path))) == 3


def test_lancedb_holds_the_tripwires_and_decides_like_the_files(
    local: KnowledgeBase, own_verdicts: list, tmp_path: Path
):
    pytest.importorskip("lancedb", reason="lancedb is not installed (the lancedb extra)")
    from tests.lancefill import fill as fill_lance
    from tests.lancefill import table

    url = fill_lance(tmp_path / "lance", local.chunks, local.vectors)
    kb = KnowledgeBase.attach(url, tmp_path / "kb")
    before = kb.search(QUERIES, 4)
    store = _added_to(kb, tmp_path)
    assert table(url).count_rows(f"{TRIPWIRE_FLAG} = 'harm'") == 2  # flagged rows, a new column
    _same_verdicts(TripwireTest(KnowledgeBase.load(kb.path)).check_many(QUERIES), own_verdicts)
    _knowledge_untouched(kb, before, len(local))
    store.remove(topics=["harm"])
    assert table(url).count_rows(f"{TRIPWIRE_FLAG} IS NOT NULL") == 2
    assert LiveTripwires.open(KnowledgeBase.load(kb.path)).topics() == {"sabotage": 2}


def test_a_watch_sees_a_change_made_through_another_attach_folder(
    local: KnowledgeBase, tmp_path: Path
):
    """Two hosts' folders over one collection: the watch on B reads the collection, so A's
    add moves B's version though B's own folder never changes."""
    url = fill(tmp_path / "qdrant", local.chunks, local.vectors)
    here = KnowledgeBase.attach(url, tmp_path / "a")
    watch = TripwireWatch(KnowledgeBase.attach(url, tmp_path / "b"))
    assert watch.interval == COLLECTION_POLL_S
    before, stamp = watch.version(), watch.local()
    assert watch.version() == before  # reading it changes nothing
    store = _added_to(here, tmp_path)
    added = watch.version()
    assert added != before and watch.local() == stamp is None
    store.remove(topics=["harm"])
    assert watch.version() not in (before, added)


def test_tripwires_left_as_files_are_refused_on_a_collection(local: KnowledgeBase, tmp_path: Path):
    kb = _qdrant_kb(local, tmp_path)
    (kb.path / "tripwires.json").write_text(
        '{"format": "ragbound.tripwires/1", "generation": 1, "n_tripwires": 3, '
        '"embedder_identity": "x"}',
        encoding="utf-8",
    )
    with pytest.raises(ArtifactError, match="add them again"):
        LiveTripwires.open(kb)
