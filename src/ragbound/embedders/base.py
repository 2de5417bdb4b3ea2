"""What every retriever front-end declares, and the dense-embedder protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict

ENDPOINT_PREFIX = "openai:"
"""How an ``--embedder`` spec names a model behind an OpenAI-compatible server."""

Similarity = Literal["cosine", "dot", "bm25"]


class EmbedderInfo(BaseModel):
    """Identity of an embedder, recorded in every knowledge-base manifest.

    ``similarity`` says how the store scores a chunk against a query; for every kind the
    score is a *similarity* (higher = closer). ``kind`` is ``dense`` (fixed-size vectors,
    searched by inner product) or ``lexical`` (BM25 over the chunk texts, no vectors).
    ``dimension`` is 0 for lexical retrievers.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    revision: str
    dimension: int
    similarity: Similarity
    kind: Literal["dense", "lexical"]
    max_seq_length: int | None = None
    # what computed the vectors of a local model ("torch" or "onnx", whose vectors agree to a
    # tested tolerance, so it is not part of the identity); None for servers, BM25 and
    # manifests written before it was recorded
    runtime: Literal["torch", "onnx"] | None = None
    # what made the ONNX graph of an onnx runtime: "weights" (built from them without torch)
    # or "torch" (exported); not part of the identity either; None for other runtimes
    onnx_graph: Literal["weights", "torch"] | None = None

    def identity(self) -> str:
        """The parts that change what a similarity means (used in fingerprints)."""
        return f"{self.kind}|{self.name}|{self.revision}|{self.dimension}|{self.similarity}"


@runtime_checkable
class DenseEmbedder(Protocol):
    """Turns texts into float32 vectors; queries and chunks go through the same encoder."""

    @property
    def info(self) -> EmbedderInfo: ...

    def encode(
        self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False
    ) -> np.ndarray:
        """Return a C-contiguous float32 array of shape (len(texts), dimension)."""
        ...


@runtime_checkable
class QueryDenseEmbedder(DenseEmbedder, Protocol):
    """A dense embedder with a single-query path for the request path: what an
    ``--embedder`` spec loads (a local model or an OpenAI-compatible server)."""

    def encode_one(self, text: str) -> np.ndarray:
        """Return a C-contiguous float32 array of shape (1, dimension)."""
        ...
