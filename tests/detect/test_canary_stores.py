"""Canaries catch what no manifest guards: an attached Qdrant collection re-filled with other
vectors under the same ids, and an embedding endpoint serving another model under its name."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragbound.detect import Guard
from ragbound.errors import IncompatibleArtifactError
from ragbound.knowledge import KnowledgeBase
from tests.cli.runner import run
from tests.scripted_server import serving
from tests.texts import IN_KNOWLEDGE

pytestmark = pytest.mark.filterwarnings("ignore:.*calibration queries cannot flag")


def test_a_qdrant_collection_refilled_with_other_vectors_is_refused(
    minilm_kb_dir: Path, tmp_path: Path, monkeypatch, capsys
):
    pytest.importorskip("qdrant_client", reason="qdrant-client is not installed")
    from ragbound.knowledge.qdrant import release
    from tests.qdrantfill import fill

    local = KnowledgeBase.load(minilm_kb_dir)
    folder, kb_dir = tmp_path / "q", tmp_path / "kb"
    vectors = np.asarray(local.vectors, dtype=np.float32)
    url = fill(folder, list(local.chunks), vectors)
    Guard.calibrate(KnowledgeBase.attach(url, kb_dir), IN_KNOWLEDGE, k=3).save()
    assert Guard.load(kb_dir).check_canaries().ok
    # another application re-embeds the collection: same ids, same texts, other vectors
    release(folder)
    shutil.rmtree(folder)
    noise = np.random.default_rng(0).normal(scale=0.05, size=vectors.shape)
    fill(folder, list(local.chunks), (vectors + noise).astype(np.float32))
    release(folder)
    kb = KnowledgeBase.load(kb_dir)
    assert kb.fingerprint == Guard.load(kb_dir, force=True).calibration.manifest.kb_fingerprint
    with pytest.raises(IncompatibleArtifactError, match=r"similarities moved by .*--force"):
        Guard.load(kb_dir)
    code, _, err = run(monkeypatch, capsys, "decide", str(kb_dir), IN_KNOWLEDGE[0])
    assert code != 0 and err.count("error:") == 1 and "moved by" in err
    code, _, err = run(monkeypatch, capsys, "decide", str(kb_dir), IN_KNOWLEDGE[0], "--force")
    assert code == 0, err
    release(folder)


def _vectors(salt: list[str]):
    """An endpoint's reply: a fixed pseudo-random 16-d vector per text, per ``salt[0]``."""

    def reply(request: dict[str, Any]) -> dict[str, Any]:
        rows = []
        for i, text in enumerate(request["input"]):
            seed = int(hashlib.sha256((salt[0] + text).encode()).hexdigest()[:8], 16)
            vector = np.random.default_rng(seed).normal(size=16)
            rows.append({"index": i, "embedding": (vector / np.linalg.norm(vector)).tolist()})
        return {"object": "list", "data": rows, "model": request["model"]}

    return reply


def test_an_endpoint_serving_another_model_under_its_name_is_refused(
    corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    for name in ("OPENAI_BASE_URL", "RAGBOUND_EMBED_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    salt = ["model-a"]
    with serving(_vectors(salt)) as srv:
        monkeypatch.setenv("RAGBOUND_EMBED_BASE_URL", srv.base_url)
        KnowledgeBase.build([corpus_dir], embedder="openai:tiny").save(tmp_path / "kb")
        Guard.calibrate(KnowledgeBase.load(tmp_path / "kb"), IN_KNOWLEDGE, k=3).save()
        assert Guard.load(tmp_path / "kb").check_canaries().largest_move <= 1e-6
        salt[0] = "model-b"  # same name, same dimension, another model
        with pytest.raises(IncompatibleArtifactError) as caught:
            Guard.load(tmp_path / "kb")
        assert "the endpoint serves another model" in str(caught.value)
        guard = Guard.load(tmp_path / "kb", force=True)
        check = guard.check_canaries()
        assert not check.ok and check.rows_changed > 0 and check.moved_query in IN_KNOWLEDGE
