"""The online test alone: an OnlineTest over a calibration fitted without a Guard gives the
BoundaryDetector's p-values of the searched rows (or of the rows a given search returns),
refits at another alpha, and refuses the combined statistic's parts on a calibration without
it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragbound.detect.boundary import BoundaryDetector
from ragbound.detect.config import DetectorConfig
from ragbound.detect.fitting import fit_rows
from ragbound.detect.online import OnlineTest
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

pytestmark = pytest.mark.filterwarnings("ignore:.*calibration questions are few")


@pytest.fixture(scope="module")
def test(minilm_kb_dir: Path) -> OnlineTest:
    kb = KnowledgeBase.load(minilm_kb_dir)
    fitted = fit_rows(kb, IN_KNOWLEDGE, DetectorConfig(k=4, alpha=0.1))
    return OnlineTest(kb, fitted.calibration)


def test_p_values_are_the_detectors_on_the_searched_rows(test: OnlineTest) -> None:
    scored = test.score(OUT_OF_KNOWLEDGE)
    rows = test.kb.search(OUT_OF_KNOWLEDGE, 4).similarities
    detector = BoundaryDetector(statistic="mss", k=4, alpha=0.1).fit(test.calibration.similarities)
    np.testing.assert_allclose(scored.p_values, detector.p_value(rows))
    assert scored.n_calibration == len(IN_KNOWLEDGE) and scored.k == 4
    verdicts = test.check_many(OUT_OF_KNOWLEDGE, evidence=2)
    assert [v.p_value for v in verdicts] == pytest.approx(list(scored.p_values))
    assert all(len(v.neighbours) == 2 for v in verdicts)


def test_a_given_search_gives_the_rows_scored_else_the_tests_own(test: OnlineTest) -> None:
    rows = test.search_rows(IN_KNOWLEDGE[:2])  # another batch's: these rows are what is scored
    found = test.score_with_search(
        OUT_OF_KNOWLEDGE[:2], lambda queries: rows, statistic="knn", alpha=0.2
    )
    detector = BoundaryDetector(statistic="knn", k=4, alpha=0.2).fit(test.calibration.similarities)
    np.testing.assert_allclose(found.p_values, detector.p_value(rows))
    assert (found.statistic, found.alpha) == ("knn", 0.2)
    searched = test.score(OUT_OF_KNOWLEDGE[:2], statistic="knn", alpha=0.2)
    assert (searched.p_values < found.p_values).all()  # the queries' own rows: farther
    own = test.score_with_search(OUT_OF_KNOWLEDGE)
    np.testing.assert_allclose(own.p_values, test.score(OUT_OF_KNOWLEDGE).p_values)


def test_another_alpha_refits_the_detectors(test: OnlineTest) -> None:
    manifest = test.calibration.manifest
    assert test.detector().alpha == 0.1
    try:
        assert test.use_alpha(0.3) is test and test.detector().alpha == 0.3
        assert test.score(OUT_OF_KNOWLEDGE[:1]).alpha == 0.3
        assert test.use_alpha(None).config.alpha == 0.3
    finally:
        test.calibration.manifest = manifest
        test.use_alpha(0.1)


def test_the_combined_parts_are_refused_without_a_combined_model(test: OnlineTest) -> None:
    assert not test.is_learned() and test.search_depth() == 4 and test.reranker is None
    with pytest.raises(InputError, match="no combined statistic"):
        test.combined_model()
    with pytest.raises(InputError, match="has no similarity detector"):
        test.detector("combined")
