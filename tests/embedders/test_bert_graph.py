"""The bundled MiniLM's ONNX graph built from its weights without torch: it reproduces the
reference vectors and the torch-exported graph, is refused when it does not, imports no torch,
and keeps the embedder's identity."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragbound.embedders import SentenceTransformerEmbedder, graph_build, load_dense_embedder
from ragbound.embedders.layout import SentenceLayout, read_layout
from ragbound.embedders.onnx_export import export_verdict, exported_model
from ragbound.embedders.onnx_runner import OnnxRunner, pooled
from ragbound.embedders.packaged import minilm_path
from ragbound.embedders.reference import TOLERANCE, Reference, reference_for
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase

# padded together: one word, a sentence, an empty-ish text, a text past max_seq_length
TEXTS = [
    "bees",
    "How does conformal calibration keep the false-positive rate at alpha?",
    " ... ",
    "",
    "Steam locomotives burned coal to boil water; the steam drove the pistons. " * 40,
    "À quelle heure ouvre la pharmacie ?",
]


@pytest.fixture(scope="module")
def layout() -> SentenceLayout:
    found = read_layout(minilm_path())
    assert found is not None
    return found


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory, layout: SentenceLayout) -> dict[str, Path]:
    """The built graph and the torch-exported one of the bundled MiniLM, each in a cache of
    its own."""
    made = {}
    with pytest.MonkeyPatch.context() as patch:
        for maker in ("weights", "torch"):
            patch.setenv("RAGBOUND_CACHE", str(tmp_path_factory.mktemp(maker)))
            if maker == "torch":  # no reference: the folder is exported with torch
                patch.setattr(graph_build, "reference_for", lambda folder: None)
            made[maker] = exported_model(minilm_path(), layout)
            assert export_verdict(minilm_path())["built_by"] == maker
    return made


def test_the_built_graph_reproduces_the_reference(graphs: dict[str, Path], layout):
    reference = reference_for(minilm_path())
    assert reference is not None and len(reference.texts) >= 10
    runner = OnnxRunner(graphs["weights"], minilm_path(), layout)
    vectors = np.vstack([runner.run([text]) for text in reference.texts])
    assert np.max(np.abs(vectors - reference.vectors)) <= TOLERANCE


def test_the_built_graph_matches_the_torch_export_in_a_padded_batch(graphs, layout):
    built, exported = (OnnxRunner(graphs[m], minilm_path(), layout) for m in ("weights", "torch"))
    encodings = built.tokenizer.encode_batch(TEXTS)
    assert len({len(e.ids) for e in encodings}) == len(TEXTS)  # every row padded differently
    assert max(len(e.ids) for e in encodings) == layout.max_seq_length  # truncated as ever
    ours, theirs = built._forward(encodings), exported._forward(encodings)
    assert ours.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(ours, theirs, atol=TOLERANCE)
    np.testing.assert_allclose(built.run(TEXTS), exported.run(TEXTS), atol=TOLERANCE)


def test_the_built_graph_takes_all_512_positions(graphs, layout):
    """Fed past the tokenizer's truncation: the model's every position embedding."""
    rng = np.random.default_rng(7)
    ids = rng.integers(1000, 30000, size=(2, 512), dtype=np.int64)
    mask = np.ones_like(ids)
    mask[1, 300:] = 0
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    built, exported = (OnnxRunner(graphs[m], minilm_path(), layout) for m in ("weights", "torch"))
    ours = built.session.run(None, feed)[0]
    theirs = pooled(exported.session.run(None, feed)[0], mask, layout)
    np.testing.assert_allclose(ours, theirs, atol=TOLERANCE)


def test_a_graph_off_its_reference_is_refused(tmp_path: Path, monkeypatch, layout):
    monkeypatch.setenv("RAGBOUND_CACHE", str(tmp_path))
    true = reference_for(minilm_path())
    assert true is not None
    shifted = Reference(true.file, true.texts, true.vectors + 3e-4, true.made_with)
    monkeypatch.setattr(graph_build, "reference_for", lambda folder: shifted)
    with pytest.raises(InputError, match=r"largest difference 3.0\de-04 > 1e-05 over 10 ref"):
        exported_model(minilm_path(), layout)
    # kept on disk, refused again without a rebuild; auto falls back to torch
    assert export_verdict(minilm_path())["largest_difference"] > TOLERANCE
    with pytest.raises(InputError, match="largest difference"):
        exported_model(minilm_path(), layout)
    assert isinstance(load_dense_embedder("minilm"), SentenceTransformerEmbedder)


NO_TORCH = """
import json, sys
sys.modules["torch"] = None  # importing torch now fails
from ragbound.embedders import load_dense_embedder
from ragbound.embedders.onnx_export import export_verdict
from ragbound.embedders.packaged import minilm_path
vector = load_dense_embedder("minilm").encode_one("Do bees sleep?")
heavy = [m for m in ("torch", "transformers", "sentence_transformers") if sys.modules.get(m)]
print(json.dumps({"shape": vector.shape, "heavy": heavy,
                  "built_by": export_verdict(minilm_path())["built_by"]}))
"""


def test_the_builder_imports_no_torch(tmp_path: Path):
    env = {**os.environ, "RAGBOUND_CACHE": str(tmp_path)}
    env.pop("RAGBOUND_EMBED_RUNTIME", None)
    done = subprocess.run(
        [sys.executable, "-c", NO_TORCH], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"shape": [1, 384], "heavy": [], "built_by": "weights"}


def test_the_identity_is_unchanged_and_the_manifest_says_what_built_the_graph(
    graphs, minilm_kb_dir: Path, corpus_dir: Path, monkeypatch
):
    monkeypatch.setenv("RAGBOUND_CACHE", str(graphs["weights"].parents[2]))
    monkeypatch.delenv("RAGBOUND_EMBED_RUNTIME", raising=False)
    built = load_dense_embedder("minilm")
    torch = load_dense_embedder("minilm", runtime="torch")
    assert built.info.identity() == torch.info.identity()
    assert (built.info.onnx_graph, torch.info.onnx_graph) == ("weights", None)
    # a knowledge base indexed before takes the built graph's queries
    kb = KnowledgeBase.load(minilm_kb_dir)
    assert kb.embedder.info.onnx_graph == "weights"
    assert KnowledgeBase.build([corpus_dir]).manifest.embedder.onnx_graph == "weights"
