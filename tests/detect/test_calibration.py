"""A calibration's manifest and folder read without loading it: whether it was made for
another version of the knowledge base, and how many queries learned its score."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ragbound.detect.calibration import CALIBRATION_DIR, Calibration
from ragbound.detect.config import DetectorConfig
from ragbound.stores import SearchInfo

EXACT = SearchInfo(backend="exact", exact=True, similarity="cosine")


def _calibration(kb_fingerprint: str) -> Calibration:
    similarities = np.sort(np.random.default_rng(0).random((3, 4)))[:, ::-1]
    return Calibration.create(
        ["q1", "q2", "q3"],
        similarities,
        kb_fingerprint=kb_fingerprint,
        config=DetectorConfig(k=4),
        search=EXACT,
    )


def test_a_folder_without_a_calibration_is_not_stale(tmp_path: Path) -> None:
    assert Calibration.stale_fingerprint(tmp_path, "abc") is None


def test_a_calibration_for_other_knowledge_names_its_fingerprint(tmp_path: Path) -> None:
    _calibration("abc").save(tmp_path, standalone=True)
    assert Calibration.stale_fingerprint(tmp_path, "abc") is None
    assert Calibration.stale_fingerprint(tmp_path, "def") == "abc"


def test_an_unreadable_calibration_is_stale_for_unknown_knowledge(tmp_path: Path) -> None:
    _calibration("abc").save(tmp_path, standalone=True)
    (tmp_path / CALIBRATION_DIR / "manifest.json").write_text("{not json", encoding="utf-8")
    assert Calibration.stale_fingerprint(tmp_path, "abc") == "unknown"
    (tmp_path / CALIBRATION_DIR / "manifest.json").write_text("[1, 2]", encoding="utf-8")
    assert Calibration.stale_fingerprint(tmp_path, "abc") == "unknown"


def test_a_fixed_statistic_learned_from_no_query() -> None:
    assert _calibration("abc").manifest.n_learning == 0
