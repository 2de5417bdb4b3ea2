"""Fitting a calibration alone (no Guard): the default k cut to the knowledge's size with a
warning, a k the caller gave kept, and the arguments each statistic refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragbound.detect.config import DetectorConfig
from ragbound.detect.fitting import fit_calibration
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from tests.texts import IN_KNOWLEDGE

pytestmark = pytest.mark.filterwarnings("ignore:.*calibration questions are few")


@pytest.fixture(scope="module")
def kb(minilm_kb_dir: Path) -> KnowledgeBase:
    return KnowledgeBase.load(minilm_kb_dir)


def test_the_default_k_is_cut_to_the_knowledge_and_a_given_k_kept(kb: KnowledgeBase) -> None:
    size = len(kb)
    assert size < DetectorConfig().k  # the tiny corpus has fewer chunks than the default k
    with pytest.warns(UserWarning, match=f"calibrated with k={size}"):
        cut = fit_calibration(kb, IN_KNOWLEDGE, None, {}).calibration
    assert cut.manifest.detector.k == size
    assert cut.similarities.shape == (len(IN_KNOWLEDGE), size)
    given = fit_calibration(kb, IN_KNOWLEDGE, None, {"k": 4, "statistic": "knn"}).calibration
    assert given.manifest.detector.k == 4 and given.manifest.detector.statistic == "knn"
    assert given.manifest.granularity == kb.granularity and given.reference is None


@pytest.mark.parametrize(
    ("params", "keywords", "message"),
    [
        ({"statistic": "combined", "k": 4}, {}, "takes no k"),
        ({"statistic": "auto"}, {"granularity": "chunk"}, "takes no granularity"),
        ({"statistic": "combined"}, {"null_queries": "one question"}, "not one string"),
        ({"k": 4}, {"seed": 1}, "learns nothing"),
        ({"k": 4, "statistic": "no-such"}, {}, "no-such"),
    ],
)
def test_what_each_statistic_refuses(
    kb: KnowledgeBase, params: dict, keywords: dict, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        fit_calibration(kb, IN_KNOWLEDGE, None, params, **keywords)


def test_one_query_is_too_few(kb: KnowledgeBase) -> None:
    with pytest.raises(InputError, match="at least 2 in-knowledge queries, got 1"):
        fit_calibration(kb, IN_KNOWLEDGE[:1], None, {"k": 4})
