"""The Retriever contract, checked on every store the package ships."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from ragbound.corpus import Document
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.stores import (
    BM25Store,
    ExactStore,
    Retriever,
    SearchInfo,
    search_excluding,
)

TEXTS = [
    "bees dance to show where the flowers are",
    "the queen bee lays eggs in the hive",
    "owls hunt mice at night",
    "trains run on a standard gauge track",
    "bees dance to show where the flowers are",  # a duplicate: exact ties with row 0
    "honey bees make honey from nectar",
    "night trains cross the border",
    "a hive holds thousands of bees",
]
QUERY_TEXTS = ["bee dance flowers", "night owls", "trains gauge", "zebra quokka", "hive honey"]


@dataclass
class Case:
    """A store over eight rows and five queries of the kind it indexes."""

    store: Retriever
    queries: Any


def _exact() -> Case:
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(len(TEXTS), 6)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors[4] = vectors[0]  # exact ties, like the duplicate text
    queries = rng.normal(size=(len(QUERY_TEXTS), 6)).astype(np.float32)
    return Case(ExactStore(vectors, similarity="cosine"), queries)


def _bm25() -> Case:
    return Case(BM25Store(TEXTS), list(QUERY_TEXTS))


def _knowledge() -> Case:
    """A BM25 knowledge base: a text retriever made of chunks and a store."""
    documents = [Document(id=f"d{i}", text=t, source=f"d{i}.txt") for i, t in enumerate(TEXTS)]
    kb = KnowledgeBase.from_documents(documents, embedder="bm25")
    assert [chunk.text for chunk in kb.chunks] == TEXTS
    return Case(kb, list(QUERY_TEXTS))


CASES: dict[str, Callable[[], Case]] = {"exact": _exact, "bm25": _bm25, "knowledge": _knowledge}


@pytest.fixture(params=sorted(CASES), scope="module")
def case(request: pytest.FixtureRequest) -> Case:
    return CASES[request.param]()


def test_store_is_a_retriever_of_its_declared_kind(case: Case) -> None:
    assert isinstance(case.store, Retriever)
    assert len(case.store) == len(TEXTS)
    if case.store.query_kind == "vector":
        assert case.store.dimension == case.queries.shape[1]
    else:
        assert case.store.query_kind == "text" and case.store.dimension == 0


def test_describe_names_an_exact_search_with_the_store_similarity(case: Case) -> None:
    info = case.store.describe()
    assert isinstance(info, SearchInfo)
    assert info.exact and info.backend and info.similarity == case.store.similarity
    assert SearchInfo.model_validate_json(info.model_dump_json()) == info


@pytest.mark.parametrize("k", [1, 3, len(TEXTS)])
def test_search_shape_order_and_ties(case: Case, k: int) -> None:
    hits = case.store.search(case.queries, k)
    assert hits.similarities.shape == hits.indices.shape == (len(QUERY_TEXTS), k)
    assert hits.indices.dtype == np.int64
    assert ((hits.indices >= 0) & (hits.indices < len(TEXTS))).all()
    assert all(len(set(row)) == k for row in hits.indices.tolist())
    assert (np.diff(hits.similarities, axis=1) <= 0).all()
    tied = np.diff(hits.similarities, axis=1) == 0
    assert (np.diff(hits.indices, axis=1)[tied] > 0).all()  # ties: lower row first


def test_top_k_is_the_prefix_of_the_full_ranking(case: Case) -> None:
    full = case.store.search(case.queries, len(TEXTS))
    top = case.store.search(case.queries, 3)
    np.testing.assert_array_equal(top.indices, full.indices[:, :3])
    np.testing.assert_array_equal(top.similarities, full.similarities[:, :3])


@pytest.mark.parametrize("k", [0, -1, True, 2.0, len(TEXTS) + 1])
def test_bad_k_is_an_input_error(case: Case, k: Any) -> None:
    with pytest.raises(InputError, match="k"):
        case.store.search(case.queries, k)


def test_search_excluding_matches_filtering_the_full_ranking(case: Case) -> None:
    exclude = [{0}, set(), {2, 6, 3}, {7, 99}, {0, 1, 4, 5}]
    hits = search_excluding(case.store, case.queries, 3, exclude)
    full = case.store.search(case.queries, len(TEXTS))
    for row, rows in enumerate(exclude):
        kept = [j for j in full.indices[row].tolist() if j not in rows][:3]
        assert hits.indices[row].tolist() == kept
        expected = [full.similarities[row, full.indices[row].tolist().index(j)] for j in kept]
        np.testing.assert_array_equal(hits.similarities[row], expected)


def test_search_excluding_refuses_too_few_rows_left_and_misaligned_sets(case: Case) -> None:
    too_many = [set(range(6))] + [set()] * (len(QUERY_TEXTS) - 1)
    with pytest.raises(InputError, match="k=3 is larger than the 2 rows left"):
        search_excluding(case.store, case.queries, 3, too_many)
    with pytest.raises(InputError, match="1 exclusion sets given for 5 queries"):
        search_excluding(case.store, case.queries, 3, [set()])
