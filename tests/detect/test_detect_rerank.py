import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ragbound.detect import BoundaryDetector, DetectorConfig, Guard, detector_config
from ragbound.detect.calibration import Calibration
from ragbound.detect.rerank import CrossEncoderReranker, check_reranker_folder, relevance_rows
from ragbound.embedders.packaged import minilm_path
from ragbound.errors import IncompatibleArtifactError, InputError
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from tests.texts import (
    IN_KNOWLEDGE,
    MORE_IN_KNOWLEDGE,
    MORE_OUT_OF_KNOWLEDGE,
    OUT_OF_KNOWLEDGE,
    TOPICS,
)


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real cross-encoder folder: MiniLM with a one-logit head, as CrossEncoder saves it.

    Its head is untrained, so its scores mean nothing; the tests that use it check plumbing
    (rows, manifest, reloading), not power.
    """
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("reranker") / "untrained-cross-encoder"
    CrossEncoder(str(minilm_path()), num_labels=1, max_length=64, device="cpu").save(str(folder))
    return folder


@pytest.fixture(scope="module")
def reranked(
    minilm_kb_dir: Path, cross_encoder: Path, tmp_path_factory: pytest.TempPathFactory
) -> Guard:
    target = tmp_path_factory.mktemp("reranked") / "kb"
    shutil.copytree(minilm_kb_dir, target)
    guard = Guard.calibrate(
        KnowledgeBase.load(target), IN_KNOWLEDGE, k=3, alpha=0.1, reranker=cross_encoder
    )
    guard.save()
    return guard


# ------------------------------------------------------------------ the model folder
def test_a_folder_that_is_not_a_one_logit_cross_encoder_is_refused(tmp_path: Path):
    with pytest.raises(InputError, match="no such folder"):
        check_reranker_folder(tmp_path / "missing")
    with pytest.raises(InputError, match=r"has no config\.json"):
        check_reranker_folder(tmp_path)
    # the MiniLM embedder is a model folder, but a bi-encoder (BertModel)
    with pytest.raises(InputError, match=r"not a cross-encoder.*BertModel"):
        check_reranker_folder(minilm_path())
    config = tmp_path / "config.json"
    config.write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match="not valid JSON"):
        check_reranker_folder(tmp_path)
    three = {"0": "a", "1": "b", "2": "c"}
    classifier = {"architectures": ["BertForSequenceClassification"], "id2label": three}
    config.write_text(json.dumps(classifier), encoding="utf-8")
    with pytest.raises(InputError, match="has 3 outputs"):
        check_reranker_folder(tmp_path)
    config.write_text(json.dumps({"architectures": ["BertForSequenceClassification"]}))
    with pytest.raises(InputError, match="holds no weights"):
        check_reranker_folder(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert check_reranker_folder(tmp_path) == tmp_path.resolve()


def test_an_empty_reranker_name_is_refused_by_the_config():
    with pytest.raises(InputError, match="reranker: reranker must be a model folder"):
        detector_config(reranker="  ")


def test_relevance_rows_are_the_pair_logits_sorted_descending(cross_encoder: Path):
    reranker = CrossEncoderReranker(cross_encoder)
    queries = ["What do bees make?", "How do trains run?"]
    passages = [TOPICS["bees"][:3], TOPICS["trains"][:3]]
    logits = reranker.relevance(queries, passages)
    assert logits.shape == (2, 3) and np.isfinite(logits).all()
    # each pair is scored on its own: the same pair alone gives the same logit
    alone = reranker.relevance([queries[1]], [[passages[1][2]]])
    assert alone[0, 0] == pytest.approx(logits[1, 2], abs=1e-4)
    rows = relevance_rows(reranker, queries, passages)
    np.testing.assert_allclose(rows, -np.sort(-logits, axis=1))
    with pytest.raises(InputError, match="equally many passages"):
        reranker.relevance(queries, [passages[0], passages[1][:2]])


# ------------------------------------------------------------------ calibration and checks
def test_reranked_calibration_keeps_the_logits_and_records_the_model(
    reranked: Guard, cross_encoder: Path
):
    manifest = Calibration.load(reranked.kb.path).manifest
    reranker = CrossEncoderReranker(cross_encoder)
    assert manifest.detector.reranker == str(cross_encoder.resolve())
    assert manifest.reranker_revision == reranker.revision
    hits = reranked.kb.search(IN_KNOWLEDGE, 3)
    passages = [[reranked.kb.chunk_at(int(j)).text for j in row] for row in hits.indices]
    expected = relevance_rows(reranker, IN_KNOWLEDGE, passages)
    np.testing.assert_allclose(reranked.calibration.similarities, expected, atol=1e-4)
    # the rows are logits, not the cosine similarities of the same chunks
    assert not np.allclose(reranked.calibration.similarities, hits.similarities)


def test_reloaded_reranked_guard_and_gate_give_the_same_p_values(reranked: Guard):
    queries = ["Why do beekeepers use smoke?", OUT_OF_KNOWLEDGE[0]]
    before = reranked.check_many(queries)
    again = Guard.load(reranked.kb.path)
    after = again.check_many(queries)
    assert [v.p_value for v in after] == [v.p_value for v in before]
    assert [v.score for v in after] == pytest.approx([v.score for v in before], abs=1e-5)
    decisions = Gate(again).decide_many(queries)
    assert [d.test.score for d in decisions] == pytest.approx([v.score for v in before], abs=1e-5)
    # the evidence still shows the chunks' cosine similarities
    assert 0 < after[0].neighbours[0].similarity <= 1


def test_a_changed_or_missing_reranker_is_refused_at_check(reranked: Guard, tmp_path: Path):
    model = tmp_path / "model"
    shutil.copytree(Path(reranked.config.reranker), model)
    copy = tmp_path / "kb"
    shutil.copytree(reranked.kb.path, copy)
    manifest_path = copy / "calibration" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["detector"]["reranker"] = str(model)
    manifest_path.write_text(json.dumps(manifest))
    assert Guard.load(copy).check("What do bees make?").p_value > 0  # same files: accepted
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "note": "retrained"}))
    with pytest.raises(IncompatibleArtifactError, match="changed since this calibration"):
        Guard.load(copy).check("What do bees make?")
    shutil.rmtree(model)
    with pytest.raises(InputError, match="no such folder"):
        Guard.load(copy).check("What do bees make?")


def test_the_array_detector_takes_a_config_with_a_reranker(cross_encoder: Path):
    config = DetectorConfig(k=2, reranker=str(cross_encoder))
    detector = BoundaryDetector.from_config(config)
    assert "reranker" not in detector.get_params() and detector.k == 2


# ------------------------------------------------------------------ a trained model
def _topic_pairs() -> list[tuple[str, str, float]]:
    """Training pairs from the tests' own texts: a question with its topic's sentences (1),
    with the other topic's (0), and unrelated questions with any sentence (0)."""
    # the first seven ask about bees, the others about trains
    topic_of = {q: "bees" if i < 7 else "trains" for i, q in enumerate(MORE_IN_KNOWLEDGE)}
    pairs = []
    for question, topic in topic_of.items():
        for name, sentences in TOPICS.items():
            pairs.extend((question, s, float(name == topic)) for s in sentences)
    for question in MORE_OUT_OF_KNOWLEDGE:
        pairs.extend((question, s, 0.0) for s in TOPICS["bees"][:2] + TOPICS["trains"][:2])
    return pairs


@pytest.mark.slow
def test_a_trained_cross_encoder_scores_relevant_pairs_as_less_out_of_knowledge(
    minilm_kb_dir: Path, tmp_path: Path
):
    import random

    from tests.support.cross_encoder import fine_tune

    pairs = _topic_pairs()
    random.Random(0).shuffle(pairs)
    folder = fine_tune(pairs, tmp_path / "trained", max_length=64, epochs=4)
    reranker = CrossEncoderReranker(folder)
    relevant = ("How do bees tell each other where food is?", TOPICS["bees"][2])
    irrelevant = ("What is the capital of Australia?", TOPICS["bees"][2])
    logits = reranker.relevance([relevant[0], irrelevant[0]], [[relevant[1]], [irrelevant[1]]])
    # the statistic is minus the best logit: lower for the relevant pair
    assert -logits[0, 0] < -logits[1, 0]
    shutil.copytree(minilm_kb_dir, tmp_path / "kb")
    guard = Guard.calibrate(
        KnowledgeBase.load(tmp_path / "kb"), IN_KNOWLEDGE, k=3, alpha=0.1, reranker=folder
    )
    inside = guard.check_many(IN_KNOWLEDGE[:4])
    outside = guard.check_many(OUT_OF_KNOWLEDGE)
    assert max(v.score for v in inside) < min(v.score for v in outside)
    assert np.mean([v.p_value for v in outside]) < np.mean([v.p_value for v in inside])


def test_cli_calibrate_with_a_reranker_records_it_and_check_uses_it(
    monkeypatch, capsys, minilm_kb_dir: Path, cross_encoder: Path, tmp_path: Path
):
    from tests.cli.runner import run

    shutil.copytree(minilm_kb_dir, tmp_path / "kb")
    queries = tmp_path / "queries.txt"
    queries.write_text("\n".join(IN_KNOWLEDGE) + "\n", encoding="utf-8")
    args = ["calibrate", str(tmp_path / "kb"), "--queries", str(queries), "--k", "3"]
    code, out, err = run(monkeypatch, capsys, *args, "--reranker", str(cross_encoder), "--json")
    assert code == 0, err
    assert json.loads(out)["reranker"] == str(cross_encoder.resolve())
    code, out, err = run(monkeypatch, capsys, "decide", str(tmp_path / "kb"), "bees", "--json")
    assert code == 0, err
    verdict = json.loads(out)["test"]
    expected = Guard.load(tmp_path / "kb").check("bees")
    assert verdict["score"] == pytest.approx(expected.score, abs=1e-5)
