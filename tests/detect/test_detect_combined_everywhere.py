"""A combined calibration works wherever a calibration is used: the gate (and so the
service), the shift test and monitor, log scoring and the real-question check; the Ray engine
is refused with a clear message."""

from pathlib import Path

import numpy as np
import pytest

from ragbound.corpus.units import unit_params
from ragbound.demo import sample_corpus
from ragbound.detect import Guard
from ragbound.detect.config import DEFAULTS
from ragbound.detect.logscore import score_file
from ragbound.detect.monitor import ShiftMonitor, WindowSpec
from ragbound.detect.select import calibrate_learned
from ragbound.detect.shift import shift_test
from ragbound.engines import make_search
from ragbound.errors import InputError
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.synth.check import compare_with_real


def _lines(name: str) -> list[str]:
    return (sample_corpus() / name).read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def guard(tmp_path_factory: pytest.TempPathFactory) -> Guard:
    out = tmp_path_factory.mktemp("everywhere") / "kb"
    units = unit_params("chunk,sentence", 3)
    KnowledgeBase.build([sample_corpus() / "docs"], embedder="minilm", units=units).save(out)
    kb = KnowledgeBase.load(out)
    calibrate_learned(kb, _lines("in_knowledge.txt"), DEFAULTS, statistic="combined").save()
    return Guard.load(out)


def test_the_gate_decides_with_the_combined_p_values(guard: Guard):
    queries = _lines("out_of_knowledge.txt")[:5] + _lines("in_knowledge.txt")[:5]
    decisions = Gate(guard).decide_many(queries)
    verdicts = guard.check_many(queries)
    assert [d.p_value for d in decisions] == [v.p_value for v in verdicts]
    assert {d.statistic for d in decisions} == {"combined"}
    assert [d.out_of_knowledge for d in decisions] == [v.reject for v in verdicts]
    assert all(d.neighbours for d in decisions)


def test_shift_and_the_monitor_compare_combined_scores_with_the_conformal_half(guard: Guard):
    outside = _lines("out_of_knowledge.txt")
    report = shift_test(guard, outside)
    assert report.score_statistic == "combined" and report.reject
    assert report.n_reference == guard.null_scores().size
    monitor = ShiftMonitor(guard, WindowSpec(size=10))
    np.testing.assert_allclose(monitor._score(outside[:10]), guard.score(outside[:10]).scores)


def test_score_file_gives_the_check_p_values(guard: Guard, tmp_path: Path):
    queries = _lines("out_of_knowledge.txt")[:6]
    log = tmp_path / "log.txt"
    log.write_text("\n".join(queries) + "\n", encoding="utf-8")
    table = score_file(guard, log, make_search(guard))
    assert table.statistic == "combined"
    np.testing.assert_allclose(table.p_value, [v.p_value for v in guard.check_many(queries)])


def test_the_real_question_check_uses_the_combined_scores(guard: Guard):
    check = compare_with_real(guard, _lines("in_knowledge.txt")[:20])
    assert check.score_statistic == "combined"
    assert check.critical_value == guard.critical_value()
    assert check.n_calibration == guard.null_scores().size


def test_the_ray_engine_is_refused_for_combined(guard: Guard):
    with pytest.raises(InputError, match="use --engine local, or --statistic mss"):
        make_search(guard, "ray")
    with pytest.raises(InputError, match="use --engine local"):
        make_search(guard, "ray", statistic="combined")
