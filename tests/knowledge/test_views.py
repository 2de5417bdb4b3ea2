"""Views at other granularities, the units a knowledge base indexed, the size of a search."""

from __future__ import annotations

import pytest

from ragbound.corpus import Document
from ragbound.corpus.units import unit_params
from ragbound.errors import IncompatibleArtifactError
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.views import Views, check_indexed, index_size

DOCS = [
    Document(
        id="bees", text="Bees make honey. They live in hives. A queen lays eggs.", source="b.txt"
    )
]


def test_a_view_is_made_once_for_the_same_objects_and_again_for_others():
    views: Views[list[int]] = Views()
    made: list[str] = []
    first, second = object(), object()

    def make(name: str) -> list[int]:
        made.append(name)
        return [len(made)]

    a = views.get((first,), "a", lambda: make("a"))
    assert views.get((first,), "a", lambda: make("a")) is a
    assert views.get((first,), "b", lambda: make("b")) is not a
    assert views.get((second,), "a", lambda: make("a")) is not a  # made from another object
    assert made == ["a", "b", "a"]


def test_check_indexed_names_the_units_missing():
    kb = KnowledgeBase.from_documents(DOCS, embedder="bm25")
    check_indexed(kb.manifest, kb.path, ("chunk",))
    with pytest.raises(IncompatibleArtifactError, match="does not index sentence units"):
        check_indexed(kb.manifest, kb.path, ("chunk", "sentence"))


def test_index_size_counts_the_rows_a_search_scores():
    kb = KnowledgeBase.from_documents(DOCS, embedder="bm25", units=unit_params("chunk,sentence", 2))
    sentences = sum(u.granularity == "sentence" for u in kb.units.units)
    assert sentences == 3
    assert index_size(kb.contents(), ("chunk",)) == (1, 0)  # BM25: no vector bytes
    assert index_size(kb.contents(), ("chunk", "sentence")) == (1 + sentences, 0)
    assert index_size(kb.contents(), ("sentence",)) == (sentences, 0)
