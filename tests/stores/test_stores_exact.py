import numpy as np
import pytest

from ragbound.errors import InputError
from ragbound.stores import BM25Store, ExactStore


def test_exact_store_returns_sorted_top_k_matching_brute_force():
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(500, 16)).astype(np.float32)
    queries = rng.normal(size=(300, 16)).astype(np.float32)
    hits = ExactStore(vectors).search(queries, k=7)
    full = queries @ vectors.T
    expected_idx = np.argsort(-full, axis=1, kind="stable")[:, :7]
    np.testing.assert_array_equal(hits.indices, expected_idx)
    np.testing.assert_allclose(
        hits.similarities, np.take_along_axis(full, expected_idx, 1), rtol=1e-6
    )
    assert (np.diff(hits.similarities, axis=1) <= 0).all()
    assert hits.similarities.dtype == np.float32 and hits.indices.dtype == np.int64


def test_exact_store_k_equal_to_size_and_too_large():
    store = ExactStore(np.eye(3, dtype=np.float32))
    hits = store.search(np.array([[0.0, 1.0, 0.0]], dtype=np.float32), k=3)
    assert hits.indices[0, 0] == 1
    with pytest.raises(InputError, match="k=4 is larger than the knowledge base"):
        store.search(np.array([[0.0, 1.0, 0.0]], dtype=np.float32), k=4)


def test_exact_store_rejects_wrong_dimension():
    with pytest.raises(InputError, match=r"shape \(n, 3\)"):
        ExactStore(np.eye(3, dtype=np.float32)).search(np.ones((1, 4), np.float32), k=1)


def test_exact_store_keeps_one_contiguous_float32_matrix():
    vectors = np.asfortranarray(np.ones((4, 2), dtype=np.float64))
    store = ExactStore(vectors)
    assert store.vectors.flags["C_CONTIGUOUS"] and store.vectors.dtype == np.float32


def test_bm25_scores_relevant_text_highest_and_unknown_words_zero():
    store = BM25Store(["the cat sat on the mat", "dogs chase cats", "black holes bend light"])
    hits = store.search(["cat mat", "zebra quokka"], k=3)
    assert hits.indices[0, 0] == 0 and hits.similarities[0, 0] > 0
    assert (np.diff(hits.similarities, axis=1) <= 0).all()
    assert (hits.similarities[1] == 0).all()
