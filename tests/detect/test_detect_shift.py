"""Offline shift test: its KS reference is the detector's null, and bad options are refused."""

from pathlib import Path

import numpy as np
import pytest

from ragbound.detect import DetectorConfig, Guard
from ragbound.detect.calibration import Calibration
from ragbound.detect.shift import MIN_REFERENCE, reference_scores, shift_test
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase


@pytest.fixture(scope="module")
def guard(minilm_kb_dir: Path) -> Guard:
    """A guard whose calibration similarities are synthetic (no retrieval needed)."""
    kb = KnowledgeBase.load(minilm_kb_dir)
    rng = np.random.default_rng(0)
    n = MIN_REFERENCE + 10
    sims = -np.sort(-rng.uniform(0.2, 0.8, size=(n, 4)), axis=1)
    calibration = Calibration.create(
        [f"question {i}" for i in range(n)],
        sims,
        kb_fingerprint=kb.fingerprint,
        config=DetectorConfig(k=4),
        search=kb.describe(),
    )
    return Guard(kb, calibration)


@pytest.mark.parametrize("statistic", ["mss", "fisher", "simes"])
def test_ks_reference_is_the_detectors_own_null(guard: Guard, statistic: str):
    detector = guard.detector(statistic)
    reference = reference_scores(guard, statistic)
    np.testing.assert_array_equal(reference, detector.decision_scores_)
    np.testing.assert_array_equal(np.sort(reference), detector.null_.scores)


def test_meta_reference_differs_from_rescoring_the_calibration(guard: Guard):
    # scoring a calibration row against a null that holds it makes it look more in-knowledge
    detector = guard.detector("fisher")
    rescored = detector.score(guard.calibration.similarities)
    assert (rescored <= reference_scores(guard, "fisher") + 1e-12).all()
    assert not np.allclose(rescored, reference_scores(guard, "fisher"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"alpha": 2.0}, "alpha: Input should be less than 1"),
        ({"alpha": 0.0, "test": "mmd"}, "alpha: Input should be greater than 0"),
        ({"alpha": 2.0, "test": "mmd"}, "alpha: Input should be less than 1"),
        ({"alpha": float("nan"), "test": "mmd"}, "alpha: Input should be a finite number"),
        ({"test": "t"}, "unknown shift test 't'"),
        ({"n_permutations": 0, "test": "mmd"}, "n_permutations: Input should be greater"),
        ({"seed": -1, "test": "mmd"}, "seed: Input should be greater than or equal to 0"),
        ({"statistic": "maha"}, "statistic: unknown statistic 'maha'"),
    ],
)
def test_bad_options_are_input_errors(guard: Guard, options: dict, message: str):
    with pytest.raises(InputError, match=message):
        shift_test(guard, ["what do bees make?"] * 3, **options)


def test_empty_or_string_batches_are_refused(guard: Guard):
    with pytest.raises(InputError, match="empty"):
        shift_test(guard, [])
    with pytest.raises(InputError, match="not one string"):
        shift_test(guard, "what do bees make?")  # type: ignore[arg-type]
