"""Turn an ``--embedder`` spec (``minilm``, ``mpnet``, ``bm25`` or a folder) into an embedder."""

from __future__ import annotations

from pathlib import Path

from ragbound.embedders.packaged import minilm_path, mpnet_path
from ragbound.embedders.sentence import SentenceTransformerEmbedder
from ragbound.errors import InputError

DEFAULT_EMBEDDER = "minilm"
NAMED_EMBEDDERS = ("minilm", "mpnet", "bm25")


def is_lexical(spec: str) -> bool:
    """True for the BM25 retriever, which scores texts directly and has no vectors."""
    return spec == "bm25"


def load_dense_embedder(spec: str) -> SentenceTransformerEmbedder:
    """A dense embedder for ``minilm``, ``mpnet`` or a local sentence-transformers folder."""
    if spec == "minilm":
        return SentenceTransformerEmbedder(minilm_path(), name="all-MiniLM-L6-v2")
    if spec == "mpnet":
        return SentenceTransformerEmbedder(mpnet_path(), name="all-mpnet-base-v2")
    path = Path(spec).expanduser()
    if not path.exists():
        raise InputError(
            f"unknown embedder {spec!r}: expected one of {', '.join(NAMED_EMBEDDERS)} "
            "or the path of a local sentence-transformers model folder"
        )
    return SentenceTransformerEmbedder(path)


def canonical_spec(spec: str) -> str:
    """The spec as recorded in a manifest: names stay, paths become absolute."""
    if spec in NAMED_EMBEDDERS:
        return spec
    return str(Path(spec).expanduser().resolve())
