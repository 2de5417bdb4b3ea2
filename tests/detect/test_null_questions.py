"""Guard.calibrate(questions=...): the null's origin in the manifest, verdicts and decisions
marked approximate when no real question is in it, and manifests from before it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragbound.detect import Guard
from ragbound.detect.calibration import APPROXIMATE, NullQuestions
from ragbound.errors import InputError
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE


@pytest.fixture(scope="module")
def kb(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    target = tmp_path_factory.mktemp("questions") / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(target)
    return KnowledgeBase.load(target)


def test_a_synthetic_null_marks_verdicts_and_decisions(kb: KnowledgeBase) -> None:
    guard = Guard.calibrate(kb, IN_KNOWLEDGE, k=4, alpha=0.1, questions="synthetic")
    null = guard.calibration.manifest.questions
    assert (null.origin, null.n_synthetic, null.declared) == ("synthetic", 12, True)
    assert guard.approximate and guard.check(OUT_OF_KNOWLEDGE[0]).approximate
    guard.save()
    reloaded = Guard.load(kb.path)
    assert reloaded.calibration.manifest.questions == null
    inside, outside = Gate(reloaded).decide_many([MORE_IN_KNOWLEDGE[0], OUT_OF_KNOWLEDGE[0]])
    for decision in (inside, outside):
        assert decision.test.approximate and decision.reason.endswith(f"({APPROXIMATE})")
    assert (inside.action, outside.action) == ("answer", "abstain")


def test_origins_by_text_count_only_the_null(kb: KnowledgeBase) -> None:
    origins = dict.fromkeys(IN_KNOWLEDGE[:4], "synthetic") | dict.fromkeys(IN_KNOWLEDGE[4:], "real")
    guard = Guard.calibrate(kb, IN_KNOWLEDGE, k=4, alpha=0.1, questions=origins)
    assert guard.calibration.manifest.questions == NullQuestions(
        origin="mixed", n_real=8, n_synthetic=4
    )
    assert not guard.approximate and not guard.check(OUT_OF_KNOWLEDGE[0]).approximate
    # combined: only the conformal half makes the null, and only it is counted
    learned = Guard.calibrate(
        kb,
        IN_KNOWLEDGE + MORE_IN_KNOWLEDGE,
        statistic="combined",
        questions=dict.fromkeys(IN_KNOWLEDGE + MORE_IN_KNOWLEDGE, "synthetic"),
    )
    null = learned.calibration.manifest.questions
    assert null.n_synthetic == len(learned.calibration.queries) < 28 and learned.approximate
    assert learned.check(OUT_OF_KNOWLEDGE[0]).approximate


def test_unknown_by_default_and_a_bad_value_refused_before_any_search(
    kb: KnowledgeBase,
) -> None:
    guard = Guard.calibrate(kb, IN_KNOWLEDGE, k=4, alpha=0.1)
    assert guard.calibration.manifest.questions == NullQuestions(origin="unknown", n_unknown=12)
    assert not guard.check(OUT_OF_KNOWLEDGE[0]).approximate
    with pytest.raises(InputError, match="questions must be one of"):
        Guard.calibrate(kb, IN_KNOWLEDGE, k=4, alpha=0.1, questions="users")  # type: ignore[arg-type]
