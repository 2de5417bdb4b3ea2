"""The Qdrant backing (kind ``qdrant-attached``): another application's collection on a
Qdrant server or in an embedded-mode folder, searched in place through
:mod:`ragbound.knowledge.attached` (docs/stores.md).

Similarities (higher = closer): ``Cosine`` and ``Dot`` as Qdrant scores them, ``Euclid``'s
L2 distance d as 1 - d²/2 (the cosine of unit vectors). Embedded Qdrant lets one client open a
folder: this process shares one client per folder (:func:`release` closes it).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

import numpy as np
from pydantic import model_validator

from ragbound.embedders.base import Similarity
from ragbound.errors import InputError
from ragbound.knowledge.attached import (
    LLAMAINDEX_NODE,
    NESTED_METADATA,
    Access,
    AttachedBacking,
    AttachedLocation,
    Found,
    Rows,
    Scalar,
    client_library,
    field_value,
    parse_filters,
    spellings,
    text_field_of,
    text_of,
)
from ragbound.knowledge.backing import ATTACHED, Capabilities
from ragbound.knowledge.manifest import BackingEntry
from ragbound.knowledge.tripwire_flags import TRIPWIRE_FLAG
from ragbound.stores import SearchInfo

SERVER_SCHEME, FOLDER_SCHEME = "qdrant", "qdrant+path"
DEFAULT_PORT = 6333  # Qdrant's REST port
PAGE = 256  # points per scroll request
TIMEOUT = 10  # seconds a server request may take
Distance = Literal["Cosine", "Dot", "Euclid"]
# what each distance's converted score is (Euclid: 1 - d²/2, the cosine of unit vectors)
SIMILARITY: dict[str, Similarity] = {"Cosine": "cosine", "Dot": "dot", "Euclid": "cosine"}

_LOCAL_CLIENTS: dict[str, Any] = {}  # folder -> the one embedded client of this process
_LOCAL_LOCK = threading.Lock()
_SEARCH_LOCK = threading.Lock()  # embedded clients are searched one request at a time


class QdrantLocation(AttachedLocation):
    """Where an attached collection lives and how it is read and searched.

    A server (``host``, ``port``) or an embedded-mode ``folder`` (absolute), never both.
    ``vector_name`` is None for a collection's single unnamed vector; ``text_field`` the
    payload key of the texts (a nested key as ``metadata.text``; ``_node_content``:
    LlamaIndex's node JSON), None until attach finds it. ``hnsw_ef`` and ``m`` are set with
    ``search="hnsw"`` only.
    """

    host: str | None = None
    port: int | None = None
    folder: str | None = None
    collection: str
    vector_name: str | None = None
    distance: Distance = "Cosine"
    text_field: str | None = None
    search: Literal["exact", "hnsw"] = "exact"
    hnsw_ef: int | None = None
    m: int | None = None

    @model_validator(mode="after")
    def _one_place(self) -> QdrantLocation:
        if (self.host is None) == (self.folder is None):
            raise ValueError("a Qdrant location is a server (host) or a folder, not both")
        if self.folder is not None and self.search != "exact":
            raise ValueError("an embedded Qdrant folder is searched exactly")
        return self

    def place(self) -> str:
        """``at HOST:PORT`` or ``in FOLDER``, for messages."""
        return f"at {self.host}:{self.port}" if self.folder is None else f"in {self.folder}"

    def describe(self) -> str:
        """E.g. ``Qdrant collection 'docs' at localhost:6333``, for messages."""
        return f"Qdrant collection {self.collection!r} {self.place()}"

    def filters(self) -> str:
        """``k='v' and ...`` (the ``where`` equalities), for messages."""
        return " and ".join(f"{k}={v!r}" for k, v in sorted(self.where.items()))


class QdrantEntry(BackingEntry):
    """The manifest's ``backing`` of an attached Qdrant collection."""

    kind: Literal["qdrant-attached"]
    location: QdrantLocation


def parse_url(url: str) -> dict[str, Any]:
    """``qdrant://HOST[:PORT]/COLLECTION`` -> host, port, collection;
    ``qdrant+path:///ABS/FOLDER?collection=NAME`` -> folder (absolute), collection.
    InputError for any other form."""
    parts = urlsplit(url)
    if parts.scheme == SERVER_SCHEME:
        collection = unquote(parts.path.strip("/"))
        if not parts.hostname or not collection or "/" in collection or parts.query:
            raise InputError(f"{url!r} must be qdrant://HOST:PORT/COLLECTION")
        if parts.username or parts.password:
            raise InputError(f"{url!r}: ragbound records the URL, so it must hold no credentials")
        return {
            "host": parts.hostname,
            "port": parts.port or DEFAULT_PORT,
            "collection": collection,
        }
    if parts.scheme == FOLDER_SCHEME:
        query = dict(parse_qsl(parts.query))
        if (
            parts.netloc
            or not parts.path
            or set(query) != {"collection"}
            or not query["collection"]
        ):
            raise InputError(
                f"{url!r} must be qdrant+path:///ABSOLUTE/FOLDER?collection=NAME "
                "(or qdrant+path:RELATIVE/FOLDER?collection=NAME)"
            )
        folder = Path(unquote(parts.path)).expanduser().absolute()
        return {"folder": str(folder), "collection": query["collection"]}
    raise InputError(f"{url!r} is not a qdrant:// or qdrant+path: URL")


# ---------------------------------------------------------------------------- clients
def open_client(location: QdrantLocation) -> Any:
    """A client of the server, or this process's one client of the embedded folder
    (InputError when the folder is missing or another client holds it)."""
    qdrant_client = client_library("qdrant_client", "qdrant")
    if location.folder is None:
        return qdrant_client.QdrantClient(
            host=location.host, port=location.port, timeout=TIMEOUT, check_compatibility=False
        )
    with _LOCAL_LOCK:
        client = _LOCAL_CLIENTS.get(location.folder)
        if client is None:
            client = _open_folder(qdrant_client, location.folder)
            _LOCAL_CLIENTS[location.folder] = client
        return client


def _open_folder(qdrant_client: Any, folder: str) -> Any:
    if not Path(folder).is_dir():
        raise InputError(f"no Qdrant folder {folder}: give the folder QdrantClient(path=...) used")
    try:
        return qdrant_client.QdrantClient(path=folder)
    except RuntimeError as exc:
        if "already accessed" not in str(exc):
            raise
        raise InputError(
            f"the Qdrant folder {folder} is held by another process (embedded Qdrant lets one "
            "process open a folder: the application writing it, or a ragbound serve of a "
            "knowledge base attached to it): stop it or close its client (ask a running "
            "service over HTTP instead: /v1/decide, /v1/tripwires), or serve the folder with a "
            "Qdrant server and attach qdrant://HOST:PORT/COLLECTION"
        ) from None


def release(folder: str | Path) -> None:
    """Close this process's embedded client of ``folder`` (if open), so another process or
    client can open it; the next search opens it again."""
    with _LOCAL_LOCK:
        client = _LOCAL_CLIENTS.pop(str(Path(folder).absolute()), None)
    if client is not None:
        client.close()


@atexit.register
def _release_all() -> None:
    """Close the embedded clients before the interpreter tears down their modules."""
    for folder in list(_LOCAL_CLIENTS):
        release(folder)


@contextmanager
def qdrant_errors(location: QdrantLocation) -> Iterator[None]:
    """Qdrant's failures as one-line InputErrors naming the collection."""
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    try:
        yield
    except ResponseHandlingException as exc:
        raise InputError(
            f"cannot reach the Qdrant server at {location.host}:{location.port} ({exc}): "
            "is it running?"
        ) from None
    except UnexpectedResponse as exc:
        detail = exc.content.decode(errors="replace")[:200] if exc.content else exc.reason_phrase
        raise InputError(
            f"{location.describe()}: Qdrant answered {exc.status_code}: {detail}"
        ) from None


# ------------------------------------------------------------------- filters and payloads
def _filter(location: QdrantLocation, *, with_text: bool = True) -> Any:
    """The points an attached collection lends: ``where`` equalities, and (``with_text``) a
    non-empty text field and no tripwire flag. None when nothing is filtered."""
    from qdrant_client import models

    must = [_equals(models, key, value) for key, value in sorted(location.where.items())]
    must_not = []
    if with_text:
        must_not = [models.IsEmptyCondition(is_empty=models.PayloadField(key=location.text_field))]
        must.append(tripwire_condition(models, present=False))  # a tripwire is never a row
    if not must and not must_not:
        return None
    return models.Filter(must=must or None, must_not=must_not or None)


def tripwire_condition(models: Any, *, present: bool) -> Any:
    """The condition "the point is a tripwire" (``present``) or "is not" (a missing, null or
    empty flag), the flag at the payload's top or under ``metadata`` (LangChain's layout)."""
    empty = [
        models.IsEmptyCondition(is_empty=models.PayloadField(key=key))
        for key in (TRIPWIRE_FLAG, f"{NESTED_METADATA}.{TRIPWIRE_FLAG}")
    ]
    if present:
        return models.Filter(should=[models.Filter(must_not=[e]) for e in empty])
    return models.Filter(must=empty)


def _equals(models: Any, key: str, value: Scalar) -> Any:
    """``key`` equals ``value`` as text, or as the integer or boolean it spells (Qdrant
    matches no float exactly)."""
    candidates = [v for v in spellings(value) if not isinstance(v, float)]
    conditions = [
        models.FieldCondition(key=key, match=models.MatchValue(value=v)) for v in candidates
    ]
    return conditions[0] if len(conditions) == 1 else models.Filter(should=conditions)


def search_info(location: QdrantLocation) -> SearchInfo:
    """How a search over ``location`` runs (recorded by calibrations)."""
    parameters: dict[str, str | int | float | bool] = {
        "distance": location.distance,
        "mode": "server" if location.folder is None else "embedded (brute force)",
        "method": location.search,
    }
    if location.search == "hnsw":
        parameters |= {"hnsw_ef": location.hnsw_ef or 0, "m": location.m or 0}
    return SearchInfo(
        backend="qdrant",
        exact=location.search == "exact",
        similarity=SIMILARITY[location.distance],
        parameters=parameters,
    )


def query_batch(
    client: Any, location: QdrantLocation, queries: np.ndarray, limit: int
) -> list[list[Found]]:
    """Each query's ``limit`` nearest points (point id as text, Qdrant's score), in one
    request; tripwire points are filtered out."""
    from qdrant_client import models

    requests = [
        models.QueryRequest(
            query=query.tolist(),
            using=location.vector_name,
            filter=_filter(location),
            limit=limit,
            params=_search_params(models, location),
            with_payload=False,
        )
        for query in queries
    ]
    answers = client.query_batch_points(location.collection, requests=requests)
    return [[Found(str(p.id), float(p.score)) for p in answer.points] for answer in answers]


def _search_params(models: Any, location: QdrantLocation) -> Any:
    if location.folder is not None:
        return None  # embedded: always brute force (it warns about search params)
    if location.search == "exact":
        return models.SearchParams(
            exact=True, quantization=models.QuantizationSearchParams(ignore=True)
        )
    return models.SearchParams(hnsw_ef=location.hnsw_ef)


def payload_text(payload: dict[str, Any], text_field: str | None) -> Any:
    """The value under the text field (LlamaIndex's node: its text), whatever its type."""
    if text_field is None or text_field == LLAMAINDEX_NODE:
        return text_of(payload, text_field)
    return field_value(payload, text_field)


def vector_of(record: Any, location: QdrantLocation) -> list[float]:
    vector = record.vector
    return vector[location.vector_name] if isinstance(vector, dict) else vector


def wanted_vectors(location: QdrantLocation) -> Any:
    """What ``with_vectors`` asks for to get the location's vector."""
    return [location.vector_name] if location.vector_name else True


def scroll(client: Any, location: QdrantLocation, where: Any, with_vectors: Any) -> Iterator[Any]:
    """Every point ``where`` selects, with its payload, PAGE points per request."""
    offset = None
    while True:
        points, offset = client.scroll(
            location.collection,
            scroll_filter=where,
            limit=PAGE,
            offset=offset,
            with_payload=True,
            with_vectors=with_vectors,
        )
        yield from points
        if offset is None:
            return


# ------------------------------------------------------------------------- the access
class QdrantAccess(Access):
    """A Qdrant collection on a server or in an embedded folder."""

    location: QdrantLocation

    def __init__(self, location: QdrantLocation):
        super().__init__(location)
        self._client: Any = None
        self._ids: dict[str, Any] = {}  # each point id's own value (int or UUID) by its text

    def errors(self) -> Any:
        return qdrant_errors(self.location)

    @property
    def client(self) -> Any:
        """The server's client, kept; a folder's, this process's one (reopened after a
        :func:`release`)."""
        if self.location.folder is not None:
            return open_client(self.location)
        if self._client is None:
            self._client = open_client(self.location)
        return self._client

    def settle(self, dimension: int) -> QdrantLocation:
        """The vector name, distance (and HNSW's m, ef) and text field settled, after
        checking the collection, its vectors' dimension and that points match."""
        location = _checked_vectors(self.client, self.location, dimension)
        location = location.model_copy(update={"text_field": self._text_field(location)})
        if not self._count(_filter(location)):
            raise InputError(
                f"no point of {location.describe()} has text under the payload field "
                f"{location.text_field!r}{location.filtered()} (keys found: "
                f"{self._keys(location)}): name the field with --text-field"
            )
        return location

    def _sample(self, location: QdrantLocation) -> list[Any]:
        """A few points the ``where`` filters select, with their payloads."""
        where = _filter(location, with_text=False)
        return self.client.scroll(
            location.collection, scroll_filter=where, limit=16, with_payload=True
        )[0]

    def _keys(self, location: QdrantLocation) -> str:
        """The payload keys of a few points the filters select, for messages."""
        points = self._sample(location)
        return ", ".join(sorted({key for p in points for key in (p.payload or {})})) or "none"

    def _text_field(self, location: QdrantLocation) -> str:
        if not self._count(None):
            raise InputError(f"{location.describe()} is empty: it has no points to attach")
        where = _filter(location, with_text=False)
        if where is not None and not self._count(where):
            raise InputError(
                f"no point of {location.describe()} matches --where {location.filters()}"
            )
        if location.text_field is not None:
            return location.text_field
        found = text_field_of([point.payload or {} for point in self._sample(location)])
        if found is None:
            raise InputError(
                f"no point of {location.describe()} has text where LangChain or LlamaIndex put "
                f"it (keys found: {self._keys(location)}): name the field with --text-field"
            )
        return found

    def _count(self, flt: Any) -> int:
        return self.client.count(self.location.collection, count_filter=flt, exact=True).count

    def reopen(self) -> QdrantLocation:
        _require_collection(self.client, self.location)
        return self.location

    def read(self) -> Rows:
        """Every point with text (and matching ``where``), in Qdrant's id order."""
        rows, self._ids = Rows(), {}
        for point in scroll(self.client, self.location, _filter(self.location), False):
            self._ids[str(point.id)] = point.id
            payload = point.payload or {}
            text = payload_text(payload, self.location.text_field)
            if text is not None and not isinstance(text, str):
                raise InputError(
                    f"point {point.id} of {self.location.describe()} holds "
                    f"{type(text).__name__} under {self.location.text_field!r}, not text: "
                    "name the text field with --text-field"
                )
            rows.add(str(point.id), text, payload)
        return rows

    def vectors(self, keys: Sequence[str]) -> np.ndarray:
        records = self.client.retrieve(
            self.location.collection,
            ids=[self._ids.get(key, key) for key in keys],
            with_payload=False,
            with_vectors=wanted_vectors(self.location),
        )
        found = {str(record.id): vector_of(record, self.location) for record in records}
        return np.array([found[key] for key in keys], dtype=np.float64)

    def query(self, vectors: np.ndarray, depth: int) -> list[list[Found]]:
        if self.location.folder is None:
            return query_batch(self.client, self.location, vectors, depth)
        with _SEARCH_LOCK:  # the embedded client is plain Python, not made for threads
            return query_batch(self.client, self.location, vectors, depth)

    def similarities(self, scores: np.ndarray) -> np.ndarray:
        """Cosine and Dot as they are, Euclid's L2 distance d as 1 - d²/2 (the cosine of unit
        vectors)."""
        scores = np.asarray(scores, dtype=np.float64)
        return 1.0 - scores**2 / 2.0 if self.location.distance == "Euclid" else scores

    def search_info(self, similarity: Similarity) -> SearchInfo:
        return search_info(self.location)

    def similarity(self, embedder: Similarity) -> Similarity:
        return SIMILARITY[self.location.distance]


class QdrantAttachedBacking(AttachedBacking):
    """Another application's Qdrant collection (``attach qdrant://...``), searched in place."""

    kind: ClassVar[str] = "qdrant-attached"
    describe_kind: ClassVar[str] = "a Qdrant collection another application owns"
    capabilities: ClassVar[Capabilities] = ATTACHED.model_copy(
        update={"tripwires": "ragbound.knowledge.qdrant_tripwires.QdrantTripwires"}
    )
    entry_type = QdrantEntry
    access_type = QdrantAccess

    @classmethod
    def locate(
        cls,
        url: str,
        *,
        text_field: str | None = None,
        doc_field: str | None = None,
        vector_name: str | None = None,
        where: Sequence[str] = (),
        search: str = "exact",
        hnsw_ef: int | None = None,
    ) -> QdrantLocation:
        """``text_field``: the payload key of the texts (default: found where LangChain or
        LlamaIndex put them); ``doc_field`` the document id (default the point id);
        ``where`` ``KEY=VALUE`` payload filters (ANDed; the value matches as text, or as the
        integer or boolean it spells); ``search`` "exact" (default) or "hnsw" (a server: the
        collection's HNSW index, ``hnsw_ef`` candidates, default its ``ef_construct``)."""
        if search not in ("exact", "hnsw"):
            raise InputError(f"search must be exact or hnsw, not {search!r}")
        place = parse_url(url)
        if search == "hnsw" and "folder" in place:
            raise InputError(
                "an embedded Qdrant folder is always searched by brute force: --search hnsw "
                "applies to a server (qdrant://HOST:PORT/COLLECTION)"
            )
        if hnsw_ef is not None and search != "hnsw":
            raise InputError("--hnsw-ef applies to --search hnsw only")
        return QdrantLocation(
            **place,
            vector_name=vector_name,
            text_field=text_field,
            doc_field=doc_field,
            where=parse_filters(where),
            search=search,  # type: ignore[arg-type]
            hnsw_ef=hnsw_ef,
        )


# ---------------------------------------------------------------- checks at attach
def _require_collection(client: Any, location: QdrantLocation) -> None:
    if client.collection_exists(location.collection):
        return
    names = sorted(c.name for c in client.get_collections().collections)
    known = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "") if names else "none"
    raise InputError(
        f"no Qdrant collection {location.collection!r} {location.place()} (collections: {known})"
    )


def _checked_vectors(client: Any, location: QdrantLocation, dimension: int) -> QdrantLocation:
    """The location with the vector name, distance (and HNSW's m, ef) settled, after checking
    the collection exists and its vectors have the embedder's dimension."""
    _require_collection(client, location)
    config = client.get_collection(location.collection).config
    name, params = _vector_params(config.params.vectors, location)
    distance = params.distance.value if hasattr(params.distance, "value") else str(params.distance)
    if distance not in SIMILARITY:
        raise InputError(
            f"{location.describe()} scores by {distance} distance, which is no similarity "
            "ragbound can convert exactly (Cosine, Dot, or Euclid over unit vectors)"
        )
    if params.multivector_config is not None:
        raise InputError(
            f"{location.describe()}: multivectors (late interaction) are not supported"
        )
    if params.size != dimension:
        raise InputError(
            f"{location.describe()} holds {params.size}-dimensional vectors but the embedder "
            f"makes {dimension}-dimensional ones: pass the embedder that filled it"
        )
    update: dict[str, Any] = {"vector_name": name, "distance": distance}
    if location.search == "hnsw":
        update |= _hnsw(config.hnsw_config, params.hnsw_config, location.hnsw_ef)
    return location.model_copy(update=update)


def _hnsw(collection: Any, vector: Any, hnsw_ef: int | None) -> dict[str, int]:
    """The graph's ``m`` and the ``hnsw_ef`` searches pass (default: ``ef_construct``, what
    Qdrant uses when none is given); the vector's own HNSW settings override the
    collection's."""

    def setting(name: str) -> int:
        own = getattr(vector, name, None) if vector is not None else None
        return int(own if own is not None else getattr(collection, name))

    return {"m": setting("m"), "hnsw_ef": hnsw_ef or setting("ef_construct")}


def _vector_params(vectors: Any, location: QdrantLocation) -> tuple[str | None, Any]:
    """(vector name, its params): the unnamed vector, the one named, or the only one."""
    if not isinstance(vectors, dict):
        if location.vector_name is not None:
            raise InputError(
                f"{location.describe()} has one unnamed vector: leave out --vector-name"
            )
        return None, vectors
    names = ", ".join(sorted(vectors)) or "none"
    if location.vector_name is None and len(vectors) == 1:
        return next(iter(vectors.items()))
    if location.vector_name is None:
        raise InputError(
            f"{location.describe()} has several named vectors ({names}): choose one with "
            "--vector-name"
        )
    if location.vector_name not in vectors:
        raise InputError(
            f"{location.describe()} has no vector named {location.vector_name!r} (dense "
            f"vectors: {names})"
        )
    return location.vector_name, vectors[location.vector_name]
