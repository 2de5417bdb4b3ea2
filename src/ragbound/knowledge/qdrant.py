"""The Qdrant backing: a knowledge base whose vectors stay in a Qdrant collection.

``ragbound attach qdrant://HOST:PORT/COLLECTION --out KB`` attaches a collection on a Qdrant
server; ``ragbound attach 'qdrant+path:///ABS/FOLDER?collection=NAME' --out KB`` one in a
local folder written by qdrant-client's embedded mode (``QdrantClient(path=...)``; a relative
``qdrant+path:FOLDER?collection=NAME`` is made absolute). Nothing is copied into ragbound's
vectors and nothing is re-embedded, except a small sample checked at attach: its texts are
re-embedded and must point the same way as their stored vectors (the embedder made them).

Kind ``qdrant-attached``: chunk units only, float32, never indexed or added to by ragbound.
The points' ids and payload texts are read once at attach (scrolled page by page) and kept as
the knowledge base's chunk file, in Qdrant's id order; a search maps the point ids Qdrant
returns to those rows. Loading counts the points again (with the filter): when the count
changed (points added or deleted since attach), loading refuses and asks to attach again, so a
calibration never runs over rows it did not see. A point edited in place without changing the
count is not detected.

Scores are converted to similarities (higher = closer) at the boundary: ``Cosine`` gives the
cosine similarity and ``Dot`` the dot product (both kept), ``Euclid`` the L2 distance ``d``,
turned into ``1 - d**2 / 2``, which is the cosine only between unit vectors (attach checks the
sampled stored and re-embedded vectors are unit-norm); ``Manhattan`` is refused. Attach also
checks, on the sample, that the converted scores equal the similarity computed here.

A server searches exactly by default (``exact=True`` search params, quantization ignored);
``search="hnsw"`` uses the collection's HNSW index (approximate; ``hnsw_ef`` and the graph's
``m`` are recorded by :meth:`QdrantStore.describe`, and so by every calibration). The embedded
mode always searches by brute force (exact). Embedded Qdrant lets one client open a folder:
ragbound shares one client per folder in a process (:func:`release` closes it), and a folder
another process holds is refused with a message.
"""

from __future__ import annotations

import atexit
import hashlib
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

from ragbound.artifacts import sha256_text, utc_now
from ragbound.corpus import Chunk, ChunkingParams
from ragbound.corpus.units import Granularity
from ragbound.embedders import canonical_spec, is_lexical, load_dense_embedder
from ragbound.embedders.base import Similarity
from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge.backing import ATTACHED, Capabilities, Contents, Loaded, refuse_missing
from ragbound.knowledge.local import SegmentBacking
from ragbound.knowledge.manifest import BackingRecord, KBManifest, Segment, corpus_hash
from ragbound.knowledge.postgres import DEFAULT_SAMPLE, SAME_EMBEDDER_COSINE, row_cosines
from ragbound.knowledge.tripwire_records import TRIPWIRE_FLAG
from ragbound.stores import Hits, Retriever, SearchInfo
from ragbound.stores.base import query_vectors

SERVER_SCHEME, FOLDER_SCHEME = "qdrant", "qdrant+path"
DEFAULT_PORT = 6333  # Qdrant's REST port
# LangChain's QdrantVectorStore keeps the text under page_content (LlamaIndex: --text-field text)
DEFAULT_TEXT_FIELD = "page_content"
PAGE = 256  # points per scroll request at attach
NESTED_METADATA = "metadata"  # where LangChain's Qdrant store keeps a document's metadata
TIMEOUT = 10  # seconds a server request may take
UNIT_NORM = 1e-3  # |norm - 1| allowed for Euclid's 1 - d²/2 to be the cosine
SCORE_TOLERANCE = 1e-4  # converted score vs the similarity computed here, on the sample
Distance = Literal["Cosine", "Dot", "Euclid"]
# what each distance's converted score is (Euclid: 1 - d²/2, the cosine of unit vectors)
SIMILARITY: dict[str, Similarity] = {"Cosine": "cosine", "Dot": "dot", "Euclid": "cosine"}

_LOCAL_CLIENTS: dict[str, Any] = {}  # folder -> the one embedded client of this process
_LOCAL_LOCK = threading.Lock()
_SEARCH_LOCK = threading.Lock()  # embedded clients are searched one request at a time


class QdrantLocation(BaseModel):
    """Where an attached collection lives and how it is read and searched.

    A server (``host``, ``port``) or an embedded-mode ``folder`` (absolute), never both.
    ``vector_name`` is None for a collection's single unnamed vector. ``where`` holds
    payload equalities (``KEY=VALUE``, ANDed; a nested key as ``metadata.source``).
    ``hnsw_ef`` and ``m`` are set with ``search="hnsw"`` only.
    """

    model_config = ConfigDict(frozen=True)

    host: str | None = None
    port: int | None = None
    folder: str | None = None
    collection: str
    vector_name: str | None = None
    distance: Distance = "Cosine"
    text_field: str = DEFAULT_TEXT_FIELD
    doc_field: str | None = None
    where: dict[str, str] = {}
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

    @property
    def similarity(self) -> Similarity:
        """What the converted scores are (higher = closer)."""
        return SIMILARITY[self.distance]

    def place(self) -> str:
        """``at HOST:PORT`` or ``in FOLDER``, for messages."""
        return f"at {self.host}:{self.port}" if self.folder is None else f"in {self.folder}"

    def describe(self) -> str:
        """E.g. ``Qdrant collection 'docs' at localhost:6333``, for messages."""
        return f"Qdrant collection {self.collection!r} {self.place()}"

    def filters(self) -> str:
        """``k='v' and ...`` (the ``where`` equalities), for messages."""
        return " and ".join(f"{k}={v!r}" for k, v in sorted(self.where.items()))

    def filtered(self) -> str:
        """`` matching k='v' and ...`` when filtered, else empty (for messages)."""
        return f" matching {self.filters()}" if self.where else ""


class QdrantRecord(BackingRecord):
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
def _qdrant() -> Any:
    try:
        import qdrant_client
    except ImportError:
        raise InputError("qdrant-client is not installed: pip install 'ragbound[qdrant]'") from None
    return qdrant_client


def open_client(location: QdrantLocation) -> Any:
    """A client of the server, or this process's one client of the embedded folder
    (InputError when the folder is missing or another client holds it)."""
    qdrant_client = _qdrant()
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
            "service over HTTP instead: /v1/check, /v1/tripwires), or serve the folder with a "
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
        must.append(flagged(models, present=False))  # a tripwire is never a row
    if not must and not must_not:
        return None
    return models.Filter(must=must or None, must_not=must_not or None)


def flagged(models: Any, *, present: bool) -> Any:
    """The condition "the point is a tripwire" (``present``) or "is not" (a missing, null or
    empty flag), the flag at the payload's top or under ``metadata`` (LangChain's layout)."""
    empty = [
        models.IsEmptyCondition(is_empty=models.PayloadField(key=key))
        for key in (TRIPWIRE_FLAG, f"{NESTED_METADATA}.{TRIPWIRE_FLAG}")
    ]
    if present:
        return models.Filter(should=[models.Filter(must_not=[e]) for e in empty])
    return models.Filter(must=empty)


def _equals(models: Any, key: str, value: str) -> Any:
    """``key`` equals ``value`` as text, or as the integer or boolean it spells."""
    candidates: list[str | int | bool] = [value]
    if re.fullmatch(r"-?\d+", value):
        candidates.append(int(value))
    if value in ("true", "false"):
        candidates.append(value == "true")
    conditions = [
        models.FieldCondition(key=key, match=models.MatchValue(value=v)) for v in candidates
    ]
    return conditions[0] if len(conditions) == 1 else models.Filter(should=conditions)


def payload_value(payload: dict[str, Any] | None, key: str) -> Any:
    """``payload[key]``, a dotted key walking nested objects (``metadata.source``)."""
    if not payload:
        return None
    if key in payload:
        return payload[key]
    value: Any = payload
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def parse_where(items: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` items -> {key: value} (InputError for another shape)."""
    where = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(
                f"filter {item!r} must be KEY=VALUE (for example metadata.source=a.md)"
            )
        where[key.strip()] = value
    return where


# ----------------------------------------------------------------------- the search
def similarities(distance: str, scores: np.ndarray) -> np.ndarray:
    """Qdrant's scores as similarities (higher = closer): Cosine and Dot as they are, Euclid's
    L2 distance d as 1 - d²/2 (the cosine of unit vectors)."""
    scores = np.asarray(scores, dtype=np.float64)
    return 1.0 - scores**2 / 2.0 if distance == "Euclid" else scores


def search_info(location: QdrantLocation) -> SearchInfo:
    """How a :class:`QdrantStore` over ``location`` searches (recorded by calibrations)."""
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
        similarity=location.similarity,
        parameters=parameters,
    )


class QdrantStore:
    """Nearest-neighbour search in a Qdrant collection: a vector
    :class:`~ragbound.stores.Retriever` whose rows are the points read at attach, in order
    (``keys``: each row's point id as text). One request per batch of queries."""

    query_kind = "vector"

    def __init__(self, location: QdrantLocation, keys: Sequence[str], dimension: int):
        self.location = location
        self._keys = list(keys)
        self._rows = {key: row for row, key in enumerate(self._keys)}
        self._dimension = dimension
        self._client: Any = None

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def similarity(self) -> Similarity:
        return self.location.similarity

    def describe(self) -> SearchInfo:
        """Exact, or HNSW with ``hnsw_ef`` and ``m``; the distance and server or embedded."""
        return search_info(self.location)

    def search(self, queries: np.ndarray, k: int) -> Hits:
        """Top-k rows per query vector, similarity descending, ties by the lower row."""
        queries = query_vectors(queries, k, len(self), self._dimension)
        if self._client is None:
            self._client = open_client(self.location)
        if self.location.folder is None:
            found = query_batch(self._client, self.location, queries, k)
        else:
            with _SEARCH_LOCK:  # the embedded client is plain Python, not made for threads
                found = query_batch(self._client, self.location, queries, k)
        return self._hits(found, k)

    def _hits(self, found: list[list[tuple[str, float]]], k: int) -> Hits:
        if any(len(points) != k for points in found):
            raise ArtifactError(
                f"{self.location.describe()} returned fewer than k={k} points: points were "
                "deleted since it was attached; attach it again (and calibrate again)"
            )
        rows = np.array([[self._row_of(key) for key, _ in points] for points in found])
        scores = np.array([[score for _, score in points] for points in found])
        sims = similarities(self.location.distance, scores).reshape(rows.shape)
        order = np.lexsort((rows, -sims), axis=1)  # ties: the lower row first
        return Hits(
            similarities=np.take_along_axis(sims, order, axis=1).astype(np.float32),
            indices=np.take_along_axis(rows, order, axis=1).astype(np.int64),
        )

    def _row_of(self, key: str) -> int:
        row = self._rows.get(key)
        if row is None:
            raise ArtifactError(
                f"{self.location.describe()} holds a point {key!r} added since it was attached: "
                "attach it again (and calibrate again)"
            )
        return row


def query_batch(
    client: Any,
    location: QdrantLocation,
    queries: np.ndarray,
    limit: int,
    only: Sequence[Any] | None = None,
) -> list[list[tuple[str, float]]]:
    """Each query's ``limit`` nearest points as (point id as text, Qdrant's score), in one
    request; ``only`` restricts the search to those point ids."""
    from qdrant_client import models

    flt = _filter(location)
    if only is not None:
        must = [models.HasIdCondition(has_id=list(only)), *([flt] if flt is not None else [])]
        flt = models.Filter(must=must)
    requests = [
        models.QueryRequest(
            query=query.tolist(),
            using=location.vector_name,
            filter=flt,
            limit=limit,
            params=_search_params(models, location),
            with_payload=False,
        )
        for query in queries
    ]
    with qdrant_errors(location):
        answers = client.query_batch_points(location.collection, requests=requests)
    return [[(str(p.id), float(p.score)) for p in answer.points] for answer in answers]


def _search_params(models: Any, location: QdrantLocation) -> Any:
    if location.folder is not None:
        return None  # embedded: always brute force (it warns about search params)
    if location.search == "exact":
        return models.SearchParams(
            exact=True, quantization=models.QuantizationSearchParams(ignore=True)
        )
    return models.SearchParams(hnsw_ef=location.hnsw_ef)


# ----------------------------------------------------------------------- the backing
class QdrantAttachedBacking(SegmentBacking):
    """Another application's Qdrant collection, searched in place; its point ids and texts
    are kept as the knowledge base's chunk file."""

    kind: ClassVar[str] = "qdrant-attached"
    describe_kind: ClassVar[str] = "a Qdrant collection another application owns"
    capabilities: ClassVar[Capabilities] = ATTACHED.model_copy(
        update={"tripwires": "ragbound.knowledge.qdrant_tripwires.QdrantTripwires"}
    )
    holds_vectors: ClassVar[bool] = False

    def __init__(self, location: QdrantLocation):
        self.location = location
        self.keys: list[str] | None = None  # each row's point id, in row order, once read

    @staticmethod
    def check_url(url: str) -> None:
        """InputError unless ``url`` is a qdrant:// or qdrant+path: URL ``attach`` takes."""
        parse_url(url)

    @classmethod
    def from_record(cls, record: BackingRecord) -> QdrantAttachedBacking:
        return cls(QdrantRecord.model_validate(record.model_dump()).location)

    @property
    def record(self) -> BackingRecord:
        return QdrantRecord(kind=self.kind, location=self.location)

    def check_target(self, out: Path, *, overwrite: bool, delete_other_files: bool) -> None:
        refuse_missing(self, index=True)

    def retriever(self, contents: Contents, granularity: tuple[Granularity, ...]) -> Retriever:
        """Search in the collection, over the points read at attach."""
        if granularity != ("chunk",):
            refuse_missing(self, units=granularity)
        if self.keys is None:
            self.keys = [chunk.metadata["point_id"] for chunk in contents.chunks]
        return QdrantStore(self.location, self.keys, contents.dimension)

    def describe(self, contents: Contents, granularity: tuple[Granularity, ...]) -> SearchInfo:
        if granularity != ("chunk",):
            refuse_missing(self, units=granularity)
        return search_info(self.location)

    def load(self, root: Path, manifest: KBManifest) -> Loaded:
        """The chunk file read at attach, after checking the collection still holds as many
        points (ArtifactError asking to attach again otherwise)."""
        loaded = super().load(root, manifest)
        client = open_client(self.location)
        with qdrant_errors(self.location):
            _require_collection(client, self.location)
            now = _count(client, self.location, _filter(self.location))
        if now != manifest.n_chunks:
            raise ArtifactError(
                f"{self.location.describe()} holds {now} points{self.location.filtered()} with "
                f"text, {manifest.n_chunks} when it was attached: attach it again (ragbound "
                "attach ... --out NEW_FOLDER), then calibrate again"
            )
        return loaded

    @classmethod
    def attach(
        cls,
        url: str,
        *,
        embedder: str = "minilm",
        text_field: str = DEFAULT_TEXT_FIELD,
        doc_field: str | None = None,
        vector_name: str | None = None,
        where: Sequence[str] = (),
        sample: int = DEFAULT_SAMPLE,
        search: str = "exact",
        hnsw_ef: int | None = None,
    ) -> tuple[QdrantAttachedBacking, KBManifest, list[Chunk], Any]:
        """Check a Qdrant collection and describe it: its vectors (name, dimension, distance),
        its points' texts (payload ``text_field``; ``doc_field`` the document id, default the
        point id) and, on ``sample`` re-embedded texts, that ``embedder`` made the vectors.

        ``where`` holds ``KEY=VALUE`` payload filters (ANDed; the value matches as text, or as
        the integer or boolean it spells). ``search`` "exact" (default) or "hnsw" (a server:
        the collection's HNSW index, ``hnsw_ef`` candidates, default its ``ef_construct``).
        Returns the backing, a manifest, the points as chunks and the loaded embedder.
        """
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
        spec = canonical_spec(embedder)
        if is_lexical(spec):
            raise InputError("attach needs the dense embedder that made the stored vectors")
        dense = load_dense_embedder(spec)
        location = QdrantLocation(
            **place,
            vector_name=vector_name,
            text_field=text_field,
            doc_field=doc_field,
            where=parse_where(where),
            search=search,  # type: ignore[arg-type]
            hnsw_ef=hnsw_ef,
        )
        client = open_client(location)
        with qdrant_errors(location):
            location = _checked_vectors(client, location, dense.info.dimension, dense.info.name)
            ids, chunks = _read_points(client, location)
            _check_sample(client, location, dense, ids, sample)
        backing = cls(location)
        backing.keys = [chunk.metadata["point_id"] for chunk in chunks]
        return backing, _manifest(spec, dense.info, location, chunks), chunks, dense


def _manifest(spec: str, info: Any, location: QdrantLocation, chunks: list[Chunk]) -> KBManifest:
    now = utc_now()
    documents = len({chunk.doc_id for chunk in chunks})
    segment = Segment(
        name="attached",
        n_chunks=len(chunks),
        n_documents=documents,
        sources=[location.collection],
        created_at=now,
    )
    return KBManifest(
        created_at=now,
        updated_at=now,
        embedder_spec=spec,
        embedder=info,
        chunking=ChunkingParams(),
        text_field=location.text_field,
        id_field=location.doc_field,
        n_chunks=len(chunks),
        n_documents=documents,
        corpus_hash=corpus_hash(chunks),
        segments=[segment],
        backing=QdrantRecord(kind="qdrant-attached", location=location),
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


def _checked_vectors(
    client: Any, location: QdrantLocation, dimension: int, embedder: str
) -> QdrantLocation:
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
            f"{embedder} makes {dimension}-dimensional ones: pass the embedder that filled it"
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


def _count(client: Any, location: QdrantLocation, flt: Any) -> int:
    return client.count(location.collection, count_filter=flt, exact=True).count


def _read_points(client: Any, location: QdrantLocation) -> tuple[dict[str, Any], list[Chunk]]:
    """Every point with text (and matching ``where``) as a chunk, in Qdrant's id order;
    also each point id's original value (int or UUID) by its text form."""
    _require_points(client, location)
    ids: dict[str, Any] = {}
    chunks: list[Chunk] = []
    offset = None
    while True:
        points, offset = client.scroll(
            location.collection,
            scroll_filter=_filter(location),
            limit=PAGE,
            offset=offset,
            with_payload=True,
            with_vectors=False,
        )
        for point in points:
            ids[str(point.id)] = point.id
            chunks.append(_chunk(point, location))
        if offset is None:
            return ids, chunks


def _require_points(client: Any, location: QdrantLocation) -> None:
    """InputError for an empty collection, a filter matching nothing, or no text under the
    text field (naming the payload keys found)."""
    if not _count(client, location, None):
        raise InputError(f"{location.describe()} is empty: it has no points to attach")
    where = _filter(location, with_text=False)
    if where is not None and not _count(client, location, where):
        raise InputError(f"no point of {location.describe()} matches --where {location.filters()}")
    if _count(client, location, _filter(location)):
        return
    points, _ = client.scroll(location.collection, scroll_filter=where, limit=16, with_payload=True)
    keys = sorted({key for point in points for key in (point.payload or {})})
    raise InputError(
        f"no point of {location.describe()} has text under the payload field "
        f"{location.text_field!r} (keys found: {', '.join(keys) or 'none'}): name the field "
        "with --text-field"
    )


def _chunk(point: Any, location: QdrantLocation) -> Chunk:
    """One point as a chunk: id = hash of point id and text, doc_id = ``doc_field`` or the
    point id; the point id is kept in ``metadata["point_id"]``."""
    key = str(point.id)
    text = payload_value(point.payload, location.text_field)
    if not isinstance(text, str):
        raise InputError(
            f"point {key} of {location.describe()} holds {type(text).__name__} under "
            f"{location.text_field!r}, not text: name the text field with --text-field"
        )
    doc = payload_value(point.payload, location.doc_field) if location.doc_field else None
    return Chunk(
        id=sha256_text(key, text)[:16],
        text=text,
        doc_id=key if doc is None else str(doc),
        source=location.collection,
        position=0,
        n_words=len(text.split()),
        metadata={"point_id": key},
    )


def _check_sample(
    client: Any, location: QdrantLocation, dense: Any, ids: dict[str, Any], sample: int
) -> None:
    """Re-embed ``sample`` stored texts (a fixed pseudo-random choice: ordered by the md5 of
    their point id) and refuse unless their stored vectors point the same way, Euclid's
    vectors are unit-norm, and Qdrant's converted scores equal the similarity computed here."""
    chosen = sorted(ids, key=lambda key: hashlib.md5(key.encode()).hexdigest())[:sample]
    records = client.retrieve(
        location.collection,
        ids=[ids[key] for key in chosen],
        with_payload=True,
        with_vectors=[location.vector_name] if location.vector_name else True,
    )
    stored = np.array([vector_of(record, location) for record in records], dtype=np.float64)
    texts = [payload_value(record.payload, location.text_field) for record in records]
    fresh = np.asarray(dense.encode(texts), dtype=np.float64)
    median = float(np.median(row_cosines(stored, fresh)))
    if median < SAME_EMBEDDER_COSINE:
        raise InputError(
            f"the vectors in {location.describe()} were not made by the embedder "
            f"{dense.info.name}: re-embedding {len(records)} stored texts gives a median cosine "
            f"of {median:.3f} with the stored vectors (at least {SAME_EMBEDDER_COSINE} "
            "expected); pass the embedder that filled the collection with --embedder"
        )
    if location.distance == "Euclid":
        _require_unit(stored, fresh, location)
    _check_scores(client, location, [ids[str(r.id)] for r in records], stored, fresh)


def vector_of(record: Any, location: QdrantLocation) -> list[float]:
    vector = record.vector
    return vector[location.vector_name] if isinstance(vector, dict) else vector


def _require_unit(stored: np.ndarray, fresh: np.ndarray, location: QdrantLocation) -> None:
    """Euclid's 1 - d²/2 is the cosine only between unit vectors, stored and queried."""
    for what, vectors in (("stored", stored), ("re-embedded", fresh)):
        worst = float(np.max(np.abs(np.linalg.norm(vectors, axis=1) - 1.0)))
        if worst > UNIT_NORM:
            raise InputError(
                f"{location.describe()} scores by Euclid distance, which ragbound turns into a "
                f"similarity (1 - d²/2) only for unit vectors, but the {what} vectors' norms "
                f"differ from 1 by up to {worst:.3g}: use a Cosine or Dot collection"
            )


def _check_scores(
    client: Any,
    location: QdrantLocation,
    point_ids: list[Any],
    stored: np.ndarray,
    fresh: np.ndarray,
) -> None:
    """Search the sample with its re-embedded vectors; each converted score must equal the
    similarity computed here (cosine, or the dot product)."""
    if location.similarity == "cosine":
        stored = stored / np.linalg.norm(stored, axis=1, keepdims=True)
        fresh = fresh / np.linalg.norm(fresh, axis=1, keepdims=True)
    expected = fresh @ stored.T
    column = {str(point_id): i for i, point_id in enumerate(point_ids)}
    found = query_batch(client, location, fresh.astype(np.float32), len(point_ids), point_ids)
    worst = 0.0
    for row, points in enumerate(found):
        for key, score in points:
            converted = float(similarities(location.distance, np.array(score)))
            worst = max(worst, abs(converted - expected[row, column[key]]))
    if worst > SCORE_TOLERANCE:
        raise InputError(
            f"{location.describe()}: Qdrant's {location.distance} scores, converted, differ from "
            f"the {location.similarity} of the same vectors by up to {worst:.3g}: ragbound "
            "cannot use its scores as similarities"
        )
