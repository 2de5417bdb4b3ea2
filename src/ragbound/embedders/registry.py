"""Turn an ``--embedder`` spec (``minilm``, ``mpnet``, ``bm25``, ``openai:MODEL`` or a folder)
into an embedder."""

from __future__ import annotations

from pathlib import Path

from ragbound.embedders.base import QueryDenseEmbedder
from ragbound.embedders.endpoint import ENDPOINT_PREFIX, OpenAIEmbedder
from ragbound.embedders.packaged import minilm_path, mpnet_path
from ragbound.embedders.sentence import SentenceTransformerEmbedder
from ragbound.errors import InputError

DEFAULT_EMBEDDER = "minilm"
NAMED_EMBEDDERS = ("minilm", "mpnet", "bm25")


def is_lexical(spec: str) -> bool:
    """True for the BM25 retriever, which scores texts directly and has no vectors."""
    return spec == "bm25"


def is_endpoint(spec: str) -> bool:
    """True for ``openai:MODEL``: a model behind an OpenAI-compatible ``/embeddings`` server."""
    return spec.startswith(ENDPOINT_PREFIX)


def load_dense_embedder(spec: str) -> QueryDenseEmbedder:
    """A dense embedder for ``minilm``, ``mpnet``, ``openai:MODEL`` (the server named by
    ``$RAGBOUND_EMBED_BASE_URL`` or ``$OPENAI_BASE_URL``) or a local sentence-transformers
    folder."""
    if is_endpoint(spec):
        return OpenAIEmbedder(spec.removeprefix(ENDPOINT_PREFIX))
    if spec == "minilm":
        return SentenceTransformerEmbedder(minilm_path(), name="all-MiniLM-L6-v2")
    if spec == "mpnet":
        return SentenceTransformerEmbedder(mpnet_path(), name="all-mpnet-base-v2")
    path = Path(spec).expanduser()
    if not path.exists():
        raise InputError(
            f"unknown embedder {spec!r}: expected one of {', '.join(NAMED_EMBEDDERS)}, "
            "openai:MODEL or the path of a local sentence-transformers model folder"
        )
    return SentenceTransformerEmbedder(path)


def canonical_spec(spec: str) -> str:
    """The spec as recorded in a manifest: names and ``openai:MODEL`` stay, paths become
    absolute."""
    if spec in NAMED_EMBEDDERS or is_endpoint(spec):
        return spec
    return str(Path(spec).expanduser().resolve())
