"""Every backing, by its manifest ``kind``, and the names and URLs that choose one.

A new backing joins in one file: a class with the :class:`~ragbound.knowledge.backing.Backing`
members (and ``from_record`` when its record holds settings), listed in :data:`BACKINGS`
and, if users name it by URL, in :data:`URL_SCHEMES`. The contract test
(``tests/knowledge/test_backing_contract.py``) runs over every entry.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge.backing import Backing, EmbedderKind
from ragbound.knowledge.chroma import ChromaAttachedBacking
from ragbound.knowledge.local import Bm25Backing, ExactBacking, HnswBacking
from ragbound.knowledge.manifest import BackingRecord
from ragbound.knowledge.postgres import (
    PostgresAttachedBacking,
    PostgresOwnedBacking,
    owned_location,
)
from ragbound.knowledge.qdrant import QdrantAttachedBacking
from ragbound.stores.hnsw import HnswParams

BACKINGS: dict[str, type] = {
    backing.kind: backing
    for backing in (
        ExactBacking,
        Bm25Backing,
        HnswBacking,
        PostgresOwnedBacking,
        PostgresAttachedBacking,
        ChromaAttachedBacking,
        QdrantAttachedBacking,
    )
}
# URL schemes of the stores ragbound indexes into (``index --store URL``)
URL_SCHEMES: dict[str, type] = {
    "postgresql": PostgresOwnedBacking,
    "postgres": PostgresOwnedBacking,
}


# URL schemes of the stores ragbound attaches to as they are (``attach URL``); each class has
# a classmethod ``attach(url, **options)`` returning (backing, manifest, chunks, embedder)
# and a static ``check_url(url)`` (ValueError for a URL it cannot take)
ATTACH_SCHEMES: dict[str, type] = {
    "postgresql": PostgresAttachedBacking,
    "postgres": PostgresAttachedBacking,
    "chroma": ChromaAttachedBacking,
    "qdrant": QdrantAttachedBacking,
    "qdrant+path": QdrantAttachedBacking,
}


def attaching(url: str) -> type:
    """The attached backing for a store URL (InputError naming the known schemes)."""
    kind = ATTACH_SCHEMES.get(urlsplit(url).scheme)
    if kind is None:
        known = ", ".join(f"{s}://" for s in ATTACH_SCHEMES)
        raise InputError(f"attach {url!r}: not a store ragbound attaches to (known: {known})")
    return kind


def backing_of(record: BackingRecord) -> Backing:
    """The backing a manifest's ``backing`` entry names (ArtifactError for an unknown kind)."""
    kind = BACKINGS.get(record.kind)
    if kind is None:
        raise ArtifactError(
            f"unknown knowledge-base backing {record.kind!r} (known: {', '.join(BACKINGS)}): "
            "was it made by a newer ragbound?"
        )
    from_record = getattr(kind, "from_record", None)
    return from_record(record) if from_record is not None else kind()


def local_backing(embedder: EmbedderKind, hnsw: HnswParams | None = None) -> Backing:
    """The local backing for an embedder kind: BM25 for lexical, else exact or ``hnsw``."""
    if embedder == "lexical":
        if hnsw is not None:
            raise InputError("an HNSW graph indexes vectors: use a dense embedder, not bm25")
        return Bm25Backing()
    return ExactBacking() if hnsw is None else HnswBacking().searched_with(hnsw)


def backing_for(
    store: str | None,
    *,
    out: Path,
    embedder: EmbedderKind,
    hnsw: HnswParams | None = None,
) -> Backing:
    """The backing ``index`` builds: local (``store`` None or ``local``) or a store URL
    (``postgresql://...``). Refuses (InputError) an unknown scheme and a local HNSW graph
    asked for with a store URL."""
    if store is None or store == "local":
        return local_backing(embedder, hnsw)
    scheme = urlsplit(store).scheme
    kind = URL_SCHEMES.get(scheme)
    if kind is None:
        known = ", ".join(f"{s}://" for s in URL_SCHEMES)
        raise InputError(f"--store {store!r}: not a store ragbound indexes into (known: {known})")
    if hnsw is not None:
        raise InputError(
            "--search hnsw builds a local graph; a PostgreSQL knowledge base uses pgvector's "
            "HNSW index: add search=hnsw&ef_search=N to the --store URL"
        )
    return kind(owned_location(store, out))
