"""The ONNX graph of a sentence-transformers folder, made once into the cache and checked
before anyone uses it.

A folder with reference vectors (the bundled models) gets a graph built from its weights
without torch (:mod:`ragbound.embedders.graph_build`); any other is exported with torch and
checked against it. Either lands in ``<cache>/onnx/<key>/model.onnx`` with ``verified.json``
beside it (what built it, the smallest cosine to sentence-transformers' vectors); a graph
that fails its check is kept, so the check is not redone, but refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

from ragbound.embedders.graph_build import build_checked, refuse_built
from ragbound.embedders.layout import SentenceLayout
from ragbound.embedders.onnx_runner import OnnxRunner
from ragbound.embedders.packaged import cache_dir
from ragbound.embedders.sentence import model_revision, sentence_transformers
from ragbound.errors import InputError

# Vectors of the two runtimes must agree to this cosine on every probe text (measured on the
# bundled MiniLM and MPNet: 1 - 1e-7 or closer); a knowledge base indexed with one runtime is
# searched with the other only because of this check.
MIN_COSINE = 1 - 1e-5

# Short, long (truncated at max_seq_length), punctuation, numbers, non-Latin and empty texts.
PROBE = (
    "What does a p-value below alpha mean for a retrieval query?",
    "How do I kill a Python process that hangs?",
    "BM25 weighs a term by its inverse document frequency.",
    "Café, naïve, résumé: accents survive tokenisation; 東京 and Москва do too.",
    "",
    "A",
    "The knowledge base holds 12,345 chunks of 200 words with a 40-word overlap. " * 30,
    "tripwire | forbidden | request -> rejected; score=0.83 (k=32)",
)
_VERDICT = "verified.json"


def exported_model(folder: Path, layout: SentenceLayout) -> Path:
    """The verified ONNX graph of ``folder``, made on first use (built from the weights when
    the folder has reference vectors, else exported with torch)."""
    target = cache_dir() / "onnx" / export_key(folder)
    if not (target / _VERDICT).is_file():
        _export_into(target, folder, layout)
    verdict = json.loads((target / _VERDICT).read_text(encoding="utf-8"))
    refuse_built(verdict, folder)
    if verdict["min_cosine"] < MIN_COSINE:
        maker = "built from the weights" if verdict.get("built_by") == "weights" else "exported"
        raise InputError(
            f"the ONNX graph of {folder} ({maker}) does not reproduce torch (smallest cosine "
            f"{verdict['min_cosine']:.7f} < {MIN_COSINE}); use RAGBOUND_EMBED_RUNTIME=torch"
        )
    return target / "model.onnx"


def graph_maker(folder: Path, layout: SentenceLayout) -> str:
    """What made ``folder``'s verified graph: ``weights`` or ``torch`` (made if needed)."""
    exported_model(folder, layout)
    verdict = export_verdict(folder) or {}
    return verdict.get("built_by", "torch")  # a verdict older than built_by: an export


def export_verdict(folder: Path) -> dict | None:
    """The recorded check of ``folder``'s export (None before it was exported)."""
    path = cache_dir() / "onnx" / export_key(folder) / _VERDICT
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def export_key(folder: Path) -> str:
    """Changes with the model's files (configs, and each weight file's size and mtime: a
    fine-tuned copy has the base model's configs and sizes) and with its place."""
    digest = hashlib.sha256(f"{folder.resolve()}|{model_revision(folder)}".encode())
    for path in sorted(folder.rglob("*")):
        if path.suffix in (".safetensors", ".bin"):
            digest.update(f"{path.name}|{path.stat().st_mtime_ns}".encode())
    return f"{folder.name}-{digest.hexdigest()[:16]}"


def _export_into(target: Path, folder: Path, layout: SentenceLayout) -> None:
    if sys.stderr.isatty():
        print(f"ragbound: making {folder.name}'s ONNX graph once, in {target}", file=sys.stderr)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        verdict = make_graph(Path(tmp) / "model.onnx", folder, layout)
        (Path(tmp) / _VERDICT).write_text(json.dumps(verdict, indent=2), encoding="utf-8")
        # another process may have finished first: its export is as good as this one
        with contextlib.suppress(OSError):
            os.replace(tmp, target)
            Path(tmp).mkdir()  # TemporaryDirectory removes what it made


def make_graph(model: Path, folder: Path, layout: SentenceLayout) -> dict:
    """Write ``folder``'s graph to ``model``, built from the weights where a reference allows
    the check, else exported with torch; the verdict."""
    built = build_checked(model, folder, layout)
    if built is not None:
        return built
    torch_vectors = export_graph(folder, model)
    return {"built_by": "torch", **verify(model, folder, layout, torch_vectors)}


def export_graph(folder: Path, out: Path) -> np.ndarray:
    """Write the transformer of ``folder`` as an ONNX graph (token states out); return
    sentence-transformers' vectors of :data:`PROBE` for the check."""
    module = sentence_transformers(
        f"{folder.name} has no ONNX graph yet and only the bundled models' (minilm, mpnet) are "
        "built without torch: exporting it"
    )
    import torch

    model = module.SentenceTransformer(str(folder), device="cpu")
    transformer = model[0].auto_model.eval()
    names = list(model[0].tokenizer.model_input_names)
    sample = model[0].tokenizer(
        ["a short one", "and a longer second text"], padding=True, return_tensors="pt"
    )
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _token_states(transformer, names),
            tuple(sample[name] for name in names),
            str(out),
            input_names=names,
            output_names=["token_states"],
            dynamic_axes={name: {0: "batch", 1: "tokens"} for name in [*names, "token_states"]},
            opset_version=17,
            dynamo=False,
        )
    return model.encode(list(PROBE), normalize_embeddings=True, convert_to_numpy=True)


def _token_states(transformer, names: list[str]):
    """The transformer called by keyword (its positional order changes between versions),
    returning the token states."""
    import torch

    class TokenStates(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, *inputs):
            return self.transformer(**dict(zip(names, inputs, strict=True))).last_hidden_state

    return TokenStates()


def verify(model: Path, folder: Path, layout: SentenceLayout, torch_vectors: np.ndarray) -> dict:
    """Compare the graph's vectors of :data:`PROBE` with torch's: the smallest cosine."""
    import onnxruntime
    import torch

    runner = OnnxRunner(model, folder, layout)
    ours = np.vstack([runner.run([text]) for text in PROBE])
    unit = torch_vectors / np.maximum(np.linalg.norm(torch_vectors, axis=1, keepdims=True), 1e-12)
    ours = ours / np.maximum(np.linalg.norm(ours, axis=1, keepdims=True), 1e-12)
    return {
        "min_cosine": float(np.min(np.sum(unit * ours, axis=1))),
        "probe_texts": len(PROBE),
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
    }
