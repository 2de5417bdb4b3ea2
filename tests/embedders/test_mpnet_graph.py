"""The bundled MPNet's ONNX graph built from its weights without torch: it reproduces the
reference vectors and the torch-exported graph, puts relative positions in transformers'
buckets, imports no torch, and keeps the embedder's identity (needs the mpnet extra)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragbound.embedders import graph_build, load_dense_embedder
from ragbound.embedders.layout import SentenceLayout, read_layout
from ragbound.embedders.mpnet_graph import PADDING_ID, relative_buckets
from ragbound.embedders.onnx_export import export_verdict, exported_model
from ragbound.embedders.onnx_runner import OnnxRunner, pooled
from ragbound.embedders.packaged import mpnet_path
from ragbound.embedders.reference import TOLERANCE, reference_for
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from tests.embedders.test_bert_graph import TEXTS


@pytest.fixture(scope="module")
def folder() -> Path:
    """The joined all-mpnet-base-v2 (in the default cache, joined once)."""
    try:
        return mpnet_path()
    except InputError as exc:
        pytest.skip(f"the bundled MPNet is not installed: {exc}")


@pytest.fixture(scope="module")
def layout(folder: Path) -> SentenceLayout:
    found = read_layout(folder)
    assert found is not None
    return found


def cache_with(folder: Path, root: Path) -> Path:
    """``root`` as a cache that holds the joined MPNet (linked, not joined again)."""
    (root / "models").mkdir(parents=True, exist_ok=True)
    (root / "models" / folder.name).symlink_to(folder, target_is_directory=True)
    return root


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory, folder: Path, layout) -> dict[str, Path]:
    """The built graph and the torch-exported one, each in a cache of its own."""
    made = {}
    with pytest.MonkeyPatch.context() as patch:
        for maker in ("weights", "torch"):
            patch.setenv("RAGBOUND_CACHE", str(cache_with(folder, tmp_path_factory.mktemp(maker))))
            if maker == "torch":  # no reference: the folder is exported with torch
                patch.setattr(graph_build, "reference_for", lambda folder: None)
            made[maker] = exported_model(folder, layout)
            assert export_verdict(folder)["built_by"] == maker
    return made


def runners(graphs: dict[str, Path], folder: Path, layout) -> tuple[OnnxRunner, OnnxRunner]:
    return tuple(OnnxRunner(graphs[m], folder, layout) for m in ("weights", "torch"))


def test_the_built_graph_reproduces_the_reference(graphs, folder: Path, layout):
    reference = reference_for(folder)
    assert reference is not None and reference.file == "reference_mpnet.json"
    # checked at build, one at a time and padded together
    verdict = json.loads((graphs["weights"].parent / "verified.json").read_text("utf-8"))
    assert verdict["largest_difference"] <= TOLERANCE and verdict["min_cosine"] > 1 - 1e-6
    runner = OnnxRunner(graphs["weights"], folder, layout)
    alone = np.vstack([runner.run([text]) for text in reference.texts])
    assert np.max(np.abs(alone - reference.vectors)) <= TOLERANCE


def test_the_built_graph_matches_the_torch_export_in_a_padded_batch(graphs, folder, layout):
    built, exported = runners(graphs, folder, layout)
    encodings = built.tokenizer.encode_batch(TEXTS)
    assert len({len(e.ids) for e in encodings}) == len(TEXTS)  # every row padded differently
    assert max(len(e.ids) for e in encodings) == layout.max_seq_length == 384  # truncated
    ours, theirs = built._forward(encodings), exported._forward(encodings)
    assert ours.shape == (len(TEXTS), 768)
    np.testing.assert_allclose(ours, theirs, atol=TOLERANCE)


def test_the_built_graph_takes_all_512_positions_and_the_padding_id(graphs, folder, layout):
    """Fed past the tokenizer's truncation (every position embedding and relative distance),
    and padded with the padding id as transformers' tokenizer pads (the runner pads with 0):
    positions count the tokens that are not the padding id."""
    rng = np.random.default_rng(7)
    ids = rng.integers(1000, 30000, size=(2, 512), dtype=np.int64)
    mask = np.ones_like(ids)
    mask[1, 300:], ids[1, 300:] = 0, PADDING_ID
    built, exported = runners(graphs, folder, layout)
    feed = {"input_ids": ids, "attention_mask": mask}
    ours = built.session.run(None, feed)[0]
    theirs = pooled(exported.session.run(None, feed)[0], mask, layout)
    np.testing.assert_allclose(ours, theirs, atol=TOLERANCE)


def test_the_relative_buckets_are_transformers():
    modeling = pytest.importorskip("transformers.models.mpnet.modeling_mpnet")
    import torch

    positions = torch.arange(514)
    theirs = modeling.MPNetEncoder.relative_position_bucket(positions[None, :] - positions[:, None])
    assert np.array_equal(relative_buckets(514), theirs.numpy())


NO_TORCH = """
import json, sys
sys.modules["torch"] = None  # importing torch now fails
from ragbound.embedders import load_dense_embedder
from ragbound.embedders.onnx_export import export_verdict
from ragbound.embedders.packaged import mpnet_path
vector = load_dense_embedder("mpnet").encode_one("Do bees sleep?")
heavy = [m for m in ("torch", "transformers", "sentence_transformers") if sys.modules.get(m)]
verdict = export_verdict(mpnet_path())
print(json.dumps({"shape": vector.shape, "heavy": heavy, "built_by": verdict["built_by"],
                  "off_by": verdict["largest_difference"]}))
"""


def test_the_builder_imports_no_torch(tmp_path: Path, folder: Path):
    env = {**os.environ, "RAGBOUND_CACHE": str(cache_with(folder, tmp_path))}
    env.pop("RAGBOUND_EMBED_RUNTIME", None)
    done = subprocess.run(
        [sys.executable, "-c", NO_TORCH], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert found.pop("off_by") <= TOLERANCE
    assert found == {"shape": [1, 768], "heavy": [], "built_by": "weights"}


def test_the_identity_is_unchanged_and_a_knowledge_base_made_before_is_searched(
    graphs, folder: Path, corpus_dir: Path, tmp_path: Path, monkeypatch
):
    assert graphs["weights"].parent.name == graphs["torch"].parent.name  # one cache key
    monkeypatch.delenv("RAGBOUND_EMBED_RUNTIME", raising=False)
    # indexed when MPNet's graph was exported with torch
    monkeypatch.setenv("RAGBOUND_CACHE", str(graphs["torch"].parents[2]))
    KnowledgeBase.build([corpus_dir], embedder="mpnet").save(tmp_path / "kb")
    before = load_dense_embedder("mpnet")
    assert before.info.onnx_graph == "torch"
    query = "How do bees make honey?"
    theirs = before.encode_one(query)
    monkeypatch.setenv("RAGBOUND_CACHE", str(graphs["weights"].parents[2]))
    built = load_dense_embedder("mpnet")
    torch = load_dense_embedder("mpnet", runtime="torch")
    assert built.info.identity() == before.info.identity() == torch.info.identity()
    assert (built.info.onnx_graph, torch.info.onnx_graph) == ("weights", None)
    kb = KnowledgeBase.load(tmp_path / "kb")
    assert kb.manifest.embedder.onnx_graph == "torch"  # as indexed
    assert kb.embedder.info.onnx_graph == "weights"  # as searched now
    ours = kb.embed([query])
    np.testing.assert_allclose(ours, theirs, atol=TOLERANCE)
    hits = kb.store.search(ours, k=3)
    np.testing.assert_allclose(
        hits.similarities, kb.store.search(theirs, k=3).similarities, atol=TOLERANCE
    )
    assert float(hits.similarities[0][0]) > 0.5  # the bee documents, found with the new graph
