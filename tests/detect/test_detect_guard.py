import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ragbound.detect import DetectorConfig, Guard
from ragbound.detect.calibration import Calibration
from ragbound.detect.evaluate import evaluate, split_queries
from ragbound.errors import ArtifactError, IncompatibleArtifactError, InputError
from ragbound.knowledge import KnowledgeBase
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE


@pytest.fixture(scope="module")
def guard(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Guard:
    target = tmp_path_factory.mktemp("guarded") / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(target)
    kb = KnowledgeBase.load(target)
    guard = Guard.calibrate(kb, IN_KNOWLEDGE, k=4, alpha=0.1, queries_source="tests")
    guard.save()
    return guard


def test_out_of_knowledge_queries_get_lower_p_values(guard: Guard):
    inside = guard.check_many(["How do bees find flowers and make honey?"])
    outside = guard.check_many(OUT_OF_KNOWLEDGE)
    assert all(v.p_value < inside[0].p_value for v in outside)
    assert all(v.out_of_knowledge for v in outside)
    verdict = outside[0]
    assert verdict.statistic == "mss" and verdict.k == 4 and verdict.n_calibration == 12
    assert verdict.p_value == pytest.approx(1 / 13)  # beyond every calibration score
    assert len(verdict.neighbours) == 3 and verdict.neighbours[0].rank == 1


def test_too_few_calibration_queries_can_never_flag_and_say_so(guard: Guard):
    # 12 queries: the smallest conformal p-value is 1/13 > 0.05, so nothing is out of knowledge
    verdict = guard.check("What is the capital of Australia?", alpha=0.05)
    assert verdict.p_value == pytest.approx(1 / 13) and not verdict.out_of_knowledge
    assert json.loads(verdict.model_dump_json())["critical_value"] is None
    with pytest.warns(UserWarning, match="at least 19"):
        Guard.calibrate(guard.kb, IN_KNOWLEDGE, k=4, alpha=0.05)


def test_verdict_json_has_the_documented_fields(guard: Guard):
    data = json.loads(guard.check("What is the capital of Australia?").model_dump_json())
    assert {"query", "statistic", "score", "p_value", "out_of_knowledge"} <= data.keys()
    assert "reject" not in data  # reject is an action of the gate, not the test's outcome
    assert data["neighbours"][0]["similarity"] >= data["neighbours"][1]["similarity"]


def test_every_statistic_can_be_chosen_at_check_time(guard: Guard):
    for name in ("mss", "knn", "avgknn", "entropy", "energy", "fisher", "simes"):
        verdict = guard.check("Who wrote The Magic Flute?", statistic=name)
        assert verdict.statistic == name and 0 < verdict.p_value <= 1


def test_saved_calibration_reloads_with_identical_p_values(guard: Guard):
    again = Guard.load(guard.kb.path)
    queries = ["Why do beekeepers use smoke?", "Who wrote The Magic Flute?"]
    first = [v.p_value for v in guard.check_many(queries)]
    assert [v.p_value for v in again.check_many(queries)] == pytest.approx(first)


def test_calibration_refuses_another_knowledge_base(guard: Guard, tmp_path: Path, corpus_dir: Path):
    other = KnowledgeBase.build([corpus_dir / "bees"], embedder="minilm")
    other.save(tmp_path / "other")
    with pytest.raises(IncompatibleArtifactError, match="changed while it was being calibrated"):
        guard.calibration.save(tmp_path / "other")  # refused at save: nothing written
    assert not (tmp_path / "other" / "calibration" / "manifest.json").exists()
    # a calibration left from before the knowledge base changed is refused at load
    shutil.copytree(guard.kb.path / "calibration", tmp_path / "other" / "calibration")
    with pytest.raises(IncompatibleArtifactError, match="calibrate again"):
        Guard.load(tmp_path / "other")
    forced = Guard.load(tmp_path / "other", force=True)
    assert forced.check("bees").p_value > 0


def test_missing_and_corrupt_calibration(tmp_path: Path, minilm_kb_dir: Path, guard: Guard):
    with pytest.raises(ArtifactError, match="no calibration yet"):
        Calibration.load(tmp_path)
    copy = tmp_path / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(copy)
    guard.calibration.save(copy)
    manifest = copy / "calibration" / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"k": 4', '"k": 5'))
    with pytest.raises(ArtifactError, match="the manifest says"):
        Calibration.load(copy)


def test_calibration_input_errors(guard: Guard):
    with pytest.raises(InputError, match="at least 2"):
        Guard.calibrate(guard.kb, ["one query"], k=4)
    with pytest.raises(InputError, match="k=50 is larger"):
        Guard.calibrate(guard.kb, IN_KNOWLEDGE, k=50)
    with pytest.raises(InputError, match="query 3 is empty"):
        guard.check_many(["bees", "trains", " "])


def test_evaluate_reports_every_statistic_and_refuses_leakage(guard: Guard):
    held_out = ["What do bees make?", "What is a locomotive?", "How do bees dance?"]
    report = evaluate(guard, held_out, OUT_OF_KNOWLEDGE, samples=3, runs=4, seed=0)
    assert set(report.statistics) == {
        "mss",
        "knn",
        "avgknn",
        "entropy",
        "energy",
        "fisher",
        "simes",
    }
    assert report.statistics["mss"].auroc == pytest.approx(1.0)
    assert 0 <= report.statistics["mss"].der <= 1
    with pytest.raises(InputError, match="also calibration queries"):
        evaluate(guard, IN_KNOWLEDGE[:3], OUT_OF_KNOWLEDGE)


def test_split_queries_is_seeded_and_disjoint():
    queries = [f"q{i}" for i in range(11)]
    a, b = split_queries(queries, 0.5, seed=3)
    assert (a, b) == split_queries(queries, 0.5, seed=3)
    assert not set(a) & set(b) and len(a) + len(b) == 11
    assert np.array_equal(sorted(a + b), sorted(queries))


def test_manifest_stores_the_config_and_the_search(
    guard: Guard, tmp_path: Path, minilm_kb_dir: Path
):
    copy = tmp_path / "kb"
    KnowledgeBase.load(minilm_kb_dir).save(copy)
    guard.calibration.save(copy)
    manifest = copy / "calibration" / "manifest.json"
    data = json.loads(manifest.read_text())
    assert data["detector"] == guard.config.model_dump(mode="json")
    assert guard.config == DetectorConfig(k=4, alpha=0.1)
    assert data["search"] == {
        "backend": "exact",
        "exact": True,
        "similarity": guard.kb.describe().similarity,
        "parameters": {"precision": "float32"},
    }
    assert Calibration.load(copy).manifest == guard.calibration.manifest


def test_calibrate_takes_a_config_and_field_overrides(guard: Guard):
    config = DetectorConfig(statistic="energy", k=3, tau=0.05)
    again = Guard.calibrate(guard.kb, IN_KNOWLEDGE, config, alpha=0.1)
    assert again.config == config.updated(alpha=0.1)
    assert again.detector().get_params() == again.config.model_dump(exclude={"reranker"})
    auto = Guard.calibrate(guard.kb, IN_KNOWLEDGE, k=3, alpha=0.1, tau="auto")
    assert auto.config.tau == 0.05  # all-MiniLM-L6-v2 was trained at temperature 1/20
    with pytest.raises(InputError, match="tau: Input should be greater than 0"):
        Guard.calibrate(guard.kb, IN_KNOWLEDGE, tau=-1.0)
    # null queries and a seed are for the statistics that learn (combined, auto)
    with pytest.raises(InputError, match="null_queries and seed are for statistic combined"):
        Guard.calibrate(guard.kb, IN_KNOWLEDGE, null_queries=OUT_OF_KNOWLEDGE)
    with pytest.raises(InputError, match="energy learns nothing"):
        Guard.calibrate(guard.kb, IN_KNOWLEDGE, config, seed=1)
    with pytest.raises(InputError, match="alpha: Input should be less than 1"):
        guard.check("bees", alpha=2.0)
