"""Every backing, by its manifest ``kind``, and the names and URLs that choose one.

A new backing joins in one file: a class with the :class:`~ragbound.knowledge.backing.Backing`
members (and ``from_record`` when its record holds settings), listed by its dotted path in
:data:`BACKINGS` and, if users name it by URL, in :data:`URL_SCHEMES`. A new attached store
(:mod:`ragbound.knowledge.attached`) is one line of :data:`ATTACHED_STORES`. The contract test
(``tests/knowledge/test_backing_contract.py``) runs over every entry. A backing's module is
imported when its class is first asked for (a local knowledge base never imports the
PostgreSQL, Chroma or Qdrant code), so no backing module needs this one or the knowledge base.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge.backing import Backing, EmbedderKind
from ragbound.knowledge.manifest import BackingEntry
from ragbound.stores.hnsw import HnswParams


def imported(path: str) -> Any:
    """The object at a dotted path (``package.module.Name``), importing its module."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


class Classes(Mapping[str, type]):
    """Classes by name, each imported from its dotted path on first use."""

    def __init__(self, paths: Mapping[str, str]):
        self.paths = dict(paths)

    def __getitem__(self, name: str) -> type:
        return imported(self.paths[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)


_K = "ragbound.knowledge"
_POSTGRES_OWNED = f"{_K}.postgres.PostgresOwnedBacking"
# the stores ragbound attaches to as they are (``attach URL``), one line each: the kind, the
# class (with a classmethod ``attach(url, **options)`` returning (backing, manifest, chunks,
# embedder), ``locate`` and ``check_url``) and the URL schemes that choose it
ATTACHED_STORES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("postgres-attached", f"{_K}.postgres.PostgresAttachedBacking", ("postgresql", "postgres")),
    ("chroma-attached", f"{_K}.chroma.ChromaAttachedBacking", ("chroma",)),
    ("qdrant-attached", f"{_K}.qdrant.QdrantAttachedBacking", ("qdrant", "qdrant+path")),
    ("lancedb-attached", f"{_K}.lancedb.LanceAttachedBacking", ("lancedb",)),
)

BACKINGS: Mapping[str, type] = Classes(
    {
        "exact": f"{_K}.local.ExactBacking",
        "bm25": f"{_K}.local.Bm25Backing",
        "hnsw": f"{_K}.local.HnswBacking",
        "postgres": _POSTGRES_OWNED,
        **{kind: path for kind, path, _ in ATTACHED_STORES},
    }
)
# URL schemes of the stores ragbound indexes into (``index --backing URL``); each class has a
# classmethod ``for_url(url, out)``
URL_SCHEMES: Mapping[str, type] = Classes(
    {"postgresql": _POSTGRES_OWNED, "postgres": _POSTGRES_OWNED}
)
ATTACH_SCHEMES: Mapping[str, type] = Classes(
    {scheme: path for _, path, schemes in ATTACHED_STORES for scheme in schemes}
)


def attaching(url: str) -> type:
    """The attached backing for a store URL (InputError naming the known schemes)."""
    kind = ATTACH_SCHEMES.get(urlsplit(url).scheme)
    if kind is None:
        known = ", ".join(f"{s}://" for s in ATTACH_SCHEMES)
        raise InputError(f"attach {url!r}: not a store ragbound attaches to (known: {known})")
    return kind


def attach_options(url: str, **given: object) -> dict[str, object]:
    """The options given (those not None) for attaching the store at ``url``; InputError
    naming, as command-line flags, an option its backing does not take or one it needs that
    is missing. The options taken are the keyword parameters of the backing's ``attach``
    (embedder, sample) and ``locate`` (the store's own)."""
    backing = attaching(url)
    accepted = {
        name: parameter
        for method in (backing.attach, backing.locate)  # type: ignore[attr-defined]
        for name, parameter in inspect.signature(method).parameters.items()
        if parameter.kind is not parameter.VAR_KEYWORD
    }
    options = {name: value for name, value in given.items() if value is not None}
    scheme = url.split(":", 1)[0]
    foreign = [name for name in options if name not in accepted]
    if foreign:
        raise InputError(f"{_flags(foreign)}: not an option of {scheme} stores")
    needed = [
        name
        for name, parameter in accepted.items()
        if parameter.kind is parameter.KEYWORD_ONLY
        and parameter.default is parameter.empty
        and name not in options
    ]
    if needed:
        raise InputError(f"attaching a {scheme} store needs {_flags(needed)}")
    return options


def _flags(names: list[str]) -> str:
    """Option names as the command line spells them: ``--text-column, --where``."""
    return ", ".join("--" + name.replace("_", "-") for name in names)


def backing_of(record: BackingEntry) -> Backing:
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
        return BACKINGS["bm25"]()
    return BACKINGS["exact"]().searched_with(hnsw)


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
        raise InputError(
            f"--backing {store!r}: not a backing ragbound indexes into (known: {known})"
        )
    if hnsw is not None:
        raise InputError(
            "--search hnsw builds a local graph; a PostgreSQL knowledge base uses pgvector's "
            "HNSW index: add search=hnsw&ef_search=N to the --backing URL"
        )
    return kind.for_url(store, out)  # type: ignore[attr-defined]
