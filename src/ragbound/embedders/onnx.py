"""Sentence embedders run by ONNX Runtime: no torch, transformers or sentence-transformers on
the request path. The graph is made once into the cache (:mod:`ragbound.embedders.onnx_export`);
embedding only tokenises, runs it and pools (:mod:`ragbound.embedders.onnx_runner`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragbound.embedders.base import EmbedderInfo
from ragbound.embedders.layout import SentenceLayout
from ragbound.embedders.onnx_export import exported_model, graph_maker
from ragbound.embedders.onnx_runner import OnnxRunner
from ragbound.embedders.sentence import (
    check_model_folder,
    cpu_spinning,
    cpu_threads,
    model_revision,
)
from ragbound.progress import progress_bar


class OnnxEmbedder:
    """A sentence-transformers folder run by ONNX Runtime; vectors are L2-normalised and agree
    with sentence-transformers' to a cosine of at least
    :data:`~ragbound.embedders.onnx_export.MIN_COSINE` (checked when it was exported).

    Its :class:`EmbedderInfo` is the torch embedder's (same name, revision and dimension), so a
    knowledge base indexed with either runtime is searched with the other; ``runtime`` says
    which one embedded and ``onnx_graph`` what made the graph (reading it makes the graph).
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
                onnx_graph=graph_maker(self.folder, self.layout),
            )
        return self._info

    def runner(self) -> OnnxRunner:
        """The session, opened again when :func:`set_cpu_threads` changed the thread count
        (a service loads its gate before it applies ``--threads``) or
        :func:`set_cpu_spinning` the spinning since it was opened."""
        runner = self._runner
        if runner is None or (runner.threads, runner.spinning) != (cpu_threads(), cpu_spinning()):
            model = exported_model(self.folder, self.layout)
            self._runner = OnnxRunner(model, self.folder, self.layout)
        return self._runner

    def encode(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> np.ndarray:
        """Embed texts in batches of similar length (less padding); rows are unit vectors."""
        out = np.zeros((len(texts), self.layout.dimension), dtype=np.float32)
        if not texts:
            return out
        runner = self.runner()
        if len(texts) <= batch_size:  # one batch (the request path): no length sort needed
            return np.ascontiguousarray(runner.run(list(texts)))
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
