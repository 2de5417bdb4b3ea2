"""The Chroma backing (kind ``chroma-attached``): another application's collection on
Chroma's server, read in place through :mod:`ragbound.knowledge.attached` (docs/stores.md).

Chroma answers distances d; similarity (higher = closer) = 1 - d for ``cosine`` and ``ip``,
1 - d/2 for ``l2`` (squared Euclidean, the cosine only for unit vectors). Searches run in
Chroma's HNSW graph (approximate).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Literal
from urllib.parse import parse_qsl, urlsplit

import numpy as np
from pydantic import Field

from ragbound.embedders.base import Similarity
from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge.attached import (
    Access,
    AttachedBacking,
    AttachedLocation,
    Found,
    Rows,
    Scalar,
    client_library,
    first_line,
    flagged,
    parse_filters,
    spellings,
    text_of,
)
from ragbound.knowledge.backing import ATTACHED, Capabilities
from ragbound.knowledge.manifest import BackingEntry
from ragbound.knowledge.tripwire_flags import TRIPWIRE_FLAG
from ragbound.stores import SearchInfo

Space = Literal["l2", "cosine", "ip"]
SCHEME = "chroma"
DEFAULT_PORT = 8000
PAGE = 1000  # records per get() while reading the collection
# what the HNSW configuration of a collection records, by ragbound's parameter name
_HNSW_PARAMETERS = {
    "ef_search": "ef_search",
    "m": "max_neighbors",
    "ef_construction": "ef_construction",
}


class ChromaLocation(AttachedLocation):
    """Where an attached collection lives: ``tenant`` and ``database`` are None for Chroma's
    defaults; ``space`` the collection's distance; ``hnsw`` its HNSW parameters when attached
    or loaded (ef_search, m, ef_construction)."""

    host: str
    port: int
    collection: str
    tenant: str | None = None
    database: str | None = None
    space: Space = "l2"
    hnsw: dict[str, int] = Field(default_factory=dict)

    def describe(self) -> str:
        """``Chroma collection 'docs' at host:port`` (with tenant and database if set)."""
        scope = "/".join(part for part in (self.tenant, self.database) if part)
        inside = f" ({scope})" if scope else ""
        return f"Chroma collection {self.collection!r} at {self.host}:{self.port}{inside}"

    def filter(self) -> dict[str, Any] | None:
        """The ``where`` Chroma takes: None, one ``$eq``, or an ``$and`` of them."""
        return _all([{field: {"$eq": value}} for field, value in sorted(self.where.items())])


def _all(terms: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else {"$and": terms}


class ChromaEntry(BackingEntry):
    """The manifest's ``backing`` of an attached Chroma collection."""

    kind: Literal["chroma-attached"]
    location: ChromaLocation


def parse_chroma_url(url: str) -> dict[str, Any]:
    """``chroma://HOST[:PORT]/COLLECTION[?tenant=T&database=D]`` -> a location's fields (port
    8000 by default). InputError for another scheme, a missing collection, a password or an
    unknown parameter."""
    parts = urlsplit(url)
    shape = "chroma://HOST:PORT/COLLECTION"
    if parts.scheme != SCHEME or not parts.hostname:
        raise InputError(f"{url!r} is not a {shape} URL")
    if parts.username or parts.password:
        raise InputError(f"{url!r}: a Chroma URL holds no user or password ({shape})")
    collection = parts.path.strip("/")
    if not collection or "/" in collection:
        raise InputError(f"{url!r} names no collection: use {shape}")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise InputError(f"{url!r}: the port is not a number ({shape})") from None
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - {"tenant", "database"})
    if unknown:
        raise InputError(f"{url!r}: unknown parameter {unknown[0]!r} (known: tenant, database)")
    return {
        "host": parts.hostname,
        "port": port,
        "collection": collection,
        "tenant": options.get("tenant") or None,
        "database": options.get("database") or None,
    }


def connect(location: ChromaLocation) -> Any:
    """A client of the location's server (InputError naming host:port when it does not
    answer). Telemetry is off."""
    chromadb = client_library("chromadb", "chroma")
    from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT, Settings

    try:
        return chromadb.HttpClient(
            host=location.host,
            port=location.port,
            settings=Settings(anonymized_telemetry=False),
            tenant=location.tenant or DEFAULT_TENANT,
            database=location.database or DEFAULT_DATABASE,
        )
    except Exception as exc:  # chromadb raises ValueError or httpx errors by version
        raise InputError(
            f"cannot reach the Chroma server at {location.host}:{location.port}: "
            f"{first_line(exc)} (is `chroma run` serving there?)"
        ) from exc


@contextmanager
def chroma_errors(location: ChromaLocation) -> Iterator[None]:
    """Turn a failed request into an ArtifactError that names ``location``."""
    client_library("chromadb", "chroma")  # InputError naming the extra when it is missing
    import httpx
    from chromadb.errors import ChromaError

    try:
        yield
    except httpx.TransportError as exc:
        raise ArtifactError(f"lost the connection to {location.describe()}: {exc}") from exc
    except ChromaError as exc:
        raise ArtifactError(f"{location.describe()}: {first_line(exc)}") from exc


def open_collection(location: ChromaLocation) -> Any:
    """The named collection (InputError listing a few the server has when it is missing)."""
    from chromadb.errors import NotFoundError

    client = connect(location)
    try:
        return client.get_collection(location.collection)
    except NotFoundError:
        names = sorted(c if isinstance(c, str) else c.name for c in client.list_collections())
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "") or "none"
        raise InputError(
            f"{location.describe()} does not exist (collections there: {shown})"
        ) from None


def index_settings(collection: Any) -> tuple[Space, dict[str, int]]:
    """The collection's distance space and HNSW parameters (from its configuration, or
    the ``hnsw:*`` metadata of collections made before configurations)."""
    configuration = getattr(collection, "configuration", None) or {}
    hnsw = configuration.get("hnsw") or configuration.get("spann") or {}
    metadata = collection.metadata or {}
    space = hnsw.get("space") or metadata.get("hnsw:space") or "l2"
    if space not in ("l2", "cosine", "ip"):
        raise InputError(f"collection {collection.name!r} uses the unknown space {space!r}")
    parameters = {
        ours: int(value)
        for ours, theirs in _HNSW_PARAMETERS.items()
        if (value := hnsw.get(theirs, metadata.get(f"hnsw:{ours}"))) is not None
    }
    return space, parameters


def pages(collection: Any, where: dict[str, Any] | None, include: list[str]) -> Iterator[dict]:
    """``collection.get`` page by page (PAGE records each)."""
    offset = 0
    while True:
        page = collection.get(where=where, limit=PAGE, offset=offset, include=include)
        yield page
        if len(page["ids"]) < PAGE:
            return
        offset += PAGE


class ChromaAccess(Access):
    """A Chroma collection on its server, through chromadb's HTTP client."""

    location: ChromaLocation

    def __init__(self, location: ChromaLocation):
        super().__init__(location)
        self._collection: Any = None
        self._topics: list[str] = []  # of the tripwire records seen at the last read

    def errors(self) -> Any:
        return chroma_errors(self.location)

    def _open(self) -> Any:
        if self._collection is None:
            self._collection = open_collection(self.location)
        return self._collection

    def settle(self, dimension: int) -> ChromaLocation:
        collection = self._open()
        space, hnsw = index_settings(collection)
        location = self.location.model_copy(update={"space": space, "hnsw": hnsw})
        if not collection.count():
            raise InputError(f"{location.describe()} is empty: nothing to attach")
        typed = {field: self._stored_value(field, value) for field, value in location.where.items()}
        location = location.model_copy(update={"where": typed})
        if typed and not collection.get(where=location.filter(), limit=1, include=[])["ids"]:
            raise InputError(f"{location.describe()} has no records{location.filtered()} (--where)")
        return location

    def _stored_value(self, field: str, value: Scalar) -> Scalar:
        for candidate in spellings(value):
            if self._open().get(where={field: {"$eq": candidate}}, limit=1, include=[])["ids"]:
                return candidate
        raise InputError(
            f"{self.location.describe()} has no records with metadata {field}={value!r}"
        )

    def reopen(self) -> ChromaLocation:
        space, hnsw = index_settings(self._open())
        if space != self.location.space:
            raise ArtifactError(
                f"{self.location.describe()} now uses the {space} space, not the "
                f"{self.location.space} it was attached with: attach it again"
            )
        return self.location.model_copy(update={"hnsw": hnsw})

    def read(self) -> Rows:
        """Every record the filter selects, in id order (documents and metadata)."""
        records = []
        for page in pages(self._open(), self.location.filter(), ["documents", "metadatas"]):
            n = len(page["ids"])
            documents, metadatas = page["documents"] or [None] * n, page["metadatas"] or [None] * n
            records += zip(page["ids"], documents, metadatas, strict=True)
        rows = Rows()
        for key, text, metadata in sorted(records, key=lambda record: record[0]):
            rows.add(key, text or text_of(metadata or {}, None), metadata)
        self._topics = sorted({str(m[TRIPWIRE_FLAG]) for m in rows.metadatas if flagged(m)})
        return rows

    def vectors(self, keys: Any) -> np.ndarray:
        got = self._open().get(ids=list(keys), include=["embeddings"])
        where = {key: i for i, key in enumerate(got["ids"])}
        return np.asarray(got["embeddings"], dtype=np.float32)[[where[key] for key in keys]]

    def query(self, vectors: np.ndarray, depth: int) -> list[list[Found]]:
        without = [{TRIPWIRE_FLAG: {"$nin": self._topics}}] if self._topics else []
        found = self._open().query(
            query_embeddings=vectors,
            n_results=depth,
            where=_all([*([self.location.filter()] if self.location.where else []), *without]),
            include=["distances", "metadatas"],
        )
        return [
            [
                Found(key, float(d), flagged(m))
                for key, d, m in zip(ids, distances, metadatas, strict=True)
            ]
            for ids, distances, metadatas in zip(
                found["ids"], found["distances"], found["metadatas"] or [], strict=True
            )
        ]

    def similarities(self, scores: np.ndarray) -> np.ndarray:
        """1 - d/2 for l2 (squared Euclidean), else 1 - d."""
        return 1.0 - scores / 2.0 if self.location.space == "l2" else 1.0 - scores

    def search_info(self, similarity: Similarity) -> SearchInfo:
        return SearchInfo(
            backend="chroma",
            exact=False,
            similarity=similarity,
            parameters={"space": self.location.space, **self.location.hnsw},
        )


class ChromaAttachedBacking(AttachedBacking):
    """Another application's Chroma collection (``attach chroma://...``), read in place."""

    kind: ClassVar[str] = "chroma-attached"
    describe_kind: ClassVar[str] = "a Chroma collection another application owns"
    capabilities: ClassVar[Capabilities] = ATTACHED.model_copy(
        update={"tripwires": "ragbound.knowledge.chroma_tripwires.ChromaTripwires"}
    )
    entry_type = ChromaEntry
    access_type = ChromaAccess
    text_field: ClassVar[str] = "document"

    @classmethod
    def locate(cls, url: str, *, where: Any = (), doc_field: str | None = None) -> ChromaLocation:
        """``where``: ``FIELD=VALUE`` metadata filters (ANDed; a value matches as stored: text,
        or the number or bool it spells); ``doc_field``: the metadata key of document ids
        (default: each record's id)."""
        return ChromaLocation(
            **parse_chroma_url(url), where=parse_filters(where or ()), doc_field=doc_field or None
        )
