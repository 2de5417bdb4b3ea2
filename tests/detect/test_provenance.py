"""What a calibration records of where it came from, alone (no Guard): canaries searched on the
knowledge, the questions' origin, the embed runtime, and the reading of its conversations."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragbound.detect.canary import CANARY_COUNT
from ragbound.detect.config import DetectorConfig
from ragbound.detect.fitting import fit_rows
from ragbound.detect.provenance import record_provenance, record_reading
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from tests.texts import IN_KNOWLEDGE

pytestmark = pytest.mark.filterwarnings("ignore:.*calibration questions are few")


def test_the_canaries_origin_and_runtime_are_recorded(minilm_kb_dir: Path) -> None:
    kb = KnowledgeBase.load(minilm_kb_dir)
    calibration = fit_rows(kb, IN_KNOWLEDGE, DetectorConfig(k=4)).calibration
    assert calibration.manifest.canaries == [] and calibration.manifest.embed_runtime is None
    record_provenance(kb, calibration, "real")
    manifest = calibration.manifest
    assert 0 < len(manifest.canaries) <= CANARY_COUNT
    assert {c.query for c in manifest.canaries} <= set(IN_KNOWLEDGE)
    first = manifest.canaries[0]
    assert first.similarities == pytest.approx(
        kb.search([first.query], len(first.similarities)).similarities[0].tolist(), abs=1e-6
    )
    assert manifest.questions.origin == "real" and manifest.questions.declared
    assert manifest.questions.n_real == len(IN_KNOWLEDGE)
    assert manifest.embed_runtime in ("torch", "onnx")
    origins = {q: "synthetic" for q in IN_KNOWLEDGE}
    record_provenance(kb, calibration, origins)
    assert calibration.manifest.questions.approximate
    assert not calibration.manifest.questions.declared


def test_the_reading_is_checked_then_kept(minilm_kb_dir: Path) -> None:
    kb = KnowledgeBase.load(minilm_kb_dir)
    calibration = fit_rows(kb, IN_KNOWLEDGE, DetectorConfig(k=4)).calibration
    record_reading(calibration, "follow")
    assert calibration.manifest.reading == "follow"
    with pytest.raises(InputError, match="unknown reading 'sideways'"):
        record_reading(calibration, "sideways")
    assert calibration.manifest.reading == "follow"
    record_reading(calibration, None)
    assert calibration.manifest.reading is None
