"""The template of an attached store: another application's collection or table, read in place.

``ragbound attach URL --embedder SPEC --out KB`` keeps nothing but a manifest. Each store
(Chroma, Qdrant, PostgreSQL, LanceDB) supplies an :class:`Access` (reach, read, fetch vectors,
search, convert scores to similarities, higher = closer); this module does the rest the same
way for each: rows (never a flagged tripwire), the frameworks' text layouts, attach's checks on
a fixed sample (dimension, same embedder, score conversion) and refusing a search over records
changed since the last load. The rules are in docs/stores.md.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

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
from ragbound.knowledge.manifest import BackingEntry, KBManifest, corpus_hash
from ragbound.knowledge.segments import FineUnits, check_new_folder, same_dir
from ragbound.knowledge.tripwire_flags import is_tripwire
from ragbound.stores import Hits, QueryKind, Retriever, SearchInfo
from ragbound.stores.base import query_vectors

Scalar = str | int | float | bool
DEFAULT_SAMPLE = 32  # stored texts re-embedded by attach
# median cosine between a stored vector and the re-embedded text that counts as the same
# embedder: the same model on other hardware or library versions stays above 0.999
SAME_EMBEDDER_COSINE = 0.99
SCORE_TOLERANCE = 1e-3  # |converted score - similarity computed here| allowed on the sample
UNIT_NORM_TOLERANCE = 1e-3  # |norm - 1| counted as unit length
SCORE_QUERIES = 8  # sampled vectors sent as queries to check the conversion
NESTED_METADATA = "metadata"  # where LangChain's stores keep a document's metadata
LANGCHAIN_TEXT = "page_content"
LLAMAINDEX_NODE = "_node_content"  # LlamaIndex's JSON of a node (its text, metadata, templates)
# LlamaIndex's bookkeeping keys beside a node's own metadata
LLAMAINDEX_KEYS = frozenset({LLAMAINDEX_NODE, "_node_type", "doc_id", "document_id", "ref_doc_id"})


class AttachedLocation(BaseModel):
    """What every attached store's location holds besides where it is: ``where`` (metadata
    equalities, ANDed, values typed as stored), ``doc_field`` (the metadata key of document ids;
    None: each record's key), ``metadata_in_embedding`` (the stored vectors embed LlamaIndex's
    metadata lines with the text, found at attach)."""

    model_config = ConfigDict(frozen=True)

    where: dict[str, Scalar] = {}
    doc_field: str | None = None
    metadata_in_embedding: bool = False

    def describe(self) -> str:
        """The store, for messages (``Chroma collection 'docs' at host:port``)."""
        raise NotImplementedError

    def filtered(self) -> str:
        """`` matching a='x' and b=2`` for messages ("" without a filter)."""
        if not self.where:
            return ""
        return " matching " + " and ".join(f"{f}={v!r}" for f, v in sorted(self.where.items()))


class Found(NamedTuple):
    """One record a store's search returned: its key, the store's own score, and whether it
    is flagged as a tripwire (stores that filter flags out in the search say False)."""

    key: str
    score: float
    flagged: bool = False


@dataclass
class Rows:
    """Records read from a store, aligned: keys (as text), texts, metadata."""

    keys: list[str] = field(default_factory=list)
    texts: list[str | None] = field(default_factory=list)
    metadatas: list[dict[str, Any]] = field(default_factory=list)

    def add(self, key: str, text: str | None, metadata: Mapping[str, Any] | None) -> None:
        self.keys.append(key)
        self.texts.append(text)
        self.metadatas.append(dict(metadata or {}))

    def knowledge(self) -> Rows:
        """The rows that are not tripwires."""
        kept = Rows()
        for key, text, metadata in zip(self.keys, self.texts, self.metadatas, strict=True):
            if not flagged(metadata):
                kept.add(key, text, metadata)
        return kept

    def chunks(self, location: AttachedLocation, source: str) -> list[Chunk]:
        """One chunk per row (InputError for an empty store, a missing text or doc id)."""
        if not self.keys:
            raise InputError(f"{location.describe()} has no records{location.filtered()}")
        missing = [key for key, text in zip(self.keys, self.texts, strict=True) if not text]
        if missing:
            raise InputError(
                f"{location.describe()}: {len(missing)} of {len(self.keys)} records have no "
                f"text (e.g. {missing[0]!r}); ragbound needs each record's text"
            )
        return [
            _chunk(key, str(text), metadata, location, source)
            for key, text, metadata in zip(self.keys, self.texts, self.metadatas, strict=True)
        ]


def _chunk(
    key: str, text: str, metadata: dict[str, Any], location: AttachedLocation, source: str
) -> Chunk:
    doc_id = key
    if location.doc_field is not None:
        value = field_value(metadata, location.doc_field)
        if value is None:
            raise InputError(
                f"{location.describe()}: record {key!r} has no metadata "
                f"{location.doc_field!r} (--doc-field)"
            )
        doc_id = str(value)
    return Chunk(
        id=sha256_text(key, text)[:16],
        text=text,
        doc_id=doc_id,
        source=source,
        position=0,
        n_words=len(text.split()),
        metadata=own_metadata(metadata, getattr(location, "text_field", None)),
    )


# ------------------------------------------------------------------ fields and layouts
def field_value(metadata: Mapping[str, Any] | None, key: str) -> Any:
    """``metadata[key]``; a dotted key walks nested objects (``metadata.source``)."""
    if not metadata:
        return None
    if key in metadata:
        return metadata[key]
    value: Any = metadata
    for part in key.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def flagged(metadata: Mapping[str, Any] | None) -> bool:
    """The record is a tripwire: the flag at the top of its metadata or under ``metadata``."""
    nested = (metadata or {}).get(NESTED_METADATA)
    return is_tripwire(dict(metadata or {})) or (isinstance(nested, dict) and is_tripwire(nested))


def llamaindex_node(metadata: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """LlamaIndex's node (``_node_content`` parsed) when the record has one."""
    raw = (metadata or {}).get(LLAMAINDEX_NODE)
    if not isinstance(raw, str):
        return None
    with suppress(ValueError):
        node = json.loads(raw)
        return node if isinstance(node, dict) else None
    return None


def text_of(metadata: Mapping[str, Any], text_field: str | None) -> str | None:
    """A record's text: under ``text_field`` when given (``_node_content``: the node's
    ``text``), else where LangChain (``page_content``) or LlamaIndex put it."""
    if text_field == LLAMAINDEX_NODE:
        node = llamaindex_node(metadata)
        return node.get("text") if node and isinstance(node.get("text"), str) else None
    if text_field is not None:
        value = field_value(metadata, text_field)
        return value if isinstance(value, str) else None
    found = text_field_of([metadata])
    return None if found is None else text_of(metadata, found)


TEXT_FIELDS = (LANGCHAIN_TEXT, LLAMAINDEX_NODE, "text", "document", "content")


def text_field_of(samples: Sequence[Mapping[str, Any]]) -> str | None:
    """Where records hold their text, read off a few of them: LangChain's ``page_content``,
    LlamaIndex's ``_node_content``, or a plain ``text``, ``document`` or ``content``; None
    when none of them holds text."""
    for name in TEXT_FIELDS:
        if any(isinstance(text_of(sample, name), str) for sample in samples):
            return name
    return None


def embedded_text(text: str, metadata: Mapping[str, Any]) -> str:
    """The text LlamaIndex embeds for a node (its ``MetadataMode.EMBED``): the metadata lines
    it does not exclude, a separator, then the text; ``text`` alone without a node."""
    node = llamaindex_node(metadata)
    if node is None:
        return text
    excluded = set(node.get("excluded_embed_metadata_keys") or ())
    template = node.get("metadata_template") or "{key}: {value}"
    lines = [
        template.format(key=key, value=value)
        for key, value in (node.get("metadata") or {}).items()
        if key not in excluded
    ]
    if not lines:
        return text
    separator = node.get("metadata_seperator", node.get("metadata_separator", "\n"))
    around = node.get("text_template") or "{metadata_str}\n\n{content}"
    return around.format(metadata_str=separator.join(lines), content=text)


def own_metadata(metadata: Mapping[str, Any], text_field: str | None = None) -> dict[str, Any]:
    """A record's metadata without its text and the frameworks' bookkeeping: LangChain's
    nested ``metadata`` lifted, LlamaIndex's node JSON and ids left out."""
    nested = metadata.get(NESTED_METADATA)
    if isinstance(nested, dict) and LANGCHAIN_TEXT in metadata:
        return dict(nested)
    dropped = LLAMAINDEX_KEYS | {text_field}
    return {key: value for key, value in metadata.items() if key not in dropped}


# ------------------------------------------------------------------------- filters
def parse_filters(where: Sequence[str] | Mapping[str, Scalar]) -> dict[str, Scalar]:
    """``KEY=VALUE`` items (or a mapping) -> {key: value} (InputError for another shape)."""
    if isinstance(where, Mapping):
        return dict(where)
    parsed: dict[str, Scalar] = {}
    for item in where:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"filter {item!r} must be KEY=VALUE (a metadata key and its value)")
        parsed[key.strip()] = value
    return parsed


def spellings(value: Scalar) -> list[Scalar]:
    """The value, then what its text spells as int, float and bool (a filter matches a
    value as the store holds it)."""
    if not isinstance(value, str):
        return [value]
    found: list[Scalar] = [value]
    for parse in (int, float):
        with suppress(ValueError):
            found.append(parse(value))
    if value.lower() in ("true", "false"):
        found.append(value.lower() == "true")
    return found


def client_library(module: str, extra: str) -> Any:
    """A store's client library, imported (InputError naming ragbound's extra when missing)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise InputError(f"{module} is not installed: pip install 'ragbound[{extra}]'") from None


def first_line(exc: BaseException) -> str:
    """An exception's first line (its type's name when it has no text), for messages."""
    return " ".join(str(exc).strip().splitlines()[:1]) or type(exc).__name__


# ---------------------------------------------------------------- the part per store
class Access:
    """What is specific to one store: reach it, read its rows, fetch stored vectors, search,
    convert its scores. One instance per backing; it may keep a client and what the last
    read learned (a search filter, the store's own ids)."""

    def __init__(self, location: Any):
        self.location = location

    def errors(self) -> AbstractContextManager[None]:
        """Turn the store's client failures into one-line InputError or ArtifactError
        naming the location."""
        raise NotImplementedError

    def settle(self, dimension: int) -> Any:
        """At attach: check the store is there (InputError listing what is) and return the
        location completed from it (its distance, index parameters, typed filters)."""
        raise NotImplementedError

    def reopen(self) -> Any:
        """At load: the location, refused (ArtifactError) when the store changed in a way
        that needs a new attach (its distance)."""
        return self.location

    def read(self) -> Rows:
        """Every record the location's filters select, in a fixed order."""
        raise NotImplementedError

    def vectors(self, keys: Sequence[str]) -> np.ndarray:
        """The stored vectors of ``keys`` (float, rows in that order)."""
        raise NotImplementedError

    def query(self, vectors: np.ndarray, depth: int) -> list[list[Found]]:
        """Each query vector's ``depth`` nearest records, the store's best first."""
        raise NotImplementedError

    def similarities(self, scores: np.ndarray) -> np.ndarray:
        """The store's scores as similarities, higher = closer."""
        raise NotImplementedError

    def search_info(self, similarity: Similarity) -> SearchInfo:
        """How a search here runs (recorded with every calibration)."""
        raise NotImplementedError

    def similarity(self, embedder: Similarity) -> Similarity:
        """What the converted scores are, for an embedder scoring by ``embedder`` (a store
        whose search depends on it, PostgreSQL's operator, keeps it)."""
        return embedder


# ---------------------------------------------------------------------- the search
class AttachedSearch:
    """Nearest-neighbour search in an attached store: a vector
    :class:`~ragbound.stores.Retriever` whose rows are the records read at the last load
    (``keys``, in row order); similarities higher = closer, ties by the lower row."""

    query_kind: QueryKind = "vector"

    def __init__(self, access: Access, keys: Sequence[str], dimension: int, info: SearchInfo):
        self.access = access
        self.location = access.location
        self._rows = {key: row for row, key in enumerate(keys)}
        self._dimension = dimension
        self._info = info

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
            with self.access.errors():
                found = self.access.query(queries, depth)
            kept = [[hit for hit in row if not hit.flagged][:k] for row in found]
            if all(
                len(row) == k or len(full) < depth for row, full in zip(kept, found, strict=True)
            ):
                return self._hits(kept, k)
            depth *= 2  # tripwires added since the load took places in the top k

    def _hits(self, found: list[list[Found]], k: int) -> Hits:
        where = self.location.describe()
        if any(len(row) != k for row in found):
            raise ArtifactError(
                f"{where} returned fewer than {k} records: records were deleted since the last "
                "load; load it again (then calibrate again)"
            )
        unknown = {hit.key for row in found for hit in row} - self._rows.keys()
        if unknown:
            raise ArtifactError(
                f"{where} holds records added after this knowledge base was loaded (e.g. "
                f"{min(unknown)!r}): load it again (then calibrate again)"
            )
        rows = np.array([[self._rows[hit.key] for hit in row] for row in found], np.int64)
        raw = np.array([[hit.score for hit in row] for row in found], np.float64)
        scores = np.asarray(self.access.similarities(raw), np.float32).reshape(rows.shape)
        order = np.lexsort((rows, -scores), axis=1)
        return Hits(
            similarities=np.take_along_axis(scores, order, axis=1),
            indices=np.take_along_axis(rows, order, axis=1),
        )


# ------------------------------------------------------------------ checks at attach
def sample_keys(keys: Sequence[str], size: int) -> list[str]:
    """A fixed pseudo-random choice of ``size`` keys (ordered by their SHA-256)."""
    return sorted(keys, key=lambda key: hashlib.sha256(key.encode()).hexdigest())[:size]


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The cosine of each row of ``a`` with the same row of ``b``."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.einsum("ij,ij->i", a, b) / np.maximum(norms, np.finfo(np.float32).tiny)


def check_sample(access: Access, rows: Rows, dense: Any, size: int) -> bool:
    """Attach's checks on ``size`` sampled rows (see the module): True when the stored vectors
    embed LlamaIndex's metadata lines with the text. InputError naming the likely cause."""
    where = access.location.describe()
    index = {key: i for i, key in enumerate(rows.keys)}
    keys = sample_keys(rows.keys, size)
    stored = np.asarray(access.vectors(keys), np.float64)
    if stored.shape[1] != dense.info.dimension:
        raise InputError(
            f"{where} holds {stored.shape[1]}-dimensional vectors but the embedder "
            f"{dense.info.name} makes {dense.info.dimension}: pass the embedder that filled it "
            "with --embedder"
        )
    norms = np.linalg.norm(stored, axis=1)
    if dense.info.similarity == "cosine" and np.abs(norms - 1.0).max() > UNIT_NORM_TOLERANCE:
        raise InputError(
            f"{where}: the embedder {dense.info.name} scores by cosine but its vectors are not "
            f"unit length (norms {norms.min():.4g} to {norms.max():.4g}): they were not stored "
            "as the embedder makes them (normalized)"
        )
    texts = [str(rows.texts[index[key]]) for key in keys]
    plain = float(np.median(row_cosines(stored, dense.encode(texts))))
    with_metadata = [
        embedded_text(t, rows.metadatas[index[k]]) for t, k in zip(texts, keys, strict=True)
    ]
    in_embedding = with_metadata != texts and plain < SAME_EMBEDDER_COSINE
    median = plain
    if in_embedding:
        median = float(np.median(row_cosines(stored, dense.encode(with_metadata))))
    if median < SAME_EMBEDDER_COSINE:
        raise InputError(
            f"the vectors in {where} do not match the embedder {dense.info.name} on its texts: "
            f"re-embedding {len(keys)} stored texts gives a median cosine of {median:.3f} with "
            f"the stored vectors (at least {SAME_EMBEDDER_COSINE} expected). "
            + _likely_cause(texts, plain, median, in_embedding)
        )
    similarity = access.similarity(dense.info.similarity)
    _check_scores(access, stored[:SCORE_QUERIES], similarity, len(rows.keys))
    return in_embedding


def _likely_cause(texts: list[str], plain: float, with_metadata: float, tried: bool) -> str:
    if sum(t.lstrip().startswith(("{", "[")) for t in texts) * 2 > len(texts):
        return (
            "The texts read look like JSON, not the text that was embedded: name the field "
            "that holds it (--text-field)"
        )
    if tried and with_metadata > plain + 0.05:
        return (
            f"With LlamaIndex's metadata lines the cosine rises from {plain:.3f} to "
            f"{with_metadata:.3f}: the application embedded metadata this check cannot rebuild "
            "(a custom metadata mode or template); otherwise pass the embedder that filled it"
        )
    return (
        "Likely another embedder made them (pass it with --embedder), or the text field holds "
        "other text than was embedded (--text-field)"
    )


def _check_scores(access: Access, queries: np.ndarray, similarity: Similarity, size: int) -> None:
    """Search with sampled stored vectors: the store's converted scores must equal the
    similarity computed here (cosine or dot) with the vectors found."""
    if similarity == "cosine":
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    with access.errors():
        found = access.query(queries.astype(np.float32), min(size, 4))
    keys = list(dict.fromkeys(hit.key for row in found for hit in row if not hit.flagged))
    vectors = dict(zip(keys, np.asarray(access.vectors(keys), np.float64), strict=True))
    gaps, norms = [], []
    for query, row in zip(queries, found, strict=True):
        hits = [hit for hit in row if not hit.flagged]
        converted = access.similarities(np.array([hit.score for hit in hits], np.float64))
        for hit, score in zip(hits, np.atleast_1d(converted), strict=True):
            vector = vectors[hit.key]
            norms.append(float(np.linalg.norm(vector)))
            if similarity == "cosine":
                vector = vector / np.linalg.norm(vector)
            gaps.append(abs(float(score) - float(query @ vector)))
    if gaps and max(gaps) > SCORE_TOLERANCE:
        unit = max(abs(n - 1.0) for n in norms) <= UNIT_NORM_TOLERANCE
        raise InputError(
            f"{access.location.describe()}: its scores, converted to similarities, differ from "
            f"the {similarity} of the same vectors by up to {max(gaps):.3g}"
            + ("" if unit else f" (its vectors are not unit length: norms {min(norms):.4g} to ")
            + ("" if unit else f"{max(norms):.4g}; use a cosine or dot/ip distance)")
        )


# ---------------------------------------------------------------------- the backing
class AttachedBacking:
    """A store another application fills, read in place: the backing every attached store
    is. A subclass names its ``kind``, its location and record classes, its :class:`Access`
    and how a URL and attach's options make a location (:meth:`locate`)."""

    kind: ClassVar[str]
    describe_kind: ClassVar[str]
    capabilities: ClassVar[Capabilities] = ATTACHED
    holds_vectors: ClassVar[bool] = False
    entry_type: ClassVar[type[BackingEntry]]
    access_type: ClassVar[type[Access]]
    text_field: ClassVar[str] = "text"  # the manifest's text_field when none is named

    def __init__(self, location: Any):
        self.access = self.access_type(location)
        self.keys: list[str] | None = None  # each row's key, in row order, once read

    @property
    def location(self) -> Any:
        return self.access.location

    @classmethod
    def locate(cls, url: str, **options: Any) -> AttachedLocation:
        """The location a URL and attach's options name (InputError for a bad one)."""
        raise NotImplementedError

    @classmethod
    def check_url(cls, url: str) -> None:
        """InputError unless ``url`` is one ``attach`` takes."""
        cls.locate(url)

    @classmethod
    def from_record(cls, record: BackingEntry) -> AttachedBacking:
        return cls(cls.entry_type.model_validate(record.model_dump()).location)  # type: ignore[attr-defined]

    @property
    def entry(self) -> BackingEntry:
        return self.entry_type(kind=self.kind, location=self.location)  # type: ignore[call-arg]

    def check_target(self, out: Path, *, overwrite: bool, delete_other_files: bool) -> None:
        check_new_folder(out)

    def retriever(self, contents: Contents, granularity: tuple[Granularity, ...]) -> Retriever:
        """Search in the store, over the records read when attached or loaded."""
        info = self.describe(contents, granularity)
        if self.keys is None:
            raise InputError("save this knowledge base first: its rows are searched in the store")
        return AttachedSearch(self.access, self.keys, contents.dimension, info)

    def describe(self, contents: Contents, granularity: tuple[Granularity, ...]) -> SearchInfo:
        refuse_missing(self, units=granularity)
        return self.access.search_info(self.access.similarity(contents.similarity))

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
        manifest = contents.manifest.model_copy(update={"backing": self.entry})
        write_json(target / MANIFEST, manifest.model_dump(mode="json"))
        return manifest

    def load(self, root: Path, manifest: KBManifest) -> Loaded:
        """Read the store's rows again; the fingerprint follows them."""
        if manifest.units.fine:
            raise ArtifactError(
                f"{root / MANIFEST} records {granularity_label(manifest.units.fine)} units, "
                f"but {self.location.describe()} holds chunks only: attach it again"
            )
        with self.access.errors():
            self.access.location = self.access.reopen()
            chunks = self._read()
        if corpus_hash(chunks) != manifest.corpus_hash:  # the application changed its rows
            manifest = manifest.model_copy(update=_counts(chunks))
        return Loaded(manifest, chunks, FineUnits.empty(manifest.embedder.dimension), None)

    def _read(self) -> list[Chunk]:
        rows = self.access.read().knowledge()
        chunks = rows.chunks(self.location, self.source)
        self.keys = rows.keys
        self._rows = rows
        return chunks

    @property
    def source(self) -> str:
        """Each chunk's ``source``: the collection or table."""
        return self.location.collection

    @classmethod
    def attach(
        cls, url: str, *, embedder: str = "minilm", sample: int = DEFAULT_SAMPLE, **options: Any
    ) -> tuple[AttachedBacking, KBManifest, list[Chunk], Any]:
        """Check another application's store and describe it (see the module): its rows,
        and on ``sample`` re-embedded texts that ``embedder`` made the stored vectors.
        ``options`` are the store's (:meth:`locate`). Returns the backing, a manifest, the
        rows as chunks and the loaded embedder."""
        backing = cls(cls.locate(url, **options))
        spec = canonical_spec(embedder)
        if is_lexical(spec):
            raise InputError("attach needs the dense embedder that made the stored vectors")
        dense = load_dense_embedder(spec)
        access = backing.access
        access.similarity(dense.info.similarity)  # a store whose search depends on it keeps it
        with access.errors():
            access.location = access.settle(dense.info.dimension)
            chunks = backing._read()
            in_embedding = check_sample(access, backing._rows, dense, sample)
        access.location = access.location.model_copy(update={"metadata_in_embedding": in_embedding})
        now = utc_now()
        manifest = KBManifest(
            created_at=now,
            updated_at=now,
            embedder_spec=spec,
            embedder=dense.info,
            chunking=ChunkingParams(),
            text_field=getattr(backing.location, "text_field", None) or cls.text_field,
            id_field=backing.location.doc_field or "id",
            segments=[],
            backing=backing.entry,
            **_counts(chunks),
        )
        return backing, manifest, chunks, dense


def _counts(chunks: Sequence[Chunk]) -> dict[str, Any]:
    return {
        "n_chunks": len(chunks),
        "n_documents": len({chunk.doc_id for chunk in chunks}),
        "corpus_hash": corpus_hash(chunks),
    }
