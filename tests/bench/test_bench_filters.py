"""Diversity filters: TF-IDF uniqueness cut-off, greedy semantic selection, both in a row."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragbound.artifacts import read_manifest, write_json
from ragbound.bench.filters import filter_pairs, keyword_filter, pair_text, tfidf_similarity
from ragbound.bench.models import FILTERED_FORMAT, FilteredSet, Provenance, QAPair, QASet
from ragbound.bench.qa import import_qa
from ragbound.corpus.function_words import english_function_words
from ragbound.embedders import EmbedderInfo, load_dense_embedder
from ragbound.errors import InputError
from ragbound.stats import range_cutoff, uniqueness_scores
from tests.bench.test_bench_qa import POLICYBENCH
from tests.cli.runner import run

PROVENANCE = Provenance(created_at="2025-01-01T00:00:00+00:00")


def pair(pair_id: str, question: str, answer: str) -> QAPair:
    return QAPair(
        id=pair_id, question=question, answer=answer, origin="imported", provenance=PROVENANCE
    )


ROAD_PAIRS = [
    pair("speed", "What is the speed limit on expressways?", "90 km/h on expressways."),
    pair("speed2", "What is the speed limit on the expressways?", "90 km/h on expressways."),
    pair("helmet", "Must motorcyclists wear a helmet?", "Yes, an approved helmet."),
    pair("plate", "What must learner drivers display?", "An L-plate at front and back."),
    pair("light", "What does a red traffic light require?", "Drivers must stop."),
]


class HandEmbedder:
    """Test double: each pair's vector is given by hand, looked up by its text."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors

    @property
    def info(self) -> EmbedderInfo:
        return EmbedderInfo(
            name="hand", revision="1", dimension=2, similarity="cosine", kind="dense"
        )

    def encode(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> np.ndarray:
        return np.asarray([self.vectors[text] for text in texts], dtype=np.float32)


def angle(degrees: float) -> list[float]:
    """A unit vector; two of them have cosine cos(difference of angles)."""
    return [float(np.cos(np.radians(degrees))), float(np.sin(np.radians(degrees)))]


@pytest.fixture(scope="module")
def minilm():
    return load_dense_embedder("minilm")


def test_keyword_filter_drops_low_uniqueness_with_its_cutoff() -> None:
    kept, drops = keyword_filter(ROAD_PAIRS, 0.3)
    # the two speed-limit pairs are near copies: uniqueness ~0, the others share few words
    assert [d.id for d in drops] == ["speed", "speed2"]
    assert [p.id for p in kept] == ["helmet", "plate", "light"]
    scores = uniqueness_scores(tfidf_similarity([pair_text(p) for p in ROAD_PAIRS]))
    cutoff = range_cutoff(scores, 0.3)
    assert drops[0].cutoff == pytest.approx(cutoff)
    assert drops[0].score == pytest.approx(scores[0])
    assert drops[0].score < cutoff <= min(scores[2:])
    assert drops[0].filter == "keyword" and drops[0].near_id is None
    assert "TF-IDF uniqueness" in drops[0].reason
    # threshold 0 keeps everything (cut-off = min); 1 keeps only the most unique
    assert keyword_filter(ROAD_PAIRS, 0.0)[1] == []
    assert len(keyword_filter(ROAD_PAIRS, 1.0)[0]) == 1


def test_tfidf_similarity_by_hand() -> None:
    sims = tfidf_similarity(["apple banana", "apple banana", "cherry"])
    assert sims == pytest.approx(np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1]]))
    # only function words: empty vocabulary, nothing is similar to anything
    assert tfidf_similarity(["the of", "and the"]).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    # idf: "apple" in 2 of 3 texts weighs ln(4/3) + 1, "kiwi" in 1 ln(2) + 1; counts multiply
    weights = np.array([2 * (math.log(4 / 3) + 1), math.log(2) + 1])
    cosine = weights[0] / np.linalg.norm(weights)
    sims = tfidf_similarity(["Apple apple kiwi", "apple", "the"])
    assert sims == pytest.approx(np.array([[1, cosine, 0], [cosine, 1, 0], [0, 0, 0]]))


TFIDF_WORDS = [
    "the",
    "apple",
    "Apple",
    "banana",
    "of",
    "and",
    "speed",
    "limit",
    "km",
    "h",
    "90",
    "don't",
    "we've",
    "L-plate",
    "naive",
    "2020",
]


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(
        st.lists(st.sampled_from(TFIDF_WORDS), max_size=10).map(" ".join), min_size=1, max_size=25
    )
)
def test_tfidf_similarity_is_scikit_learns_with_the_same_word_list(texts: list[str]) -> None:
    text = pytest.importorskip("sklearn.feature_extraction.text")
    stop = sorted(english_function_words())
    try:
        matrix = text.TfidfVectorizer(stop_words=stop).fit_transform(texts)
    except ValueError:  # empty vocabulary
        expected = np.zeros((len(texts), len(texts)))
    else:
        expected = (matrix @ matrix.T).toarray()
        np.fill_diagonal(expected, np.diag(expected).round())  # 1 for a text with words
    np.testing.assert_allclose(tfidf_similarity(texts), expected, atol=1e-12)


def test_semantic_filter_by_hand() -> None:
    texts = {p.id: pair_text(p) for p in ROAD_PAIRS}
    # speed2 is 10 degrees from speed (distance 0.015); light is 40 degrees from helmet
    # (distance 0.234), plate 90 degrees from everything before it
    degrees = {"speed": 0, "speed2": 10, "helmet": 180, "plate": 90, "light": 220}
    embedder = HandEmbedder({texts[k]: angle(v) for k, v in degrees.items()})
    qa_set = QASet(name="roads", pairs=ROAD_PAIRS)
    result = filter_pairs(qa_set, "semantic", semantic_threshold=0.3, embedder=embedder)
    assert [p.id for p in result.kept] == ["speed", "helmet", "plate"]
    assert [(d.id, d.near_id) for d in result.dropped] == [("speed2", "speed"), ("light", "helmet")]
    light = result.dropped[1]
    assert light.score == pytest.approx(1 - np.cos(np.radians(40)), abs=1e-6)
    assert light.cutoff == 0.3 and light.filter == "semantic"
    assert "to kept pair helmet" in light.reason
    assert (result.embedder, result.semantic_threshold, result.keyword_threshold) == (
        "hand",
        0.3,
        None,
    )
    # at 0.2 the light pair (0.234 from helmet) is far enough
    loose = filter_pairs(qa_set, "semantic", semantic_threshold=0.2, embedder=embedder)
    assert [d.id for d in loose.dropped] == ["speed2"]


def test_both_runs_keyword_then_semantic_on_survivors() -> None:
    texts = {p.id: pair_text(p) for p in ROAD_PAIRS}
    degrees = {"speed": 0, "speed2": 10, "helmet": 180, "plate": 90, "light": 220}
    embedder = HandEmbedder({texts[k]: angle(v) for k, v in degrees.items()})
    result = filter_pairs(QASet(name="roads", pairs=ROAD_PAIRS), "both", 0.3, 0.3, embedder)
    assert [(d.id, d.filter) for d in result.dropped] == [
        ("speed", "keyword"),
        ("speed2", "keyword"),
        ("light", "semantic"),
    ]
    assert [p.id for p in result.kept] == ["helmet", "plate"]
    assert result.method == "both"
    assert result.provenance.params["keyword_threshold"] == 0.3
    assert result.input_hash == result.provenance.source_hash


def test_none_keeps_everything_and_loads_no_embedder() -> None:
    result = filter_pairs(QASet(name="roads", pairs=ROAD_PAIRS), "none", embedder="no-such-model")
    assert result.kept == ROAD_PAIRS and result.dropped == []
    assert result.embedder is None
    keyword = filter_pairs(QASet(name="one", pairs=ROAD_PAIRS[:1]), "keyword")
    assert len(keyword.kept) == 1  # a single pair has nothing to be redundant with


def test_bad_arguments() -> None:
    qa_set = QASet(name="roads", pairs=ROAD_PAIRS)
    with pytest.raises(InputError, match="unknown filter method 'fast'; valid: none, keyword"):
        filter_pairs(qa_set, "fast")
    with pytest.raises(InputError, match=r"keyword threshold must be in \[0, 1\]"):
        filter_pairs(qa_set, "keyword", keyword_threshold=1.5)
    with pytest.raises(InputError, match=r"semantic threshold must be in \[0, 2\]"):
        filter_pairs(qa_set, "semantic", semantic_threshold=-0.1)
    with pytest.raises(InputError, match="no pairs"):
        filter_pairs(QASet(name="empty", pairs=[]), "none")
    with pytest.raises(InputError, match="unknown embedder"):
        filter_pairs(qa_set, "semantic", embedder="no-such-model")


def test_semantic_with_minilm_drops_a_paraphrase(minilm) -> None:
    pairs = [
        *ROAD_PAIRS[2:],
        pair("para", "Do motorcycle riders have to wear helmets?", "Yes, an approved helmet."),
    ]
    result = filter_pairs(QASet(name="roads", pairs=pairs), "semantic", embedder=minilm)
    assert [(d.id, d.near_id) for d in result.dropped] == [("para", "helmet")]
    assert result.dropped[0].score < 0.3


def test_cli_filter(monkeypatch, capsys, tmp_path: Path) -> None:
    source, out = tmp_path / "qa.json", tmp_path / "filtered.json"
    write_json(source, QASet(name="roads", pairs=ROAD_PAIRS).model_dump(mode="json"))
    code, stdout, err = run(
        monkeypatch,
        capsys,
        "bench",
        "filter",
        str(source),
        "--out",
        str(out),
        "--method",
        "keyword",
    )
    assert code == 0, err
    assert "kept 3 of 5 pairs (2 dropped, method keyword)" in stdout
    assert "speed2" in stdout and "keyword" in stdout  # the drops table
    filtered = read_manifest(out, FilteredSet, FILTERED_FORMAT, "filtered set")
    assert [p.id for p in filtered.kept] == ["helmet", "plate", "light"]

    code, stdout, err = run(
        monkeypatch, capsys, "bench", "filter", str(source), "--out", str(out), "--method",
        "keyword", "--keyword-threshold", "0", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(stdout) == {"out": str(out), "pairs": 5, "kept": 5, "dropped": []}

    code, stdout, err = run(
        monkeypatch, capsys, "bench", "filter", str(out), "--out", str(out), "--method", "none"
    )
    assert code == 2 and "is not 'ragbound.bench.qa/1'" in err


@pytest.mark.skipif(not POLICYBENCH.is_dir(), reason=f"PolicyBench not found at {POLICYBENCH}")
def test_policybench_cpf_at_the_papers_threshold(minilm) -> None:
    cpf = import_qa(POLICYBENCH / "CPF_filtered_qa.json", id_field="identifier")
    keyword = filter_pairs(cpf, "keyword", keyword_threshold=0.4)
    assert len(keyword.kept) == 97  # TF-IDF is deterministic
    result = filter_pairs(cpf, "both", 0.4, 0.4, minilm)
    assert len(result.kept) + len(result.dropped) == 112
    assert [d.id for d in result.dropped if d.filter == "keyword"] == [
        d.id for d in keyword.dropped
    ]
    kept_ids = {p.id for p in result.kept}
    semantic = [d for d in result.dropped if d.filter == "semantic"]
    assert semantic, "CPF's FAQ rephrasings should trip the semantic filter at 0.4"
    assert all(d.near_id in kept_ids and d.score < 0.4 for d in semantic)
