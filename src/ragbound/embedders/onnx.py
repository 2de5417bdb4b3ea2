"""Sentence embedders run by ONNX Runtime: no torch on the request path.

A bundled model (or any sentence-transformers folder of the plain shape, see
:mod:`ragbound.embedders.layout`) is exported once from its installed weights into the cache
and checked against torch there (:mod:`ragbound.embedders.onnx_export`); this module only
tokenises (``tokenizers``), runs the graph and pools, so a process that embeds with it never
imports torch, transformers or sentence-transformers.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragbound.embedders.base import EmbedderInfo
from ragbound.embedders.layout import SentenceLayout
from ragbound.embedders.sentence import check_model_folder, cpu_threads, model_revision
from ragbound.progress import progress_bar


class OnnxRunner:
    """One exported graph and its tokenizer: texts in, pooled float32 vectors out."""

    def __init__(self, model: Path, folder: Path, layout: SentenceLayout):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.layout = layout
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(layout.max_seq_length)
        self.tokenizer.no_padding()
        options = ort.SessionOptions()
        # 0: ONNX Runtime picks (one per physical core); set_cpu_threads applies to it too
        options.intra_op_num_threads = cpu_threads() or 0
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in self.tokenizer.encode_batch(self._prepared(texts))]

    def run(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts`` as one batch, shape (len(texts), dimension)."""
        encodings = self.tokenizer.encode_batch(self._prepared(texts))
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, e in enumerate(encodings):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = e.attention_mask
            types[row, : len(e.ids)] = e.type_ids
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        hidden = self.session.run(None, {k: v for k, v in feed.items() if k in self.inputs})[0]
        return pooled(hidden, mask, self.layout)

    def _prepared(self, texts: Sequence[str]) -> list[str]:
        return [t.lower() for t in texts] if self.layout.lower_case else list(texts)


def pooled(hidden: np.ndarray, mask: np.ndarray, layout: SentenceLayout) -> np.ndarray:
    """Pool token states (batch, tokens, dim) as sentence-transformers does, padding ignored,
    and L2-normalise (as every local embedder here does)."""
    weights = mask[..., None].astype(np.float32)
    if layout.pooling == "cls":
        vectors = hidden[:, 0]
    elif layout.pooling == "max":
        vectors = np.where(weights > 0, hidden, -1e9).max(axis=1)
    else:
        vectors = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    vectors = vectors.astype(np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


class OnnxEmbedder:
    """A sentence-transformers folder run by ONNX Runtime; vectors are L2-normalised and agree
    with sentence-transformers' to a cosine of at least
    :data:`~ragbound.embedders.onnx_export.MIN_COSINE` (checked when it was exported).

    Its :class:`EmbedderInfo` is the torch embedder's (same name, revision and dimension), so a
    knowledge base indexed with either runtime is searched with the other; ``runtime`` says
    which one embedded.

    Example:
        >>> from ragbound.embedders import load_dense_embedder
        >>> emb = load_dense_embedder("minilm", runtime="onnx")  # doctest: +SKIP
        >>> emb.encode_one("What is BM25?").shape  # doctest: +SKIP
        (1, 384)
    """

    def __init__(self, folder: str | Path, layout: SentenceLayout, *, name: str | None = None):
        self.folder = Path(folder)
        check_model_folder(self.folder)
        self.layout = layout
        self.name = name or self.folder.name
        self._runner: OnnxRunner | None = None
        self._info: EmbedderInfo | None = None

    @property
    def info(self) -> EmbedderInfo:
        if self._info is None:
            self._info = EmbedderInfo(
                name=self.name,
                revision=model_revision(self.folder),
                dimension=self.layout.dimension,
                similarity="cosine",
                kind="dense",
                max_seq_length=self.layout.max_seq_length,
                runtime="onnx",
            )
        return self._info

    def runner(self) -> OnnxRunner:
        if self._runner is None:
            from ragbound.embedders.onnx_export import exported_model

            self._runner = OnnxRunner(
                exported_model(self.folder, self.layout), self.folder, self.layout
            )
        return self._runner

    def encode(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> np.ndarray:
        """Embed texts in batches of similar length (less padding); rows are unit vectors."""
        out = np.zeros((len(texts), self.layout.dimension), dtype=np.float32)
        if not texts:
            return out
        runner = self.runner()
        order = np.argsort(runner.token_counts(texts), kind="stable")
        with progress_bar(len(texts), "embedding", progress and sys.stderr.isatty()) as advance:
            for first in range(0, len(texts), batch_size):
                rows = order[first : first + batch_size]
                out[rows] = runner.run([texts[i] for i in rows])
                advance(len(rows))
        return out

    def encode_one(self, text: str) -> np.ndarray:
        """Embed one query on the request path; shape (1, dimension)."""
        return np.ascontiguousarray(self.runner().run([text]))

    def __getstate__(self) -> dict[str, Any]:
        # sessions do not pickle (Ray workers): each process opens its own
        return {**self.__dict__, "_runner": None}
