"""What needs the ``torch`` extra says so in one line when torch is not installed (issue 40):
a model folder of the user's own, the torch runtime, the reranker. Torch's absence is made
with ``sys.modules[name] = None``, which makes ``import name`` raise ImportError as in a venv
without it."""

from __future__ import annotations

import sys

import pytest

from ragbound.detect.rerank import CrossEncoderReranker
from ragbound.embedders.registry import load_dense_embedder
from ragbound.embedders.sentence import TORCH_EXTRA, sentence_transformers
from ragbound.errors import InputError

EXTRA = "pip install 'ragbound[torch]'"


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("torch", "transformers", "sentence_transformers"):
        monkeypatch.setitem(sys.modules, name, None)


def test_the_extra_is_named_once() -> None:
    assert TORCH_EXTRA == EXTRA


def test_without_torch_the_import_names_the_extra(no_torch: None) -> None:
    with pytest.raises(InputError, match=r"the reranker needs torch") as caught:
        sentence_transformers("the reranker")
    assert EXTRA in str(caught.value) and "\n" not in str(caught.value)


def test_the_torch_runtime_without_torch_names_the_extra(no_torch: None) -> None:
    embedder = load_dense_embedder("minilm", runtime="torch")
    with pytest.raises(InputError, match=r"on torch needs torch") as caught:
        embedder.encode(["What is BM25?"])
    assert EXTRA in str(caught.value)


def test_the_reranker_without_torch_names_the_extra(no_torch: None, tmp_path) -> None:
    folder = tmp_path / "cross-encoder"  # the config a cross-encoder folder has
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["BertForSequenceClassification"]}')
    (folder / "model.safetensors").write_bytes(b"")  # never read: torch is missing first
    reranker = CrossEncoderReranker(folder)
    with pytest.raises(InputError, match=r"the reranker needs torch") as caught:
        reranker.relevance(["q"], [["p"]])
    assert EXTRA in str(caught.value)


def test_the_bundled_minilm_runs_without_torch(no_torch: None) -> None:
    vectors = load_dense_embedder("minilm").encode(["What is BM25?"])
    assert vectors.shape == (1, 384)
