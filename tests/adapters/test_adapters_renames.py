"""The adapter names renamed for one meaning each (``Guarded*`` -> ``Gated*``, ``Scored*`` ->
``Framework*``, ``scores=`` -> ``closeness=``): the old ones still work, and warn."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import pytest

from ragbound.adapters import _framework

RENAMED = [
    (
        "langchain_core",
        "langchain_store",
        "GuardedVectorStoreRetriever",
        "GatedVectorStoreRetriever",
    ),
    (
        "llama_index.core",
        "llamaindex_retriever",
        "GuardedLlamaIndexRetriever",
        "GatedLlamaIndexRetriever",
    ),
    ("haystack", "haystack_retriever", "GuardedHaystackRetriever", "GatedHaystackRetriever"),
]


@pytest.mark.parametrize(
    ("framework", "module", "old", "new"), RENAMED, ids=[r[2] for r in RENAMED]
)
def test_an_old_adapter_name_is_the_new_class_with_a_warning(
    framework: str, module: str, old: str, new: str
) -> None:
    pytest.importorskip(framework)
    imported = importlib.import_module(f"ragbound.adapters.{module}")
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated, use {new}"):
        assert getattr(imported, old) is getattr(imported, new)
    assert new in imported.__all__ and old not in imported.__all__


@pytest.mark.parametrize(
    ("old", "new"), [("ScoredSearch", "FrameworkSearch"), ("ScoredKnowledge", "FrameworkKnowledge")]
)
def test_the_shared_framework_classes_keep_their_old_names(old: str, new: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated, use {new}"):
        assert getattr(_framework, old) is getattr(_framework, new)


class Runs:
    """Enough of a Haystack retriever for the constructor (it is never searched here)."""

    def run(self, **_: Any) -> dict:
        return {"documents": []}


def _searches() -> list[Any]:
    found = []
    if importlib.util.find_spec("langchain_core") is not None:
        from langchain_core.embeddings import DeterministicFakeEmbedding
        from langchain_core.vectorstores import InMemoryVectorStore

        from ragbound.adapters.langchain_store import VectorStoreSearch

        store = InMemoryVectorStore(DeterministicFakeEmbedding(size=4))
        found.append(pytest.param(lambda **kw: VectorStoreSearch(store, **kw), id="langchain"))
    if importlib.util.find_spec("llama_index") is not None:
        from ragbound.adapters.llamaindex_retriever import LlamaIndexSearch

        found.append(pytest.param(lambda **kw: LlamaIndexSearch(object(), **kw), id="llamaindex"))
    if importlib.util.find_spec("haystack") is not None:
        from ragbound.adapters.haystack_retriever import HaystackSearch

        found.append(pytest.param(lambda **kw: HaystackSearch(Runs(), **kw), id="haystack"))
    return found


@pytest.mark.parametrize("make", _searches())
def test_the_old_scores_keyword_is_closeness_with_a_warning(make: Any) -> None:
    with pytest.warns(DeprecationWarning, match="scores= is deprecated, use closeness="):
        old = make(scores="distance")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = make(closeness="distance")
    assert old.closeness == new.closeness == "distance"
    # the search description keeps its key: calibrations saved before the rename still match
    assert old.describe() == new.describe() and new.describe().parameters == {"scores": "distance"}
