from pathlib import Path

import numpy as np
import pytest

from ragbound.embedders import load_dense_embedder
from ragbound.embedders.packaged import minilm_path
from ragbound.errors import InputError


def test_minilm_declares_its_identity_and_normalises():
    embedder = load_dense_embedder("minilm")
    info = embedder.info
    assert (info.name, info.dimension, info.similarity, info.kind) == (
        "all-MiniLM-L6-v2",
        384,
        "cosine",
        "dense",
    )
    assert len(info.revision) == 16
    vectors = embedder.encode(["a bee", "a train"])
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(embedder.encode_one("a bee")[0], vectors[0], atol=1e-5)


def test_a_local_model_folder_is_an_embedder_with_the_same_revision():
    by_path = load_dense_embedder(str(minilm_path()))
    assert by_path.info.revision == load_dense_embedder("minilm").info.revision


def test_unknown_spec_and_non_model_folder(tmp_path: Path):
    with pytest.raises(InputError, match="unknown embedder 'nomic'"):
        load_dense_embedder("nomic")
    with pytest.raises(InputError, match="not a sentence-transformers model folder"):
        load_dense_embedder(str(tmp_path))
