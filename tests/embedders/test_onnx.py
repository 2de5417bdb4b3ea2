"""The bundled models on ONNX Runtime: exported once from the installed weights, checked
against torch, and interchangeable with torch's vectors within the tested tolerance."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragbound.detect import Guard
from ragbound.embedders import SentenceTransformerEmbedder, load_dense_embedder
from ragbound.embedders.layout import read_layout
from ragbound.embedders.onnx import OnnxEmbedder
from ragbound.embedders.onnx_export import MIN_COSINE, export_key, export_verdict, exported_model
from ragbound.embedders.onnx_runner import GROUP_RATIO, GROUP_SLACK, length_groups
from ragbound.embedders.packaged import minilm_path
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase

# beyond the export's probe: batches that pad, repeated words, code, a long text
TEXTS = [
    "How does conformal calibration keep the false-positive rate at alpha?",
    "rm -rf / --no-preserve-root",
    "bees bees bees bees",
    "Which tripwire fired, and what was its severity?",
    "À quelle heure ouvre la pharmacie ? ¿Dónde está la estación?",
    "def score(x):\n    return max(x)",
    "one",
    "The shift monitor compares windows of logged queries with the calibration. " * 20,
]


def test_the_bundled_minilm_has_the_plain_layout():
    layout = read_layout(minilm_path())
    assert layout is not None
    assert (layout.pooling, layout.dimension, layout.max_seq_length) == ("mean", 384, 256)


@pytest.mark.parametrize(
    "modules",
    [
        ["Transformer", "Pooling", "Dense", "Normalize"],  # a projection after pooling
        ["Transformer"],
        ["Pooling", "Transformer"],
    ],
)
def test_other_layouts_are_left_to_torch(tmp_path: Path, modules: list[str]):
    shutil.copytree(minilm_path(), tmp_path / "m", ignore=shutil.ignore_patterns("*.safetensors"))
    folder = tmp_path / "m"
    entries = [
        {
            "idx": i,
            "name": str(i),
            "path": "" if m == "Transformer" else f"{i}_{m}",
            "type": f"sentence_transformers.models.{m}",
        }
        for i, m in enumerate(modules)
    ]
    (folder / "modules.json").write_text(json.dumps(entries))
    assert read_layout(folder) is None
    with pytest.raises(InputError, match=r"runtime onnx: .*not a transformer followed by one pool"):
        load_dense_embedder(str(folder), runtime="onnx")


def test_two_pooling_modes_or_no_tokenizer_file_are_left_to_torch(tmp_path: Path):
    folder = tmp_path / "m"
    shutil.copytree(minilm_path(), folder, ignore=shutil.ignore_patterns("*.safetensors"))
    pooling = folder / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**config, "pooling_mode_max_tokens": True}))
    assert read_layout(folder) is None
    pooling.write_text(json.dumps(config))
    assert read_layout(folder) is not None
    (folder / "tokenizer.json").unlink()
    assert read_layout(folder) is None


def test_onnx_reproduces_torch_beyond_the_probe():
    onnx = load_dense_embedder("minilm", runtime="onnx")
    torch = load_dense_embedder("minilm", runtime="torch")
    assert isinstance(onnx, OnnxEmbedder) and isinstance(torch, SentenceTransformerEmbedder)
    ours, theirs = onnx.encode(TEXTS, batch_size=3), torch.encode(TEXTS)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    assert np.min(np.sum(ours * theirs, axis=1)) >= MIN_COSINE
    # one query alone (no padding) is the same vector as in a padded batch
    np.testing.assert_allclose(onnx.encode_one(TEXTS[2])[0], ours[2], atol=1e-6)
    assert onnx.encode([]).shape == (0, 384)


def test_a_batch_of_mixed_lengths_is_grouped_and_keeps_its_order():
    onnx = load_dense_embedder("minilm", runtime="onnx")
    together = onnx.encode(TEXTS, batch_size=len(TEXTS))  # one call: the request path
    alone = np.vstack([onnx.encode_one(text) for text in TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-5)


@given(st.lists(st.integers(min_value=1, max_value=512), max_size=40))
def test_length_groups_partition_and_bound_the_padding(counts: list[int]):
    groups = length_groups(counts)
    assert sorted(i for group in groups for i in group) == list(range(len(counts)))
    for group in groups:
        shortest, longest = min(counts[i] for i in group), max(counts[i] for i in group)
        assert longest <= shortest * GROUP_RATIO + GROUP_SLACK
    firsts = [counts[group[0]] for group in groups]
    assert firsts == sorted(firsts)


def test_length_groups_by_hand():
    # 8 and 9 share (9 <= 8 x 1.2 + 2); 12 > 11.6 starts a group; 30 and 31 share
    assert length_groups([30, 8, 9, 31, 12]) == [[1, 2], [4], [0, 3]]
    assert length_groups([]) == []


def test_either_runtime_has_one_identity_and_says_which_it_is():
    onnx = load_dense_embedder("minilm", runtime="onnx")
    torch = load_dense_embedder("minilm", runtime="torch")
    assert onnx.info.identity() == torch.info.identity()
    assert (onnx.info.runtime, torch.info.runtime) == ("onnx", "torch")


def test_the_runtime_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("RAGBOUND_EMBED_RUNTIME", raising=False)
    assert isinstance(load_dense_embedder("minilm"), OnnxEmbedder)
    monkeypatch.setenv("RAGBOUND_EMBED_RUNTIME", "torch")
    assert isinstance(load_dense_embedder("minilm"), SentenceTransformerEmbedder)
    monkeypatch.setenv("RAGBOUND_EMBED_RUNTIME", "tensorrt")
    with pytest.raises(InputError, match="embedding runtime 'tensorrt': expected one of auto"):
        load_dense_embedder("minilm")


@pytest.fixture
def copied_minilm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the bundled MiniLM folder, exported into a cache of its own."""
    monkeypatch.setenv("RAGBOUND_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "minilm"
    shutil.copytree(minilm_path(), folder)
    return folder


def test_the_export_is_checked_once_and_keyed_by_the_weights(copied_minilm: Path):
    folder = copied_minilm
    layout = read_layout(folder)
    assert layout is not None and export_verdict(folder) is None
    model = exported_model(folder, layout)
    verdict = export_verdict(folder)
    assert verdict is not None and verdict["min_cosine"] >= MIN_COSINE
    assert verdict["probe_texts"] >= 8 and model.is_file()
    mtime = model.stat().st_mtime_ns
    assert exported_model(folder, layout).stat().st_mtime_ns == mtime  # read from the cache
    # a fine-tuned copy keeps the configs and file sizes: its new weights change the key
    key = export_key(folder)
    weights = folder / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    assert export_key(folder) != key and export_verdict(folder) is None


def test_an_export_that_does_not_reproduce_torch_is_refused(copied_minilm: Path):
    folder = copied_minilm
    layout = read_layout(folder)
    assert layout is not None
    model = exported_model(folder, layout)
    verdict_file = model.with_name("verified.json")
    verdict = json.loads(verdict_file.read_text())
    verdict_file.write_text(json.dumps({**verdict, "min_cosine": 0.97}))
    with pytest.raises(InputError, match=r"does not reproduce torch \(smallest cosine 0.97"):
        exported_model(folder, layout)
    # auto falls back to torch; asking for onnx is refused
    assert isinstance(load_dense_embedder(str(folder)), SentenceTransformerEmbedder)
    with pytest.raises(InputError, match="does not reproduce torch"):
        load_dense_embedder(str(folder), runtime="onnx").encode_one("a query")


def test_the_embedder_pickles_without_its_session():
    embedder = load_dense_embedder("minilm", runtime="onnx")
    vector = embedder.encode_one("honey bees")
    copy = pickle.loads(pickle.dumps(embedder))
    np.testing.assert_allclose(copy.encode_one("honey bees"), vector, atol=1e-7)


def test_a_torch_calibration_checks_the_same_with_onnx(
    minilm_kb_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    questions = [
        "What do honey bees make?",
        "How do bees communicate?",
        "When were steam trains built?",
        "Who keeps bees?",
        "What powers a locomotive?",
        "Why do hives swarm?",
    ] * 4
    asked = ["How fast is a steam engine?", "What is quantum chromodynamics?", "Do bees sleep?"]
    monkeypatch.setenv("RAGBOUND_EMBED_RUNTIME", "torch")
    guard = Guard.calibrate(KnowledgeBase.load(minilm_kb_dir), questions, k=4)
    assert guard.calibration.manifest.embed_runtime == "torch"
    by_torch = guard.score(asked)
    monkeypatch.setenv("RAGBOUND_EMBED_RUNTIME", "onnx")
    onnx_guard = Guard(KnowledgeBase.load(minilm_kb_dir), guard.calibration)
    onnx_guard.verify_canaries()  # the similarities did not move past the canary tolerance
    by_onnx = onnx_guard.score(asked)
    np.testing.assert_allclose(by_onnx.scores, by_torch.scores, atol=1e-5)
    np.testing.assert_array_equal(by_onnx.p_values, by_torch.p_values)
