"""Turn an ``--embedder`` spec (``minilm``, ``mpnet``, ``bm25``, ``openai:MODEL`` or a folder)
into an embedder."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from ragbound.embedders.base import ENDPOINT_PREFIX, QueryDenseEmbedder
from ragbound.embedders.layout import read_layout
from ragbound.embedders.onnx import OnnxEmbedder
from ragbound.embedders.onnx_export import exported_model
from ragbound.embedders.packaged import minilm_path, mpnet_path
from ragbound.embedders.sentence import TORCH_EXTRA, SentenceTransformerEmbedder
from ragbound.errors import InputError

DEFAULT_EMBEDDER = "minilm"
NAMED_EMBEDDERS = ("minilm", "mpnet", "bm25")
# auto: ONNX Runtime where its export reproduces torch (checked once per model), else torch
RUNTIMES = ("auto", "onnx", "torch")
RUNTIME_ENV = "RAGBOUND_EMBED_RUNTIME"


def is_lexical(spec: str) -> bool:
    """True for the BM25 retriever, which scores texts directly and has no vectors."""
    return spec == "bm25"


def is_endpoint(spec: str) -> bool:
    """True for ``openai:MODEL``: a model behind an OpenAI-compatible ``/embeddings`` server."""
    return spec.startswith(ENDPOINT_PREFIX)


def load_dense_embedder(spec: str, *, runtime: str | None = None) -> QueryDenseEmbedder:
    """A dense embedder for ``minilm``, ``mpnet``, ``openai:MODEL`` (the server named by
    ``$RAGBOUND_EMBED_BASE_URL`` or ``$OPENAI_BASE_URL``) or a local sentence-transformers
    folder. A local model runs on ``runtime`` (``auto``, ``onnx`` or ``torch``; default
    ``$RAGBOUND_EMBED_RUNTIME``, else ``auto``)."""
    if is_endpoint(spec):
        from ragbound.embedders.endpoint import OpenAIEmbedder  # httpx: only for a server

        return OpenAIEmbedder(spec.removeprefix(ENDPOINT_PREFIX))
    if spec == "minilm":
        return local_embedder(minilm_path(), "all-MiniLM-L6-v2", runtime)
    if spec == "mpnet":
        return local_embedder(mpnet_path(), "all-mpnet-base-v2", runtime)
    path = Path(spec).expanduser()
    if not path.exists():
        raise InputError(
            f"unknown embedder {spec!r}: expected one of {', '.join(NAMED_EMBEDDERS)}, "
            "openai:MODEL or the path of a local sentence-transformers model folder"
        )
    return local_embedder(path, None, runtime)


def chosen_runtime(runtime: str | None = None) -> str:
    """``runtime``, else ``$RAGBOUND_EMBED_RUNTIME``, else ``auto``; checked."""
    chosen = runtime or os.environ.get(RUNTIME_ENV) or "auto"
    if chosen not in RUNTIMES:
        raise InputError(f"embedding runtime {chosen!r}: expected one of {', '.join(RUNTIMES)}")
    return chosen


def local_embedder(folder: Path, name: str | None, runtime: str | None) -> QueryDenseEmbedder:
    """The folder on ONNX Runtime when asked or (auto) when its export reproduces torch."""
    chosen = chosen_runtime(runtime)
    if chosen == "torch":
        return SentenceTransformerEmbedder(folder, name=name)
    layout = read_layout(folder)
    why = _why_not_onnx(folder, layout)
    if why is None and layout is not None:
        embedder = OnnxEmbedder(folder, layout, name=name)
        if chosen == "onnx":
            return embedder
        try:
            exported_model(folder, layout)  # exports and checks once per model, then cached
            return embedder
        except InputError as exc:
            why = str(exc)
    if chosen == "onnx":
        raise InputError(f"embedding runtime onnx: {why}")
    if importlib.util.find_spec("sentence_transformers") is None:
        if TORCH_EXTRA in (why or ""):
            raise InputError(why)
        raise InputError(f"{folder.name} cannot run on ONNX Runtime ({why}): {TORCH_EXTRA}")
    if why and sys.stderr.isatty():
        print(f"ragbound: embedding with torch ({why})", file=sys.stderr)
    return SentenceTransformerEmbedder(folder, name=name)


def _why_not_onnx(folder: Path, layout: object) -> str | None:
    if importlib.util.find_spec("onnxruntime") is None:
        return "onnxruntime is not installed"
    if layout is None:
        return f"{folder} is not a transformer followed by one pooling"
    return None


def canonical_spec(spec: str) -> str:
    """The spec as recorded in a manifest: names and ``openai:MODEL`` stay, paths become
    absolute."""
    if spec in NAMED_EMBEDDERS or is_endpoint(spec):
        return spec
    return str(Path(spec).expanduser().resolve())
