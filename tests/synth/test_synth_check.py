"""Comparing calibration queries with real questions (calibrate --real-queries)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragbound.detect import Guard
from ragbound.knowledge import KnowledgeBase
from ragbound.synth.check import (
    CONFIDENT_REAL,
    SYNTHETIC_UNCHECKED,
    check_against_real,
    check_warning,
    compare_with_real,
    record_check,
    synthetic_provenance,
    weak_silence,
)
from tests.texts import (
    IN_KNOWLEDGE,
    MORE_IN_KNOWLEDGE,
    MORE_OUT_OF_KNOWLEDGE,
    OUT_OF_KNOWLEDGE,
    TOPICS,
)

CALIBRATION = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE


@pytest.fixture(scope="module")
def guard(corpus_dir: Path) -> Guard:
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    return Guard.calibrate(kb, CALIBRATION, k=3)


def test_real_questions_far_from_the_calibration_queries_are_flagged(guard: Guard):
    real = OUT_OF_KNOWLEDGE + MORE_OUT_OF_KNOWLEDGE
    check = compare_with_real(guard, real, real_source="real.txt")
    scores = guard.detector().score(guard.calibration.similarities)
    assert check.differ and check.p_value <= check.level == 0.05
    assert (check.n_calibration, check.n_real) == (len(CALIBRATION), len(real))
    assert check.median_real > check.median_calibration
    assert check.real_fpr > guard.config.alpha
    assert check.median_calibration == pytest.approx(float(np.median(scores)))
    warning = check_warning(check)
    assert warning is not None and "real.txt" in warning and "more real in-knowledge" in warning
    assert f"D={check.ks_statistic:.3f}" in warning
    assert check.exceedance_p_value <= check.level / 2
    assert check.real_fpr == pytest.approx(np.mean(scores_of(guard, real) >= check.critical_value))


def scores_of(guard: Guard, queries: list[str]) -> np.ndarray:
    return guard.score(queries).scores


def test_calibration_queries_closer_than_real_ones_raise_the_exceedance_warning(corpus_dir: Path):
    # calibration queries that copy the documents' own words, as a small LLM's often do: they
    # sit closer to the corpus than real questions, so the critical value drops
    sentences = [s for texts in TOPICS.values() for s in texts]
    halves = [" ".join(s.split()[: len(s.split()) // 2]) for s in sentences]
    tails = [" ".join(s.split()[len(s.split()) // 2 :]) for s in sentences]
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    close = Guard.calibrate(kb, sentences + halves + tails, k=3)
    check = compare_with_real(close, IN_KNOWLEDGE + MORE_IN_KNOWLEDGE)
    assert check.differ and check.real_fpr > check.expected_fpr
    assert check.exceedance_p_value <= check.level / 2
    assert "more real in-knowledge questions are flagged" in (check_warning(check) or "")


def test_real_questions_like_the_calibration_queries_pass(guard: Guard):
    check = compare_with_real(guard, MORE_IN_KNOWLEDGE[::2])
    assert not check.differ and check_warning(check) is None
    assert not check.synthetic


def test_the_check_is_saved_in_the_calibration_manifest(guard: Guard, tmp_path: Path):
    check = compare_with_real(guard, OUT_OF_KNOWLEDGE, provenance={"prompt_ids": ["p@1"]})
    record_check(guard, check)
    assert guard.calibration.manifest.synthetic_check == check
    assert guard.calibration.manifest.model_dump(mode="json")["synthetic_check"]["prompt_ids"] == [
        "p@1"
    ]


def test_synth_output_is_recognised_by_its_provenance(tmp_path: Path):
    line = {
        "query": "Do bees sleep?",
        "chunk_id": "c1",
        "doc_id": "d1",
        "prompt_id": "synth-query-users",
        "prompt_version": 1,
        "context": "id-prefix:id",
        "model": "local:qwen",
        "created_at": "2026-01-01T00:00:00Z",
    }
    synthetic = tmp_path / "synthetic.jsonl"
    synthetic.write_text(json.dumps(line) + "\n" + json.dumps(line | {"query": "Why?"}) + "\n")
    assert synthetic_provenance(synthetic) == {
        "prompt_ids": ["synth-query-users@1"],
        "contexts": ["id-prefix:id"],
    }
    real = tmp_path / "real.jsonl"
    real.write_text(json.dumps({"query": "Do bees sleep?", "user": "u1"}) + "\n")
    assert synthetic_provenance(real) is None
    plain = tmp_path / "real.txt"
    plain.write_text("Do bees sleep?\n")
    assert synthetic_provenance(plain) is None


def synth_file(path: Path, queries: list[str]) -> Path:
    """``queries`` as ``ragbound synth`` writes them, with its provenance fields."""
    fields = {"chunk_id": "c1", "doc_id": "d1", "prompt_id": "synth-query", "prompt_version": 1}
    fields |= {"context": "document", "model": "local:qwen", "created_at": "2026-01-01T00:00Z"}
    path.write_text("".join(json.dumps({"query": q} | fields) + "\n" for q in queries))
    return path


def test_a_calibration_is_checked_against_real_questions_and_says_what_it_found(
    corpus_dir: Path, tmp_path: Path
):
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    guard = Guard.calibrate(kb, CALIBRATION, k=3)
    made_of = synth_file(tmp_path / "synthetic.jsonl", CALIBRATION)
    far = OUT_OF_KNOWLEDGE + MORE_OUT_OF_KNOWLEDGE
    check, line = check_against_real(guard, made_of, far, real_source="real.txt")
    assert check is not None and check.differ and check.synthetic
    assert check.prompt_ids == ["synth-query@1"] and check.n_real == len(far)
    assert guard.calibration.manifest.synthetic_check == check
    assert line == f"warning: {check_warning(check)}"
    alike = MORE_IN_KNOWLEDGE[::2]
    check, line = check_against_real(guard, made_of, alike)
    assert check is not None and not check.differ
    assert line is not None and line.startswith("real-question check: no difference at level 0.05")
    assert line.endswith(weak_silence(len(alike))) and f"with {len(alike)} real questions" in line


def test_without_real_questions_only_synthetic_ones_get_a_reminder(guard: Guard, tmp_path: Path):
    synthetic = synth_file(tmp_path / "synthetic.jsonl", CALIBRATION)
    assert check_against_real(guard, synthetic, None) == (None, SYNTHETIC_UNCHECKED)
    real = tmp_path / "real.txt"
    real.write_text("\n".join(CALIBRATION) + "\n")
    assert check_against_real(guard, real, None) == (None, None)


def test_a_silence_on_few_real_questions_is_called_weak():
    assert weak_silence(CONFIDENT_REAL) == ""
    assert "give 50 or more" in weak_silence(CONFIDENT_REAL - 1)
