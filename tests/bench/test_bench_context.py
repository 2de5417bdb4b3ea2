"""Leave-one-out top-k contexts: the store's exclusion search against a plain full sort."""

from __future__ import annotations

import numpy as np
import pytest

from ragbound.bench.context import top_k_context, unit_rows
from ragbound.bench.models import Provenance, QAPair

PROVENANCE = Provenance(created_at="2025-01-01T00:00:00+00:00")


def pairs(n: int) -> list[QAPair]:
    return [
        QAPair(
            id=f"p{i}", question=f"q{i}?", answer=f"a{i}.", origin="imported", provenance=PROVENANCE
        )
        for i in range(n)
    ]


def reference(vectors: np.ndarray, query: np.ndarray, excluded: frozenset[int], k: int):
    """The contexts as they were built before the stores: full stable sort, then filter."""
    similarities = vectors @ unit_rows(query)
    order = [j for j in np.argsort(-similarities, kind="stable") if j not in excluded][:k]
    return [f"p{j}" for j in order], [float(similarities[j]) for j in order]


@pytest.mark.parametrize("seed", range(5))
def test_top_k_context_equals_the_full_sort_with_exclusions(seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = unit_rows(rng.normal(size=(40, 12)))
    vectors[[5, 17, 30]] = vectors[3]  # duplicate pairs tie exactly: set order must decide
    kset = pairs(40)
    for _ in range(20):
        query = rng.normal(size=12) if rng.random() < 0.7 else vectors[3] * 2.0
        excluded = frozenset(rng.choice(40, size=int(rng.integers(0, 6)), replace=False).tolist())
        items = top_k_context(kset, vectors, query, excluded, k=7)
        ids, sims = reference(vectors, query, excluded, 7)
        assert [item.qa_id for item in items] == ids
        assert [item.similarity for item in items] == pytest.approx(sims, abs=1e-12)
        assert [item.number for item in items] == list(range(1, 8))
        assert not {f"p{j}" for j in excluded} & set(ids)


def test_fewer_pairs_left_than_k_gives_what_is_left() -> None:
    vectors = unit_rows(np.eye(4))
    items = top_k_context(pairs(4), vectors, np.array([0.0, 1.0, 0.0, 0.0]), frozenset({1, 2}), 5)
    assert [item.qa_id for item in items] == ["p0", "p3"]
    assert top_k_context(pairs(2), vectors[:2], vectors[0], frozenset({0, 1}), 3) == []
