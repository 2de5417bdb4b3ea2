"""Saving a calibration alone (no Guard): in a folder of the caller's, with the tripwire
floor's reference vectors, loaded back as saved; refused for knowledge with no folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragbound.detect.calibration import Calibration
from ragbound.detect.config import DetectorConfig
from ragbound.detect.fitting import fit_rows
from ragbound.detect.storage import floor_reference, save_calibration
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from tests.texts import IN_KNOWLEDGE

pytestmark = pytest.mark.filterwarnings("ignore:.*calibration questions are few")


def test_saved_in_a_folder_with_the_reference_vectors(minilm_kb_dir: Path, tmp_path: Path) -> None:
    kb = KnowledgeBase.load(minilm_kb_dir)
    calibration = fit_rows(kb, IN_KNOWLEDGE, DetectorConfig(k=4)).calibration
    reference = floor_reference(kb, calibration)
    assert reference.texts and calibration.reference is None
    saved = save_calibration(kb, calibration, reference, folder=tmp_path / "mine")
    assert saved == tmp_path / "mine" / "calibration"
    again = Calibration.load(tmp_path / "mine")
    assert again.manifest.id == calibration.manifest.id
    np.testing.assert_array_equal(again.similarities, calibration.similarities)
    kept = again.reference_for(reference.texts, kb.fingerprint)
    assert kept is not None and len(kept) == len(reference.texts)
    # a reference made from the saved calibration reads those vectors instead of embedding
    assert floor_reference(kb, again).vectors is kept


def test_knowledge_without_a_folder_is_refused(corpus_dir: Path) -> None:
    kb = KnowledgeBase.build([corpus_dir], embedder="minilm")
    assert kb.path is None
    calibration = fit_rows(kb, IN_KNOWLEDGE, DetectorConfig(k=4)).calibration
    with pytest.raises(InputError, match="has no folder"):
        save_calibration(kb, calibration, floor_reference(kb, calibration))
