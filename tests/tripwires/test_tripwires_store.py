"""Tripwire files, and live add/remove inside a real MiniLM knowledge base."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.tripwires import (
    LiveTripwires,
    TripwireFields,
    TripwireWatch,
    read_tripwires,
    tripwire_id,
)
from ragbound.tripwires.folder import FOLDER_POLL_S
from tests.tripwires.tripwire_texts import TRIPWIRES


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def kb(minilm_kb_dir: Path, tmp_path: Path) -> KnowledgeBase:
    target = tmp_path / "kb"
    shutil.copytree(minilm_kb_dir, target)
    return KnowledgeBase.load(target)


def digest(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_file_formats_ids_and_labelled_examples(tmp_path: Path) -> None:
    tripwires = read_tripwires(write_jsonl(tmp_path / "t.jsonl", TRIPWIRES))
    assert [t.topic for t in tripwires] == ["harm", "harm", "sabotage", "sabotage"]
    assert tripwires[0].id == tripwire_id("harm", TRIPWIRES[0]["text"])
    csv = tmp_path / "t.csv"
    csv.write_text(
        "id,prompt,type,label\n7,How to derail a train?,sabotage,unsafe\n"
        "8,How do trains brake?,signals,safe\n",
        encoding="utf-8",
    )
    fields = TripwireFields(text="prompt", topic_field="type", label_field="label")
    labelled = read_tripwires(csv, fields)
    assert [(t.id, t.topic) for t in labelled] == [("7", "sabotage")]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"text": "How do I derail a train?"}], "no topic"),
        ([{"text": "   ", "topic": "harm"}], "text"),
        (
            [
                {"text": "a b c", "topic": "x", "id": "1"},
                {"text": "d e f", "topic": "x", "id": "1"},
            ],
            "duplicate tripwire id",
        ),
        ([{"text": "a b c", "topic": "x", "severity": "extreme"}], "severity"),
    ],
)
def test_bad_tripwire_files_name_the_problem(tmp_path: Path, rows, message) -> None:
    with pytest.raises(InputError, match=message):
        read_tripwires(write_jsonl(tmp_path / "bad.jsonl", rows))


def test_topic_option_fills_missing_topics(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [{"text": "How do I derail a train?"}])
    assert read_tripwires(path, TripwireFields(topic="sabotage"))[0].topic == "sabotage"


def test_add_and_remove_never_touch_the_knowledge(kb: KnowledgeBase) -> None:
    before = digest(kb.path / "segments"), (kb.path / "manifest.json").read_bytes()
    fingerprint = kb.fingerprint
    store = LiveTripwires.open(kb)
    change = store.add(read_tripwires(write_jsonl(kb.path.parent / "t.jsonl", TRIPWIRES)))
    assert change.action == "add" and change.n_after == 4
    assert LiveTripwires.open(KnowledgeBase.load(kb.path)).topics() == {"harm": 2, "sabotage": 2}
    removal = store.remove(topics=["harm"])
    assert removal.ids == [t.id for t in read_tripwires(kb.path.parent / "t.jsonl")[:2]]
    reopened = LiveTripwires.open(KnowledgeBase.load(kb.path))
    assert reopened.topics() == {"sabotage": 2}
    assert [c.action for c in reopened.manifest.history] == ["add", "remove"]
    assert reopened.manifest.set_hash == removal.set_hash != change.set_hash
    assert (digest(kb.path / "segments"), (kb.path / "manifest.json").read_bytes()) == before
    assert KnowledgeBase.load(kb.path).fingerprint == fingerprint
    assert len(list((kb.path / "tripwires").iterdir())) == 2  # only the live generation


def test_removed_vectors_are_kept_not_re_embedded(kb: KnowledgeBase, monkeypatch) -> None:
    store = LiveTripwires.open(kb)
    store.add(read_tripwires(write_jsonl(kb.path.parent / "t.jsonl", TRIPWIRES)))
    kept = store.vectors[2:].copy()
    monkeypatch.setattr(kb, "embed", lambda *a, **k: pytest.fail("re-embedded on remove"))
    store.remove(ids=[store.tripwires[0].id, store.tripwires[1].id])
    assert (LiveTripwires.open(KnowledgeBase.load(kb.path)).vectors == kept).all()


def test_a_failed_add_changes_nothing(kb: KnowledgeBase) -> None:
    store = LiveTripwires.open(kb)
    store.add(read_tripwires(write_jsonl(kb.path.parent / "t.jsonl", TRIPWIRES[:2])))
    before = digest(kb.path)
    with pytest.raises(InputError, match="already in the knowledge base"):
        store.add(read_tripwires(write_jsonl(kb.path.parent / "u.jsonl", TRIPWIRES[1:])))
    assert digest(kb.path) == before and len(store) == 2


def test_remove_unknown_topic_or_id_is_an_error(kb: KnowledgeBase) -> None:
    store = LiveTripwires.open(kb)
    store.add(read_tripwires(write_jsonl(kb.path.parent / "t.jsonl", TRIPWIRES)))
    with pytest.raises(InputError, match="topic 'weapons'"):
        store.remove(topics=["weapons"])
    with pytest.raises(InputError, match="id 'nope'"):
        store.remove(ids=["nope"])
    with pytest.raises(InputError, match="name the tripwires"):
        store.remove()
    assert len(LiveTripwires.open(KnowledgeBase.load(kb.path))) == 4


def test_corrupt_generation_is_detected(kb: KnowledgeBase) -> None:
    store = LiveTripwires.open(kb)
    store.add(read_tripwires(write_jsonl(kb.path.parent / "t.jsonl", TRIPWIRES)))
    live = next((kb.path / "tripwires").glob("*.jsonl"))
    live.write_text(live.read_text().replace("poison", "paint"), encoding="utf-8")
    with pytest.raises(ArtifactError, match=f"{live.name} is damaged: its SHA-256"):
        LiveTripwires.open(KnowledgeBase.load(kb.path))
    # a manifest written before checksums: the set hash still catches the edit
    manifest = kb.path / "tripwires.json"
    old = json.loads(manifest.read_text())
    del old["texts_sha256"], old["vectors_sha256"]
    manifest.write_text(json.dumps(old))
    with pytest.raises(ArtifactError, match="set hash"):
        LiveTripwires.open(KnowledgeBase.load(kb.path))


def test_bm25_and_unsaved_knowledge_bases_are_refused(corpus_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="save the knowledge base"):
        LiveTripwires.open(KnowledgeBase.build([corpus_dir], embedder="minilm"))
    bm25 = KnowledgeBase.build([corpus_dir], embedder="bm25")
    bm25.save(tmp_path / "bm25")
    with pytest.raises(InputError, match="dense"):
        LiveTripwires.open(bm25)


def test_tripwire_search_is_exact_over_the_live_set(kb: KnowledgeBase) -> None:
    store = LiveTripwires.open(kb)
    queries = kb.embed(["how to poison a water supply", "bees dance"])
    empty = store.search(queries, k=3)
    assert empty.similarities.shape == empty.indices.shape == (2, 0)
    store.add(read_tripwires(write_jsonl(kb.path.parent / "t.jsonl", TRIPWIRES)))
    hits = store.search(queries, k=10)  # k above the set size: the whole set, ranked
    full = queries @ store.vectors.T
    expected = np.argsort(-full, axis=1, kind="stable")
    np.testing.assert_array_equal(hits.indices, expected)
    np.testing.assert_allclose(hits.similarities, np.take_along_axis(full, expected, 1), atol=1e-6)
    store.remove(ids=[store.tripwires[int(expected[0, 0])].id])
    assert store.search(queries, k=10).indices.shape == (2, 3)


def test_threads_adding_at_once_through_one_store_both_land(kb: KnowledgeBase) -> None:
    from concurrent.futures import ThreadPoolExecutor

    store = LiveTripwires.open(kb)
    halves = [
        read_tripwires(write_jsonl(kb.path.parent / f"{i}.jsonl", rows))
        for i, rows in enumerate((TRIPWIRES[:2], TRIPWIRES[2:]))
    ]
    with ThreadPoolExecutor(2) as pool:
        changes = list(pool.map(store.add, halves))
    assert sorted(c.n_after for c in changes) == [2, 4]
    reopened = LiveTripwires.open(KnowledgeBase.load(kb.path))
    assert {t.id for t in reopened.tripwires} == {t.id for half in halves for t in half}
    expected = kb.embed([t.text for t in reopened.tripwires])
    np.testing.assert_allclose(reopened.vectors, expected, atol=1e-5)


def test_a_watch_on_the_folder_is_the_stamp_of_tripwires_json(kb: KnowledgeBase) -> None:
    watch = TripwireWatch(kb)
    assert watch.interval == FOLDER_POLL_S and watch.version() is None is watch.local()
    store = LiveTripwires.open(kb)
    store.add(read_tripwires(write_jsonl(kb.path / "t.jsonl", TRIPWIRES[:2])))
    first = watch.version()
    assert first is not None and first == watch.local() == watch.version()
    store.remove(ids=[store.tripwires[0].id])
    assert watch.version() != first
