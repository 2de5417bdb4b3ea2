"""The local HNSW store (faiss): quality against exact search, exact re-scoring, the graph saved
with the knowledge base."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.layout import GRAPH_DIR
from ragbound.stores import ExactStore, Retriever
from ragbound.stores.hnsw import HnswParams, HnswStore, hnsw_params, rescore
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE, TOPICS

pytest.importorskip("faiss", reason="faiss-cpu is not installed (the hnsw extra)")


def _clustered(n: int, dim: int, seed: int) -> np.ndarray:
    """Unit vectors around 20 centres: neighbours are close but not trivially separated."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, dim))
    vectors = centres[rng.integers(0, 20, n)] + 0.9 * rng.normal(size=(n, dim))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def corpus() -> tuple[np.ndarray, np.ndarray]:
    return _clustered(2000, 32, seed=1), _clustered(200, 32, seed=2)


def _recall(found: np.ndarray, exact: np.ndarray) -> float:
    k = exact.shape[1]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(found, exact, strict=True)]))


def test_recall_at_the_default_ef_and_never_above_exact(corpus):
    vectors, queries = corpus
    exact = ExactStore(vectors, similarity="cosine").search(queries, 10)
    store = HnswStore(vectors, similarity="cosine")
    assert isinstance(store, Retriever) and len(store) == 2000 and store.dimension == 32
    hits = store.search(queries, 10)
    assert hits.indices.dtype == np.int64 and hits.similarities.dtype == np.float32
    assert _recall(hits.indices, exact.indices) >= 0.9
    # each returned similarity is the row's real inner product ...
    real = np.einsum("nd,nkd->nk", queries, vectors[hits.indices])
    np.testing.assert_allclose(hits.similarities, real, atol=1e-5)
    # ... and the j-th best found is never better than the j-th best there is
    assert (hits.similarities <= exact.similarities + 1e-6).all()
    assert (np.diff(hits.similarities, axis=1) <= 0).all()


def test_a_narrow_beam_misses_neighbours_and_rescoring_wins_them_back(corpus):
    vectors, queries = corpus
    exact = ExactStore(vectors, similarity="cosine").search(queries, 10)
    narrow = HnswStore(vectors, similarity="cosine", params=HnswParams(ef_search=1, m=4))
    wide = narrow.with_search(HnswParams(ef_search=1, m=4, rescore=8))
    low = _recall(narrow.search(queries, 10).indices, exact.indices)
    rescored = wide.search(queries, 10)
    assert _recall(rescored.indices, exact.indices) > low
    # re-scored similarities are the exact store's numbers for the rows found
    real = np.einsum("nd,nkd->nk", queries, vectors[rescored.indices])
    np.testing.assert_allclose(rescored.similarities, real, atol=1e-6)
    assert wide.describe().parameters["rescore"] == 8 and not wide.describe().exact


def _saved(store: HnswStore, path: Path) -> Path:
    """``store``'s graph written to ``path``, as a knowledge base saves it."""
    with path.open("wb") as handle:
        store.write_graph(handle)
    return path


def test_a_float16_graph_is_close_and_rescoring_makes_it_exact(corpus, tmp_path: Path):
    vectors, queries = corpus
    half = HnswStore(vectors, similarity="cosine", params=HnswParams(precision="float16"))
    full = HnswStore(vectors, similarity="cosine")
    half_bytes = _saved(half, tmp_path / "half.npy").stat().st_size
    assert half_bytes < 0.8 * _saved(full, tmp_path / "full.npy").stat().st_size
    hits = half.search(queries, 10)
    real = np.einsum("nd,nkd->nk", queries, vectors[hits.indices])
    assert 0 < np.abs(hits.similarities - real).max() < 1e-3
    rescored = half.with_search(HnswParams(precision="float16", rescore=2)).search(queries, 10)
    real = np.einsum("nd,nkd->nk", queries, vectors[rescored.indices])
    np.testing.assert_allclose(rescored.similarities, real, atol=1e-6)
    assert half.describe().parameters["precision"] == "float16"
    with pytest.raises(InputError, match="another graph"):
        half.with_search(HnswParams())


def test_rescore_keeps_the_exact_top_k_of_the_candidates_ties_by_lower_row():
    vectors = np.array([[1, 0], [0, 1], [1, 0], [0.6, 0.8], [-1, 0]], dtype=np.float32)
    queries = np.array([[1, 0], [0, 1]], dtype=np.float32)
    candidates = np.array([[4, 2, 0, 3], [3, -1, 1, 4]])
    sims, rows = rescore(queries, vectors, candidates, 3)
    # query 0: rows 0 and 2 tie at 1.0 (lower row first), then row 3 at 0.6
    np.testing.assert_array_equal(rows, [[0, 2, 3], [1, 3, 4]])
    np.testing.assert_allclose(sims, [[1.0, 1.0, 0.6], [1.0, 0.8, 0.0]], atol=1e-7)


def test_rescore_puts_missing_candidates_last():
    vectors = np.eye(3, dtype=np.float32)
    sims, rows = rescore(vectors[:1], vectors, np.array([[-1, 2, -1]]), 3)
    assert rows[0, 0] == 2 and (rows[0, 1:] == -1).all() and np.isneginf(sims[0, 1:]).all()


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 6))
def test_rescore_equals_brute_force_over_the_candidates(seed: int, k: int):
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(12, 4)).astype(np.float32)
    queries = rng.normal(size=(3, 4)).astype(np.float32)
    candidates = np.stack([rng.choice(12, size=6, replace=False) for _ in range(3)])
    sims, rows = rescore(queries, vectors, candidates, k)
    for q in range(3):
        ranked = sorted(candidates[q], key=lambda r: (-float(queries[q] @ vectors[r]), r))[:k]
        assert rows[q].tolist() == ranked
        np.testing.assert_allclose(sims[q], [queries[q] @ vectors[r] for r in ranked], atol=1e-5)


def test_the_same_vectors_give_the_same_graph_and_a_saved_graph_the_same_results(
    corpus, tmp_path: Path
):
    vectors, queries = corpus
    first = HnswStore(vectors[:500], similarity="cosine")
    second = HnswStore(vectors[:500], similarity="cosine")
    saved = _saved(first, tmp_path / "first.npy")
    assert saved.read_bytes() == _saved(second, tmp_path / "second.npy").read_bytes()
    reloaded = HnswStore(vectors[:500], similarity="cosine", graph=saved)
    a, b = first.search(queries, 5), reloaded.search(queries, 5)
    np.testing.assert_array_equal(a.indices, b.indices)
    grown = first.extend(vectors[500:600])
    assert len(grown) == 600 and len(first) == 500  # the old store is left as it was
    assert grown.search(vectors[550:551], 1).indices[0, 0] == 550
    with pytest.raises(ArtifactError, match="holds 500 rows"):
        HnswStore(vectors[:400], similarity="cosine", graph=saved)


def test_a_float16_graph_built_in_blocks_and_streamed_from_its_file(
    corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import ragbound.stores.hnsw as hnsw_module

    vectors, queries = corpus
    np.save(tmp_path / "v.npy", vectors.astype(np.float16))
    narrow = np.load(tmp_path / "v.npy", mmap_mode="r")  # as a float16 knowledge base maps it
    params = HnswParams(precision="float16")
    monkeypatch.setattr(hnsw_module, "ADD_ROWS", 300)  # rows widened and added 300 at a time
    blocks = HnswStore(narrow, similarity="cosine", params=params)
    again = HnswStore(narrow, similarity="cosine", params=params)
    graph = _saved(blocks, tmp_path / "g.graph.npy")
    assert (
        graph.read_bytes() == _saved(again, tmp_path / "again.npy").read_bytes()
    )  # still deterministic
    exact = ExactStore(vectors, similarity="cosine").search(queries, 10)
    found = blocks.search(queries, 10)
    assert _recall(found.indices, exact.indices) >= 0.95
    written = np.load(graph)  # streamed, yet a plain .npy file numpy reads
    assert written.dtype == np.uint8 and written.ndim == 1
    streamed = HnswStore(narrow, similarity="cosine", params=params, graph=graph)
    np.testing.assert_array_equal(streamed.search(queries, 10).indices, found.indices)
    np.save(tmp_path / "bad.npy", np.zeros(3, np.float32))
    with pytest.raises(ArtifactError, match="expected a uint8 vector"):
        HnswStore(narrow, similarity="cosine", params=params, graph=tmp_path / "bad.npy")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"m": 1}, "m must be in 2..256"),
        ({"ef_search": 0}, "ef_search must be in 1..1000"),
        ({"rescore": -1}, "rescore must be in 0..64"),
        ({"ef_construction": 2.5}, "ef_construction must be an integer"),
        ({"m": True}, "m must be an integer"),
        ({"precision": "float64"}, "precision must be one of float32, float16"),
    ],
)
def test_bad_parameters_are_input_errors(options, message):
    with pytest.raises(InputError, match=message):
        hnsw_params(**options)


def test_bad_queries_and_k(corpus):
    store = HnswStore(corpus[0][:50], similarity="cosine")
    with pytest.raises(InputError, match="shape"):
        store.search(np.zeros((1, 3), np.float32), 2)
    with pytest.raises(InputError, match="k=51 is larger"):
        store.search(corpus[1][:1], 51)


# --------------------------------------------------------------- in a knowledge base
def _documents(tmp_path: Path, topics: list[str]) -> Path:
    folder = tmp_path / "docs"
    for topic in topics:
        for i, text in enumerate(TOPICS[topic]):
            (folder / topic).mkdir(parents=True, exist_ok=True)
            (folder / topic / f"{i}.txt").write_text(text + "\n", encoding="utf-8")
    return folder


def test_the_graph_is_saved_checked_grown_and_dropped(tmp_path):
    topics = sorted(TOPICS)
    first = _documents(tmp_path / "a", topics[:-1])
    kb = KnowledgeBase.build([first], embedder="minilm")
    kb.use_hnsw(HnswParams(ef_search=8, m=8, rescore=2))
    out = kb.save(tmp_path / "kb")
    manifest = json.loads((out / "manifest.json").read_text())
    graph = manifest["backing"]
    assert graph["kind"] == "hnsw"
    assert graph["params"] == {
        "m": 8, "ef_construction": 128, "ef_search": 8, "rescore": 2, "precision": "float32"
    }  # fmt: skip
    assert graph["n_rows"] == len(kb) and (out / GRAPH_DIR / graph["graph"]).is_file()

    loaded = KnowledgeBase.load(out)
    assert loaded.describe() == kb.describe() and not loaded.describe().exact
    assert isinstance(loaded.store, HnswStore)
    queries = IN_KNOWLEDGE[:3] + OUT_OF_KNOWLEDGE[:2]
    np.testing.assert_array_equal(loaded.search(queries, 3).indices, kb.search(queries, 3).indices)

    # add grows the committed graph; the old graph file goes after the commit
    before = len(loaded)
    loaded.add([_documents(tmp_path / "b", topics[-1:])])
    loaded.save()
    grown = json.loads((out / "manifest.json").read_text())["backing"]
    assert grown["n_rows"] == len(loaded) > before and grown["graph"] != graph["graph"]
    assert [p.name for p in (out / GRAPH_DIR).iterdir()] == [grown["graph"]]
    exact = ExactStore(loaded.vectors, similarity="cosine")
    vectors = loaded.embed(queries)
    found = KnowledgeBase.load(out).store.search(vectors, 3)
    assert _recall(found.indices, exact.search(vectors, 3).indices) >= 0.9

    # only the search changes: same graph file, new parameters
    loaded.use_hnsw(HnswParams(ef_search=30, m=8))
    loaded.save()
    changed = json.loads((out / "manifest.json").read_text())["backing"]
    assert changed["graph"] == grown["graph"] and changed["params"]["ef_search"] == 30

    # a damaged graph is refused by its checksum
    (out / GRAPH_DIR / changed["graph"]).write_bytes(b"not a graph")
    with pytest.raises(ArtifactError, match=r"HNSW graph .* is damaged"):
        KnowledgeBase.load(out).search(queries, 2)

    # back to exact: the graph is removed
    loaded.use_hnsw(None)
    loaded.save()
    assert json.loads((out / "manifest.json").read_text())["backing"] == {"kind": "exact"}
    assert list((out / GRAPH_DIR).iterdir()) == []
    assert KnowledgeBase.load(out).describe().exact


def test_hnsw_needs_a_local_dense_knowledge_base(corpus_dir):
    kb = KnowledgeBase.build([corpus_dir], embedder="bm25")
    with pytest.raises(InputError, match="local dense knowledge base"):
        kb.use_hnsw(HnswParams())


def test_the_graph_answers_chunk_searches_and_finer_units_stay_exact(tmp_path):
    from ragbound.corpus.units import unit_params
    from ragbound.stores import PooledStore

    folder = _documents(tmp_path / "a", sorted(TOPICS))
    kb = KnowledgeBase.build([folder], embedder="minilm", units=unit_params("chunk,sentence", 3))
    kb.use_hnsw(HnswParams(ef_search=8, m=8))
    chunks = kb.at_granularity("chunk")
    assert isinstance(chunks.store, HnswStore) and not chunks.describe().exact
    assert kb.granularity == ("chunk", "sentence")  # the default searches every unit indexed
    assert isinstance(kb.store, PooledStore) and kb.describe().exact
