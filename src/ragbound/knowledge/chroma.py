"""The Chroma backing: a knowledge base whose rows live in another application's Chroma
collection (``ragbound attach chroma://HOST:PORT/COLLECTION --embedder SPEC --out KB``).

The collection is used as it is, on Chroma's own server: nothing is copied or re-embedded,
except a sample of its documents that attach re-embeds to check the embedder made the
stored vectors. The knowledge-base folder holds only ``manifest.json`` (plus calibrations
and tripwires); its ``backing`` (kind ``chroma-attached``) names the server, the collection,
the metadata filter, the metadata field of document ids and the collection's distance space.

Chroma answers *distances*; they become similarities (higher = closer) here, exactly:

- ``cosine``: similarity = 1 - d (d = 1 - cosine);
- ``ip``: similarity = 1 - d (Chroma's inner-product distance is 1 - dot);
- ``l2`` (Chroma's default, the *squared* Euclidean distance): similarity = 1 - d / 2,
  which is the dot product only for unit vectors; attach refuses l2 when the sampled stored
  vectors are not unit length (within 1e-3).

Attach also checks, on the sample, that the similarity this formula gives equals the dot
product of the stored vectors (what ragbound's own exact search computes). Searches run in
Chroma's HNSW graph (approximate): its space, ef_search, M and ef_construction are recorded
with every calibration, as for a local HNSW graph.

Rows: every record the filter selects, read (ids, documents, metadata; paged) at attach and
again at each load, in id order. When the application changes its collection, the next load
sees the new rows: the fingerprint changes and calibrations made before refuse to run
(calibrate again). A search that meets a record added after the load is refused (load
again); a collection whose space changed is refused at load (attach again).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import parse_qsl, urlsplit

import numpy as np
from pydantic import BaseModel, ConfigDict

from ragbound.artifacts import sha256_text, utc_now, write_json
from ragbound.corpus import Chunk, ChunkingParams
from ragbound.corpus.units import Granularity, granularity_label
from ragbound.embedders import canonical_spec, is_lexical, load_dense_embedder
from ragbound.embedders.base import Similarity
from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge.backing import ATTACHED, Capabilities, Contents, Loaded, refuse_missing
from ragbound.knowledge.layout import MANIFEST
from ragbound.knowledge.manifest import BackingRecord, KBManifest, corpus_hash
from ragbound.knowledge.postgres import DEFAULT_SAMPLE, SAME_EMBEDDER_COSINE, row_cosines
from ragbound.knowledge.segments import FineUnits, check_new_folder, same_dir
from ragbound.knowledge.tripwire_records import TRIPWIRE_FLAG, is_tripwire
from ragbound.stores import Hits, QueryKind, Retriever, SearchInfo
from ragbound.stores.base import query_vectors

Space = Literal["l2", "cosine", "ip"]
Scalar = str | int | float | bool
SCHEME = "chroma"
DEFAULT_PORT = 8000
PAGE = 1000  # records per get() while reading the collection
UNIT_NORM_TOLERANCE = 1e-3  # |norm - 1| allowed (l2 space, cosine embedders)
FORMULA_TOLERANCE = 1e-3  # |similarity - dot| allowed on the attach sample
FORMULA_QUERIES = 8  # sampled vectors sent as queries to check the formula
# what the HNSW configuration of a collection records, by ragbound's parameter name
_HNSW_PARAMETERS = {
    "ef_search": "ef_search",
    "m": "max_neighbors",
    "ef_construction": "ef_construction",
}


class ChromaLocation(BaseModel):
    """Where an attached collection lives and which of its records are rows.

    ``tenant`` and ``database`` are None for Chroma's defaults; ``where`` holds metadata
    equalities (ANDed, values typed as stored); ``doc_field`` the metadata key of document
    ids (None: a record's id); ``space`` the collection's distance; ``hnsw`` its HNSW
    parameters when attached or loaded (ef_search, m, ef_construction).
    """

    model_config = ConfigDict(frozen=True)

    host: str
    port: int
    collection: str
    tenant: str | None = None
    database: str | None = None
    where: dict[str, Scalar] = {}
    doc_field: str | None = None
    space: Space = "l2"
    hnsw: dict[str, int] = {}

    def describe(self) -> str:
        """``Chroma collection 'docs' at host:port`` (with tenant and database if set)."""
        scope = "/".join(part for part in (self.tenant, self.database) if part)
        inside = f" ({scope})" if scope else ""
        return f"Chroma collection {self.collection!r} at {self.host}:{self.port}{inside}"

    def filter(self) -> dict[str, Any] | None:
        """The ``where`` Chroma takes: None, one ``$eq``, or an ``$and`` of them."""
        terms = [{field: {"$eq": value}} for field, value in sorted(self.where.items())]
        if not terms:
            return None
        return terms[0] if len(terms) == 1 else {"$and": terms}

    def filtered(self) -> str:
        """`` matching a='x' and b=2`` for messages ("" without a filter)."""
        if not self.where:
            return ""
        return " matching " + " and ".join(f"{f}={v!r}" for f, v in sorted(self.where.items()))


class ChromaRecord(BackingRecord):
    """The manifest's ``backing`` of an attached Chroma collection."""

    kind: Literal["chroma-attached"]
    location: ChromaLocation


def parse_chroma_url(url: str) -> ChromaLocation:
    """``chroma://HOST[:PORT]/COLLECTION[?tenant=T&database=D]`` -> a location (port 8000 by
    default). InputError for another scheme, a missing collection, a password or an unknown
    parameter."""
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
    return ChromaLocation(
        host=parts.hostname,
        port=port,
        collection=collection,
        tenant=options.get("tenant") or None,
        database=options.get("database") or None,
    )


def similarities(distances: np.ndarray, space: Space) -> np.ndarray:
    """Chroma distances -> similarities (higher = closer): 1 - d for cosine and ip,
    1 - d/2 for l2 (squared Euclidean; the dot product for unit vectors)."""
    d = np.asarray(distances, dtype=np.float32)
    return 1.0 - d / 2.0 if space == "l2" else 1.0 - d


# ------------------------------------------------------------------------ the server
def _chromadb() -> Any:
    try:
        import chromadb
    except ImportError:
        raise InputError(
            "attaching a Chroma collection needs chromadb: pip install 'ragbound[chroma]'"
        ) from None
    return chromadb


def connect(location: ChromaLocation) -> Any:
    """A client of the location's server (InputError naming host:port when it does not
    answer). Telemetry is off."""
    chromadb = _chromadb()
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
            f"{_first_line(exc)} (is `chroma run` serving there?)"
        ) from exc


@contextmanager
def chroma_errors(location: ChromaLocation) -> Iterator[None]:
    """Turn a failed request into an ArtifactError that names ``location``."""
    _chromadb()  # InputError naming the extra when chromadb is missing
    import httpx
    from chromadb.errors import ChromaError

    try:
        yield
    except httpx.TransportError as exc:
        raise ArtifactError(f"lost the connection to {location.describe()}: {exc}") from exc
    except ChromaError as exc:
        raise ArtifactError(f"{location.describe()}: {_first_line(exc)}") from exc


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).strip().splitlines()[:1]) or type(exc).__name__


def open_collection(client: Any, location: ChromaLocation) -> Any:
    """The named collection (InputError listing a few the server has when it is missing)."""
    from chromadb.errors import NotFoundError

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


# ----------------------------------------------------------------------- the records
def read_rows(
    collection: Any, location: ChromaLocation
) -> tuple[list[str], list[Chunk], list[str]]:
    """(Chroma ids, chunks) of every record the filter selects, in id order, and the topics
    of the tripwire records among them (left out of the rows): chunk id = hash of id and
    text, doc_id = the ``doc_field`` metadata or the id."""
    ids, documents, metadatas = [], [], []
    for page in pages(collection, location.filter(), ["documents", "metadatas"]):
        ids += page["ids"]
        documents += page["documents"] or [None] * len(page["ids"])
        metadatas += page["metadatas"] or [None] * len(page["ids"])
    topics = sorted({str(m[TRIPWIRE_FLAG]) for m in metadatas if is_tripwire(m)})
    kept = [i for i, metadata in enumerate(metadatas) if not is_tripwire(metadata)]
    ids, documents = [ids[i] for i in kept], [documents[i] for i in kept]
    metadatas = [metadatas[i] for i in kept]
    if not ids:
        raise InputError(f"{location.describe()} has no records{location.filtered()}")
    _require_documents(ids, documents, location)
    order = sorted(range(len(ids)), key=ids.__getitem__)
    chunks = [_chunk(ids[i], documents[i], metadatas[i] or {}, location) for i in order]
    return [ids[i] for i in order], chunks, topics


def pages(collection: Any, where: dict[str, Any] | None, include: list[str]) -> Iterator[dict]:
    """``collection.get`` page by page (PAGE records each)."""
    offset = 0
    while True:
        page = collection.get(where=where, limit=PAGE, offset=offset, include=include)
        yield page
        if len(page["ids"]) < PAGE:
            return
        offset += PAGE


def _require_documents(ids: list[str], documents: list[str | None], location: ChromaLocation):
    missing = [key for key, text in zip(ids, documents, strict=True) if not text]
    if missing:
        raise InputError(
            f"{location.describe()}: {len(missing)} of {len(ids)} records have no document "
            f"text (e.g. id {missing[0]!r}); ragbound needs each record's text (the "
            "application must add documents= with its embeddings)"
        )


def _chunk(key: str, text: str, metadata: dict[str, Any], location: ChromaLocation) -> Chunk:
    doc_id = key
    if location.doc_field is not None:
        if metadata.get(location.doc_field) is None:
            raise InputError(
                f"{location.describe()}: record {key!r} has no metadata "
                f"{location.doc_field!r} (--doc-field)"
            )
        doc_id = str(metadata[location.doc_field])
    return Chunk(
        id=sha256_text(key, text)[:16],
        text=text,
        doc_id=doc_id,
        source=location.collection,
        position=0,
        n_words=len(text.split()),
        metadata=dict(metadata),
    )


def typed_where(
    collection: Any, location: ChromaLocation, where: Sequence[str] | Mapping[str, Scalar]
) -> dict[str, Scalar]:
    """``FIELD=VALUE`` filters with each value typed as the collection stores it: the text
    as given, else the int, float or bool it spells, whichever some record holds.
    InputError when no record holds a value, or when no record matches them all."""
    pairs = where.items() if isinstance(where, Mapping) else map(_split_filter, where)
    typed = {field: _stored_value(collection, location, field, v) for field, v in pairs}
    matching = location.model_copy(update={"where": typed})
    if typed and not collection.get(where=matching.filter(), limit=1, include=[])["ids"]:
        raise InputError(f"{location.describe()} has no records{matching.filtered()} (--where)")
    return typed


def _split_filter(text: str) -> tuple[str, str]:
    field, sep, value = text.partition("=")
    if not sep or not field.strip():
        raise InputError(f"filter {text!r} must be FIELD=VALUE (a metadata key and its value)")
    return field.strip(), value


def _stored_value(collection: Any, location: ChromaLocation, field: str, value: Scalar) -> Scalar:
    for candidate in _spellings(value):
        found = collection.get(where={field: {"$eq": candidate}}, limit=1, include=[])
        if found["ids"]:
            return candidate
    raise InputError(f"{location.describe()} has no records with metadata {field}={value!r}")


def _spellings(value: Scalar) -> list[Scalar]:
    """The value, then what its text spells as int, float and bool."""
    if not isinstance(value, str):
        return [value]
    found: list[Scalar] = [value]
    for parse in (int, float):
        with suppress(ValueError):
            found.append(parse(value))
    if value.lower() in ("true", "false"):
        found.append(value.lower() == "true")
    return found


# ------------------------------------------------------------------- attach's checks
def sample_ids(ids: Sequence[str], sample: int) -> list[str]:
    """A fixed pseudo-random choice of ``sample`` ids (ordered by their SHA-256)."""
    return sorted(ids, key=lambda key: hashlib.sha256(key.encode()).hexdigest())[:sample]


def stored_vectors(collection: Any, ids: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """The stored vectors (float32) and documents of ``ids``, in that order."""
    got = collection.get(ids=list(ids), include=["embeddings", "documents"])
    where = {key: i for i, key in enumerate(got["ids"])}
    order = [where[key] for key in ids]
    vectors = np.asarray(got["embeddings"], dtype=np.float32)[order]
    return vectors, [got["documents"][i] for i in order]


def check_sample(
    collection: Any, location: ChromaLocation, dense: Any, ids: Sequence[str], size: int
) -> None:
    """On ``ids``: the dimension, unit norms for l2, the embedder (re-embedded documents
    point the same way), and the distance formula (similarity == dot product)."""
    vectors, documents = stored_vectors(collection, ids)
    _check_dimension(vectors, dense, location)
    _check_unit_norms(vectors, location, dense.info)
    _check_embedder(vectors, dense.encode(documents), dense.info.name, location)
    _check_formula(collection, location, vectors, size)


def _check_dimension(vectors: np.ndarray, dense: Any, location: ChromaLocation) -> None:
    if vectors.shape[1] != dense.info.dimension:
        raise InputError(
            f"{location.describe()} holds {vectors.shape[1]}-dimensional vectors but the "
            f"embedder {dense.info.name} makes {dense.info.dimension}: pass the embedder that "
            "filled the collection with --embedder"
        )


def _check_unit_norms(vectors: np.ndarray, location: ChromaLocation, info: Any) -> None:
    """Unit vectors where the numbers need them: the l2 space (1 - d/2 is the dot product
    only between unit vectors) and a cosine embedder (its similarities are cosines)."""
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
    if np.abs(norms - 1.0).max() <= UNIT_NORM_TOLERANCE:
        return
    found = f"its vectors are not unit length (norms {norms.min():.4g} to {norms.max():.4g})"
    if location.space == "l2":
        raise InputError(
            f"{location.describe()} uses the l2 space but {found}: a squared L2 distance is a "
            "similarity only between unit vectors; use a collection with space cosine or ip"
        )
    if info.similarity == "cosine":
        raise InputError(
            f"{location.describe()}: the embedder {info.name} scores by cosine but {found}: "
            "they were not stored as the embedder makes them (normalized)"
        )


def _check_embedder(
    stored: np.ndarray, fresh: np.ndarray, name: str, location: ChromaLocation
) -> None:
    median = float(np.median(row_cosines(stored, fresh)))
    if median < SAME_EMBEDDER_COSINE:
        raise InputError(
            f"the vectors in {location.describe()} were not made by the embedder {name}: "
            f"re-embedding {len(stored)} stored documents gives a median cosine of "
            f"{median:.3f} with the stored vectors (at least {SAME_EMBEDDER_COSINE} expected); "
            "pass the embedder that filled the collection with --embedder"
        )


def _check_formula(
    collection: Any, location: ChromaLocation, vectors: np.ndarray, size: int
) -> None:
    """Query with sampled stored vectors: the converted distances must equal the dot
    products with the vectors found (what ragbound's exact search would compute)."""
    queries = vectors[:FORMULA_QUERIES]
    found = collection.query(
        query_embeddings=queries,
        n_results=min(size, 4),
        where=location.filter(),
        include=["distances"],
    )
    unique = list(dict.fromkeys(key for row in found["ids"] for key in row))
    hit_vectors, _ = stored_vectors(collection, unique)
    index = {key: i for i, key in enumerate(unique)}
    gaps = [
        abs(float(score) - float(query @ hit_vectors[index[key]]))
        for query, keys, distances in zip(queries, found["ids"], found["distances"], strict=True)
        for key, score in zip(keys, similarities(np.array(distances), location.space), strict=True)
    ]
    if max(gaps) > FORMULA_TOLERANCE:
        raise InputError(
            f"{location.describe()}: its {location.space} distances do not give the dot "
            f"product of the stored vectors (off by up to {max(gaps):.3g}); ragbound needs "
            "unit-length vectors for the cosine and l2 spaces"
        )


# ------------------------------------------------------------------------ the search
class ChromaStore:
    """Nearest-neighbour search in a Chroma collection: a vector
    :class:`~ragbound.stores.Retriever` whose rows are the records ``keys`` lists (Chroma
    ids, in row order). Approximate (Chroma's HNSW graph); similarities from Chroma's
    distances (:func:`similarities`), higher = closer.

    Tripwire records are never rows: the search filters out the ``tripwire_topics`` known
    when loaded, and drops (searching deeper) any flagged record added since."""

    query_kind: QueryKind = "vector"

    def __init__(
        self,
        location: ChromaLocation,
        *,
        keys: Sequence[str],
        dimension: int,
        info: SearchInfo,
        tripwire_topics: Sequence[str] = (),
    ):
        self.location = location
        self._rows = {key: row for row, key in enumerate(keys)}
        self._dimension = dimension
        self._info = info
        self._where = knowledge_filter(location, tripwire_topics)
        self._collection: Any = None

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def similarity(self) -> Similarity:
        return self._info.similarity

    def describe(self) -> SearchInfo:
        return self._info

    def search(self, queries: np.ndarray, k: int) -> Hits:
        """Top-k rows per query vector, similarity descending, ties by the lower row."""
        queries = query_vectors(queries, k, len(self), self._dimension)
        if not len(queries):
            return Hits(np.empty((0, k), np.float32), np.empty((0, k), np.int64))
        depth = k
        while True:
            with chroma_errors(self.location):
                found = self._open().query(
                    query_embeddings=queries,
                    n_results=depth,
                    where=self._where,
                    include=["distances", "metadatas"],
                )
            ids, distances, deeper = _without_tripwires(found, k, depth)
            if not deeper:
                return self._hits(ids, distances, k)
            depth *= 2  # tripwires added since the load took places in the top k

    def _open(self) -> Any:
        if self._collection is None:
            self._collection = open_collection(connect(self.location), self.location)
        return self._collection

    def _hits(self, ids: list[list[str]], distances: list[list[float]], k: int) -> Hits:
        if any(len(row) != k for row in ids):
            raise ArtifactError(f"{self.location.describe()} returned fewer than {k} records")
        unknown = {key for row in ids for key in row} - self._rows.keys()
        if unknown:
            raise ArtifactError(
                f"{self.location.describe()} holds records added after this knowledge base "
                f"was loaded (e.g. {min(unknown)!r}): load it again (then calibrate again)"
            )
        rows = np.array([[self._rows[key] for key in row] for row in ids], dtype=np.int64)
        scores = similarities(np.array(distances), self.location.space)
        order = np.lexsort((rows, -scores), axis=1)
        return Hits(
            similarities=np.take_along_axis(scores, order, axis=1),
            indices=np.take_along_axis(rows, order, axis=1),
        )


def knowledge_filter(location: ChromaLocation, tripwire_topics: Sequence[str]) -> dict | None:
    """The ``where`` of a knowledge search: the location's filter, and no tripwire of
    ``tripwire_topics`` (a missing key passes Chroma's ``$nin``)."""
    terms = [location.filter()] if location.filter() else []
    if tripwire_topics:
        terms.append({TRIPWIRE_FLAG: {"$nin": list(tripwire_topics)}})
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else {"$and": terms}


def _without_tripwires(
    found: dict, k: int, depth: int
) -> tuple[list[list[str]], list[list[float]], bool]:
    """Each query's first k ids and distances that are not tripwires; True when a query has
    fewer than k left though the search returned all ``depth`` asked (search deeper)."""
    ids, distances, deeper = [], [], False
    for row_ids, row_distances, row_metadatas in zip(
        found["ids"], found["distances"], found["metadatas"] or [], strict=True
    ):
        kept = [i for i, metadata in enumerate(row_metadatas) if not is_tripwire(metadata)]
        deeper |= len(kept) < k and len(row_ids) == depth
        ids.append([row_ids[i] for i in kept[:k]])
        distances.append([row_distances[i] for i in kept[:k]])
    return ids, distances, deeper


# ----------------------------------------------------------------------- the backing
class ChromaAttachedBacking:
    """Another application's Chroma collection (``attach chroma://...``), read in place."""

    kind: ClassVar[str] = "chroma-attached"
    describe_kind: ClassVar[str] = "a Chroma collection another application owns"
    capabilities: ClassVar[Capabilities] = ATTACHED.model_copy(
        update={"tripwires": "ragbound.knowledge.chroma_tripwires.ChromaTripwires"}
    )
    holds_vectors: ClassVar[bool] = False

    def __init__(self, location: ChromaLocation, keys: Sequence[str] | None = None):
        self.location = location
        self.keys = None if keys is None else list(keys)  # each row's Chroma id, in row order
        self.tripwire_topics: list[str] = []  # of the tripwire records seen when read

    @staticmethod
    def check_url(url: str) -> None:
        """InputError unless ``url`` is a chroma:// URL ``attach`` takes."""
        parse_chroma_url(url)

    @classmethod
    def from_record(cls, record: BackingRecord) -> ChromaAttachedBacking:
        return cls(ChromaRecord.model_validate(record.model_dump()).location)

    @property
    def record(self) -> BackingRecord:
        return ChromaRecord(kind="chroma-attached", location=self.location)

    def retriever(self, contents: Contents, granularity: tuple[Granularity, ...]) -> Retriever:
        """Search in the collection, over the records read when attached or loaded."""
        info = self.describe(contents, granularity)
        if self.keys is None:
            raise InputError("save this knowledge base first: its rows are searched in Chroma")
        dimension = contents.manifest.embedder.dimension
        return ChromaStore(
            self.location,
            keys=self.keys,
            dimension=dimension,
            info=info,
            tripwire_topics=self.tripwire_topics,
        )

    def describe(self, contents: Contents, granularity: tuple[Granularity, ...]) -> SearchInfo:
        """Chroma's HNSW search: its space and HNSW parameters (approximate)."""
        if granularity != ("chunk",):
            refuse_missing(self, units=granularity)
        return SearchInfo(
            backend="chroma",
            exact=False,
            similarity=contents.manifest.embedder.similarity,
            parameters={"space": self.location.space, **self.location.hnsw},
        )

    def check_target(self, out: Path, *, overwrite: bool, delete_other_files: bool) -> None:
        check_new_folder(out)

    def save(
        self,
        contents: Contents,
        target: Path,
        *,
        overwrite: bool,
        delete_other_files: bool,
        notify: Callable[[str], None],
    ) -> KBManifest:
        """Commit the manifest to ``target`` (a new or empty folder, or the folder it was
        loaded from when nothing is pending: documents are added through the application)."""
        if contents.pending:
            refuse_missing(self, add=True)
        if contents.path is None or not same_dir(target, contents.path):
            check_new_folder(target)
        manifest = contents.manifest.model_copy(update={"backing": self.record})
        write_json(target / MANIFEST, manifest.model_dump(mode="json"))
        return manifest

    def load(self, root: Path, manifest: KBManifest) -> Loaded:
        """Read the collection's records again; the fingerprint follows them."""
        if manifest.units.fine:
            raise ArtifactError(
                f"{root / MANIFEST} records {granularity_label(manifest.units.fine)} units, "
                f"but {self.location.describe()} holds chunks only: attach it again"
            )
        with chroma_errors(self.location):
            collection = open_collection(connect(self.location), self.location)
            space, hnsw = index_settings(collection)
            if space != self.location.space:
                raise ArtifactError(
                    f"{self.location.describe()} now uses the {space} space, not the "
                    f"{self.location.space} it was attached with: attach it again"
                )
            self.location = self.location.model_copy(update={"hnsw": hnsw})
            self.keys, chunks, self.tripwire_topics = read_rows(collection, self.location)
        if corpus_hash(chunks) != manifest.corpus_hash:  # the application changed its records
            manifest = manifest.model_copy(
                update={
                    "n_chunks": len(chunks),
                    "n_documents": len({c.doc_id for c in chunks}),
                    "corpus_hash": corpus_hash(chunks),
                }
            )
        return Loaded(manifest, chunks, FineUnits.empty(manifest.embedder.dimension), None)

    @classmethod
    def attach(
        cls,
        url: str,
        *,
        where: Sequence[str] | Mapping[str, Scalar] = (),
        doc_field: str | None = None,
        embedder: str = "minilm",
        sample: int = DEFAULT_SAMPLE,
    ) -> tuple[ChromaAttachedBacking, KBManifest, list[Chunk], Any]:
        """Check another application's Chroma collection and describe it.

        ``where``: ``FIELD=VALUE`` metadata filters (ANDed; a value matches as stored: text,
        or the number or bool it spells); ``doc_field``: the metadata key of document ids
        (default: each record's id). Re-embeds ``sample`` stored documents to check that
        ``embedder`` made the vectors, and checks the distance space (see the module).
        Returns the backing, a manifest, the records as chunks and the loaded embedder.
        """
        location = parse_chroma_url(url).model_copy(update={"doc_field": doc_field or None})
        spec = canonical_spec(embedder)
        if is_lexical(spec):
            raise InputError("attach needs the dense embedder that made the stored vectors")
        dense = load_dense_embedder(spec)
        with chroma_errors(location):
            collection = open_collection(connect(location), location)
            space, hnsw = index_settings(collection)
            location = location.model_copy(update={"space": space, "hnsw": hnsw})
            if not collection.count():
                raise InputError(f"{location.describe()} is empty: nothing to attach")
            location = location.model_copy(
                update={"where": typed_where(collection, location, where)}
            )
            keys, chunks, topics = read_rows(collection, location)
            check_sample(collection, location, dense, sample_ids(keys, sample), len(keys))
        now = utc_now()
        manifest = KBManifest(
            created_at=now,
            updated_at=now,
            embedder_spec=spec,
            embedder=dense.info,
            chunking=ChunkingParams(),
            text_field="document",
            id_field=doc_field or "id",
            n_chunks=len(chunks),
            n_documents=len({chunk.doc_id for chunk in chunks}),
            corpus_hash=corpus_hash(chunks),
            segments=[],
            backing=ChromaRecord(kind="chroma-attached", location=location),
        )
        backing = cls(location, keys)
        backing.tripwire_topics = topics
        return backing, manifest, chunks, dense
