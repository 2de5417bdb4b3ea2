"""The tripwire floor's reference questions kept with a saved calibration: a load reads their
vectors instead of embedding them, the floor is the one embedding them gives, and a folder
saved before they were kept (or searched by text) still loads and embeds them."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from ragbound.artifacts import read_json, write_json
from ragbound.detect import Guard
from ragbound.detect.calibration import Calibration
from ragbound.errors import ArtifactError
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.serve.service import Service
from ragbound.serve.settings import ServeSettings
from ragbound.tripwires import TripwireTest
from ragbound.tripwires.floor import reference_texts
from tests.tripwires.test_tripwire_floor import (
    FORBIDDEN,
    SAMPLE,
    VAGUE,
    questions,
    sample_with_tripwires,
)

ASKED = [VAGUE, FORBIDDEN, "What does a conformal p-value guarantee?"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample with its tripwires, calibrated on its questions and saved."""
    out = tmp_path_factory.mktemp("reference") / "kb"
    Guard.calibrate(sample_with_tripwires(out), questions()).save()
    return out


def without_reference(saved: Path, target: Path) -> Path:
    """A copy of ``saved`` as a calibration written before the vectors were kept."""
    shutil.copytree(saved, target)
    manifest = read_json(target / "calibration" / "manifest.json", "manifest")
    (target / "calibration" / f"{manifest['id']}.reference.npy").unlink()
    write_json(target / "calibration" / "manifest.json", manifest | {"reference": None})
    return target


def test_a_load_reads_the_kept_vectors_and_the_floor_is_the_embedded_one(
    saved: Path, tmp_path: Path
) -> None:
    gate = Gate.load(saved)
    calibration = gate.guard.calibration
    kept = np.load(saved / "calibration" / f"{calibration.manifest.id}.reference.npy")
    assert gate.reference.vectors is not None and np.array_equal(gate.reference.vectors, kept)
    assert kept.dtype == np.float32 and kept.shape == (len(questions()), 384)
    assert calibration.manifest.reference is not None
    assert calibration.manifest.reference.kb_fingerprint == gate.guard.kb.fingerprint
    # before: the questions embedded at load (an older folder) or at a first decision (in
    # process, unsaved); the floor, its bound and the decisions are the same to the bit
    older = Gate.load(without_reference(saved, tmp_path / "older"))
    kb = KnowledgeBase.load(saved)
    fresh = Gate(Guard.calibrate(kb, questions()), TripwireTest(kb))
    assert not fresh.reference.prepared
    assert gate.tripwires is not None and older.tripwires is not None
    floor = gate.tripwires.floor()
    assert floor.source == "calibrated" and floor.n_reference == len(questions())
    assert older.tripwires.floor() == floor == fresh.tripwires.floor()
    assert fresh.reference.prepared
    assert np.array_equal(older.reference.vectors, kept)
    ours, theirs = gate.decide_many(ASKED), older.decide_many(ASKED)
    assert [d.model_dump() for d in ours] == [d.model_dump() for d in theirs]
    assert [d.action for d in ours] == ["abstain", "reject", "answer"]


def test_an_older_folder_embeds_at_load_and_keeps_them_when_saved_again(
    saved: Path, tmp_path: Path
) -> None:
    older = without_reference(saved, tmp_path / "older")
    guard = Guard.load(older)
    assert guard.calibration.reference is None and not guard.reference.prepared
    guard.save()
    again = Calibration.load(older)
    assert again.reference is not None and again.manifest.reference is not None
    assert np.array_equal(again.reference, guard.reference.vectors)


def test_kept_vectors_serve_only_their_questions_and_knowledge(saved: Path) -> None:
    calibration = Calibration.load(saved)
    texts = reference_texts(calibration.queries)
    fingerprint = calibration.manifest.kb_fingerprint
    assert calibration.reference_for(texts, fingerprint) is not None
    assert calibration.reference_for(texts[1:], fingerprint) is None  # other questions
    assert calibration.reference_for(texts, "0" * 16) is None  # other knowledge: embedded


def test_a_damaged_reference_file_is_refused(saved: Path, tmp_path: Path) -> None:
    copy = tmp_path / "kb"
    shutil.copytree(saved, copy)
    ident = read_json(copy / "calibration" / "manifest.json", "manifest")["id"]
    path = copy / "calibration" / f"{ident}.reference.npy"
    vectors = np.load(path)
    vectors[0, 0] += 0.5
    np.save(path, vectors)
    with pytest.raises(ArtifactError, match="reference vectors"):
        Calibration.load(copy)


def test_lexical_knowledge_keeps_no_vectors(tmp_path: Path) -> None:
    out = tmp_path / "bm25"
    KnowledgeBase.build([SAMPLE / "docs"], embedder="bm25").save(out)
    Guard.calibrate(KnowledgeBase.load(out), questions()).save()
    calibration = Calibration.load(out)
    assert calibration.reference is None and calibration.manifest.reference is None
    assert [p.name.split(".")[1] for p in (out / "calibration").glob("*.npy")] == ["similarities"]


def test_the_service_searches_the_reference_before_it_is_ready(saved: Path) -> None:
    kb = KnowledgeBase.load(saved)
    gate = Gate(Guard.calibrate(kb, questions()), TripwireTest(kb))  # nothing kept: unsaved
    service = Service(gate, ServeSettings())
    assert not gate.reference.prepared
    try:
        service.load()
        assert service.ready and gate.reference.prepared, service.error
    finally:
        service.close()
