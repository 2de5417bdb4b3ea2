import sys

import bm25s
import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis.extra.numpy import arrays

from ragbound.errors import InputError
from ragbound.stores import BM25Store, ExactStore, top_k_rows
from ragbound.stores.exact import WIDEN_ROWS, widened


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


def test_bm25_counts_the_texts_holding_each_word_once_per_text():
    store = BM25Store(["bee bee hive", "the bee", "trains run"])
    assert store.document_frequencies() == {"bee": 2, "hive": 1, "trains": 1, "run": 1}


@settings(max_examples=200, deadline=None)
@given(
    scores=arrays(
        np.int8, st.tuples(st.integers(1, 6), st.integers(1, 40)), elements=st.integers(-3, 3)
    ),
    data=st.data(),
)
def test_top_k_rows_equals_a_stable_full_sort_even_with_ties(scores: np.ndarray, data) -> None:
    k = data.draw(st.integers(1, scores.shape[1]))
    values = scores.astype(np.float32)
    top, columns = top_k_rows(values, k)
    expected = np.argsort(-values, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(columns, expected)
    np.testing.assert_array_equal(top, np.take_along_axis(values, expected, axis=1))


def test_float64_store_keeps_float64_cosines():
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(50, 8))
    query = rng.normal(size=(2, 8))
    store = ExactStore(vectors, similarity="cosine", precision="float64")
    hits = store.search(query, k=5)
    full = query @ vectors.T
    assert hits.similarities.dtype == np.float64
    np.testing.assert_array_equal(hits.indices, np.argsort(-full, axis=1, kind="stable")[:, :5])
    np.testing.assert_allclose(hits.similarities, np.sort(full, axis=1)[:, ::-1][:, :5], rtol=1e-12)
    assert store.describe().parameters == {"precision": "float64"}


def test_exact_store_refuses_a_lexical_similarity():
    with pytest.raises(InputError, match="not bm25"):
        ExactStore(np.eye(2, dtype=np.float32), similarity="bm25")


def test_bm25_scores_equal_those_bm25s_retrieves():
    texts = ["the cat sat on the mat", "dogs chase cats", "a cat and a dog", "black holes"]
    store = BM25Store(texts)
    queries = ["cat", "dog chase", "cat mat dog"]
    hits = store.search(queries, k=4)
    tokens = bm25s.tokenize(queries, stopwords="en", show_progress=False)
    _, scores = store.retriever.retrieve(tokens, k=4, show_progress=False, n_threads=1)
    np.testing.assert_array_equal(hits.similarities, scores)


# ------------------------------------------------------------- search in row blocks
small_ints = st.integers(-2, 2)  # few values: many ties, and every inner product exact


@settings(max_examples=200, deadline=None)
@given(
    vectors=arrays(np.int8, st.tuples(st.integers(1, 40), st.integers(1, 4)), elements=small_ints),
    data=st.data(),
)
def test_block_search_equals_one_full_search_with_ties_across_blocks(
    vectors: np.ndarray, data
) -> None:
    n, dim = vectors.shape
    queries = data.draw(arrays(np.int8, (data.draw(st.integers(1, 5)), dim), elements=small_ints))
    k = data.draw(st.integers(1, n))
    block_rows = data.draw(st.integers(1, n))
    cuts = (
        sorted(data.draw(st.lists(st.integers(1, n - 1), max_size=3, unique=True))) if n > 1 else []
    )
    rows, q = vectors.astype(np.float32), queries.astype(np.float32)
    parts = np.split(rows, cuts)
    blocked = ExactStore(parts, block_rows=block_rows).search(q, k)
    whole = ExactStore(rows, block_rows=n).search(q, k)
    expected = np.argsort(-(q @ rows.T), axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(whole.indices, expected)
    np.testing.assert_array_equal(blocked.indices, expected)
    np.testing.assert_array_equal(blocked.similarities, whole.similarities)


def test_block_search_on_real_valued_vectors_matches_the_full_product():
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(1000, 24)).astype(np.float32)
    queries = rng.normal(size=(300, 24)).astype(np.float32)
    hits = ExactStore([vectors[:333], vectors[333:]], block_rows=100).search(queries, k=9)
    full = queries @ vectors.T
    np.testing.assert_array_equal(hits.indices, np.argsort(-full, axis=1, kind="stable")[:, :9])
    np.testing.assert_allclose(hits.similarities, np.sort(full, axis=1)[:, ::-1][:, :9], rtol=1e-6)


def test_a_memory_mapped_matrix_is_searched_in_place(tmp_path):
    rng = np.random.default_rng(8)
    vectors = rng.normal(size=(200, 8)).astype(np.float32)
    np.save(tmp_path / "v.npy", vectors)
    mapped = np.load(tmp_path / "v.npy", mmap_mode="r")
    store = ExactStore(mapped, block_rows=64)
    assert np.shares_memory(store.vectors, mapped)  # not read into memory
    queries = rng.normal(size=(5, 8)).astype(np.float32)
    expected = ExactStore(vectors).search(queries, k=4)
    np.testing.assert_array_equal(store.search(queries, k=4).indices, expected.indices)


def test_float16_rows_stay_narrow_and_are_searched_in_float32():
    rng = np.random.default_rng(9)
    vectors = rng.normal(size=(300, 8)).astype(np.float16)
    queries = rng.normal(size=(4, 8)).astype(np.float32)
    store = ExactStore(vectors, similarity="cosine", block_rows=50)
    assert store.vectors.dtype == np.float16 and np.shares_memory(store.vectors, vectors)
    hits = store.search(queries, k=6)
    full = queries @ vectors.astype(np.float32).T
    assert hits.similarities.dtype == np.float32
    np.testing.assert_array_equal(hits.indices, np.argsort(-full, axis=1, kind="stable")[:, :6])
    assert store.describe().parameters == {"precision": "float32", "storage": "float16"}


def test_float16_memory_mapped_rows_widened_in_blocks_equal_the_float32_search(tmp_path):
    rng = np.random.default_rng(10)
    exact = rng.normal(size=(2 * WIDEN_ROWS + 123, 16)).astype(np.float32)
    exact /= np.linalg.norm(exact, axis=1, keepdims=True)
    np.save(tmp_path / "v.npy", exact.astype(np.float16))
    mapped = np.load(tmp_path / "v.npy", mmap_mode="r")  # read-only, as a knowledge base maps
    queries = rng.normal(size=(3, 16)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    narrow = ExactStore([mapped[:500], mapped[500:]], similarity="cosine").search(queries, k=10)
    wide = ExactStore(exact, similarity="cosine").search(queries, k=10)
    np.testing.assert_allclose(narrow.similarities, wide.similarities, atol=2e-3)
    # the same rows as a search over the float16 values widened in one piece (ties aside)
    widened_all = mapped.astype(np.float32)
    same = ExactStore(widened_all, similarity="cosine").search(queries, k=10)
    np.testing.assert_array_equal(narrow.indices, same.indices)
    np.testing.assert_array_equal(narrow.similarities, same.similarities)


@pytest.mark.parametrize("torch_loaded", [True, False])
def test_widening_float16_is_exact_for_every_value(monkeypatch, torch_loaded: bool):
    if torch_loaded:
        import torch  # noqa: F401 - loaded: the vectorised conversion is used
    else:  # a process that never imported torch (ONNX Runtime) widens with numpy
        monkeypatch.setitem(sys.modules, "torch", None)
    every = np.arange(2**16, dtype=np.uint16).view(np.float16).reshape(-1, 8)
    finite = every[np.isfinite(every).all(axis=1)]
    np.testing.assert_array_equal(widened(finite, np.dtype(np.float32)), finite.astype(np.float32))
    assert not np.shares_memory(widened(finite, np.dtype(np.float32)), finite)


def test_vector_parts_must_share_a_dimension_and_blocks_be_positive():
    with pytest.raises(InputError, match="share one dimension"):
        ExactStore([np.ones((2, 3), np.float32), np.ones((2, 4), np.float32)])
    with pytest.raises(InputError, match="block_rows must be a positive integer"):
        ExactStore(np.ones((2, 3), np.float32), block_rows=0)
