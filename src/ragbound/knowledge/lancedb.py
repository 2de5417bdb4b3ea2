"""The LanceDB backing (kind ``lancedb-attached``): another application's LanceDB table in
its folder, searched in place through :mod:`ragbound.knowledge.attached` (docs/stores.md).

The search is flat (exact; an ANN index is bypassed) with the embedder's distance: cosine
distance 1 - cosine, dot distance 1 - dot, so similarity (higher = closer) = 1 - d. Tripwire
rows are filtered out in LanceDB's SQL.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

import numpy as np

from ragbound.embedders.base import Similarity
from ragbound.errors import ArtifactError, InputError, RagboundError
from ragbound.knowledge.attached import (
    NESTED_METADATA,
    Access,
    AttachedBacking,
    AttachedLocation,
    Found,
    Rows,
    Scalar,
    client_library,
    first_line,
    parse_filters,
    spellings,
    text_field_of,
    text_of,
)
from ragbound.knowledge.backing import ATTACHED, Capabilities
from ragbound.knowledge.manifest import BackingEntry
from ragbound.knowledge.tripwire_flags import TRIPWIRE_FLAG
from ragbound.stores import SearchInfo

SCHEME = "lancedb"
SHAPE = "lancedb:///ABSOLUTE/FOLDER?table=NAME (or lancedb:RELATIVE/FOLDER?table=NAME)"
TEXT_COLUMN = "text"  # LangChain's and LlamaIndex's LanceDB column of the texts


class LanceLocation(AttachedLocation):
    """A table in a folder (absolute); ``text_field`` a column, a struct field (``a.b``) or
    ``_node_content``; ``metric`` the embedder's; ``index`` the ANN index a search bypasses."""

    folder: str
    table: str
    vector_column: str | None = None
    text_field: str | None = None
    id_column: str = "id"
    metric: Literal["cosine", "dot"] = "cosine"
    index: str | None = None

    def describe(self) -> str:
        return f"LanceDB table {self.table!r} in {self.folder}"


class LanceEntry(BackingEntry):
    """The manifest's ``backing`` of an attached LanceDB table."""

    kind: Literal["lancedb-attached"]
    location: LanceLocation


def parse_url(url: str) -> dict[str, str]:
    """``lancedb:///ABS?table=NAME`` or ``lancedb:REL?table=NAME`` -> folder (absolute), table."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    if parts.scheme != SCHEME or parts.netloc or not parts.path or set(query) != {"table"}:
        raise InputError(f"{url!r} must be {SHAPE}")
    folder = Path(unquote(parts.path)).expanduser().absolute()
    return {"folder": str(folder), "table": query["table"]}


# ------------------------------------------------------------------------------ SQL
def quoted(name: str) -> str:
    """A column (``a.b``: field b of struct a) as LanceDB's SQL names it, each part quoted."""
    if "`" in name:
        raise InputError(f"column {name!r}: a name holding ` cannot be quoted")
    return ".".join(f"`{part}`" for part in name.split("."))


def literal(value: Scalar) -> str:
    """A SQL literal: text quoted (quotes doubled), bools and numbers as they are."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value).lower() if isinstance(value, bool) else repr(value)


def field_type(schema: Any, name: str) -> Any:
    """The Arrow type of column ``name`` (dotted: a struct's field), None when missing."""
    import pyarrow as pa

    node: Any = schema
    for part in name.split("."):
        nested = isinstance(node, pa.Schema) or pa.types.is_struct(node)
        if not nested or node.get_field_index(part) < 0:
            return None
        node = node.field(node.get_field_index(part)).type
    return node


def typed(schema: Any, name: str, value: Scalar, where: str) -> Scalar:
    """``value`` as column ``name`` holds it (its text, or the number or bool it spells)."""
    import pyarrow as pa

    kind = field_type(schema, name)
    if kind is None:
        raise InputError(f"{where} has no column {name!r} (--where)")
    t = pa.types
    accepts = {str: t.is_string, bool: t.is_boolean, int: t.is_integer, float: t.is_floating}
    for candidate in spellings(value):
        if accepts[type(candidate)](kind):
            return candidate
    raise InputError(f"{where}: column {name!r} holds {kind}, which {value!r} is not (--where)")


def string_fields(schema: Any, *paths: str) -> list[str]:
    """Those of ``paths`` that are text columns (or text fields of a struct) of ``schema``."""
    import pyarrow as pa

    return [
        p for p in paths if (kind := field_type(schema, p)) is not None and pa.types.is_string(kind)
    ]


def sql_filter(location: LanceLocation, schema: Any, *, flagged: bool = False) -> str | None:
    """The ``where`` equalities and no tripwire flag (``flagged``: any flag, no equalities)."""
    # the flag's places: a top column, or a field of LangChain's metadata struct
    flags = string_fields(schema, TRIPWIRE_FLAG, f"{NESTED_METADATA}.{TRIPWIRE_FLAG}")
    if flagged:
        return " OR ".join(f"({quoted(f)} IS NOT NULL AND {quoted(f)} != '')" for f in flags)
    terms = [f"{quoted(k)} = {literal(v)}" for k, v in sorted(location.where.items())]
    terms += [f"({quoted(f)} IS NULL OR {quoted(f)} = '')" for f in flags]
    return " AND ".join(terms) or None


# ------------------------------------------------------------------ the table and its rows
def open_table(location: LanceLocation) -> Any:
    """The table, reading the latest version at every request (InputError when the folder or
    the table is missing)."""
    lancedb = client_library("lancedb", "lancedb")
    if not Path(location.folder).is_dir():
        raise InputError(f"no LanceDB folder {location.folder} (the one lancedb.connect used)")
    db = lancedb.connect(location.folder, read_consistency_interval=datetime.timedelta(0))
    try:
        return db.open_table(location.table)
    except ValueError:
        names = sorted(db.list_tables().tables)
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "") or "none"
        raise InputError(f"no LanceDB table {location.table!r} there (tables: {shown})") from None


@contextmanager
def lance_errors(location: LanceLocation) -> Iterator[None]:
    """LanceDB's failures as one-line ArtifactErrors naming the table."""
    try:
        yield
    except RagboundError:
        raise
    except (ValueError, RuntimeError, OSError) as exc:
        raise ArtifactError(f"{location.describe()}: {first_line(exc)}") from exc


def scan(table: Any, where: str | None, names: Sequence[str], limit: int | None = None) -> list:
    """The rows ``where`` selects (all of them without ``limit``), these columns only."""
    query = table.search().select(list(names)).limit(limit)
    return (query.where(where) if where else query).to_arrow().to_pylist()


def record_of(row: Mapping[str, Any], location: LanceLocation) -> tuple[str, Any, dict[str, Any]]:
    """A row's key, text and metadata (null columns left out; the ``metadata`` struct that
    LangChain and LlamaIndex write lifted to the top, where their other stores keep it)."""
    metadata = {name: value for name, value in row.items() if value is not None}
    nested = metadata.get(NESTED_METADATA)
    if isinstance(nested, dict):
        metadata = {**nested, **{k: v for k, v in metadata.items() if k != NESTED_METADATA}}
    key = row.get(location.id_column)
    if key is None:
        raise InputError(f"{location.describe()}: a row has no key ({location.id_column})")
    return str(key), text_of(metadata, location.text_field), metadata


class LanceAccess(Access):
    """A LanceDB table in its folder, through lancedb's embedded client."""

    location: LanceLocation

    def __init__(self, location: LanceLocation):
        super().__init__(location)
        self._table: Any = None
        self._ids: dict[str, Any] = {}  # each key's own value (text or number) by its text

    def errors(self) -> Any:
        return lance_errors(self.location)

    @property
    def table(self) -> Any:
        if self._table is None:
            self._table = open_table(self.location)
        return self._table

    def settle(self, dimension: int) -> LanceLocation:
        """The vector column, the typed filters, the text field and the index settled, after
        checking the columns, the dimension and that rows match."""
        location, schema = self.location, self.table.schema
        where = location.describe()
        vector = location.vector_column or _only_vector_column(schema, where)
        if not hasattr(field_type(schema, vector), "list_size"):  # its size: checked on a sample
            raise InputError(f"{where} has no vector column {vector!r} (--vector-column)")
        if field_type(schema, location.id_column) is None:
            raise InputError(
                f"{where} has no column {location.id_column!r}: name the column identifying a row "
                "with --id-column (a LanceDB row has no stable id of its own)"
            )
        typed_where = {k: typed(schema, k, v, where) for k, v in location.where.items()}
        location = location.model_copy(update={"vector_column": vector, "where": typed_where})
        if not self.table.count_rows():
            raise InputError(f"{where} is empty: it has no rows to attach")
        if not scan(self.table, sql_filter(location, schema), [location.id_column], 1):
            raise InputError(f"{where} has no rows{location.filtered()} (--where)")
        text = location.text_field or (string_fields(schema, TEXT_COLUMN) or [None])[0]
        if text is None:
            samples = scan(self.table, sql_filter(location, schema), _columns(schema, vector), 16)
            text = text_field_of(samples)
        if text is None:
            raise InputError(
                f"{where} holds no text where LangChain or LlamaIndex put it (columns: "
                f"{', '.join(schema.names)}): name the column with --text-field"
            )
        self.location = location.model_copy(update={"text_field": text})
        return self.reopen()

    def reopen(self) -> LanceLocation:
        """The location with the ANN index the table has now (bypassed, recorded)."""
        column = self.location.vector_column
        found = [i.index_type for i in self.table.list_indices() if column in i.columns]
        return self.location.model_copy(update={"index": found[0] if found else None})

    def read(self) -> Rows:
        """Every row matching ``where`` and not flagged, in key order."""
        location, schema = self.location, self.table.schema
        found = scan(
            self.table, sql_filter(location, schema), _columns(schema, location.vector_column)
        )
        rows, self._ids = Rows(), {}
        for row in sorted(found, key=lambda row: str(row[location.id_column])):
            key, text, metadata = record_of(row, location)
            if key in self._ids:
                raise InputError(f"{location.describe()}: several rows have the key {key!r}")
            self._ids[key] = row[location.id_column]
            rows.add(key, text, metadata)  # a text that is not a string: None, refused
        return rows

    def vectors(self, keys: Sequence[str]) -> np.ndarray:
        column, vector = self.location.id_column, str(self.location.vector_column)
        values = ", ".join(literal(self._ids.get(key, key)) for key in keys)
        found = scan(self.table, f"{quoted(column)} IN ({values})", [column, vector], len(keys))
        by_key = {str(row[column]): row[vector] for row in found}
        return np.array([by_key[key] for key in keys], dtype=np.float64)

    def query(self, vectors: np.ndarray, depth: int) -> list[list[Found]]:
        column, vector = self.location.id_column, self.location.vector_column
        search = (
            self.table.search(np.asarray(vectors, np.float32), vector_column_name=vector)
            .distance_type(self.location.metric)
            .bypass_vector_index()
            .select([column, "_distance"])
            .limit(depth)
        )
        where = sql_filter(self.location, self.table.schema)
        found = (search.where(where, prefilter=True) if where else search).to_arrow().to_pylist()
        rows: list[list[Found]] = [[] for _ in vectors]
        for hit in sorted(found, key=lambda h: (h.get("query_index", 0), h["_distance"])):
            rows[hit.get("query_index", 0)].append(Found(str(hit[column]), float(hit["_distance"])))
        return rows

    def similarities(self, scores: np.ndarray) -> np.ndarray:
        """1 - d: LanceDB's cosine distance is 1 - cosine, its dot distance 1 - dot."""
        return 1.0 - np.asarray(scores, np.float64)

    def search_info(self, similarity: Similarity) -> SearchInfo:
        index = self.location.index
        parameters = {"distance": self.location.metric, "method": "flat (every row scored)"}
        bypassed = {"ann_index": f"{index} (bypassed)"} if index else {}
        return SearchInfo(
            backend="lancedb", exact=True, similarity=similarity, parameters=parameters | bypassed
        )

    def similarity(self, embedder: Similarity) -> Similarity:
        if embedder not in ("cosine", "dot"):
            raise InputError(f"a LanceDB table is searched by cosine or dot, not {embedder}")
        self.location = self.location.model_copy(update={"metric": embedder})
        return embedder


def _columns(schema: Any, vector: str | None) -> list[str]:
    return [name for name in schema.names if name != vector]


def _only_vector_column(schema: Any, where: str) -> str:
    """The one fixed-size list column (among several: LanceDB's default name, ``vector``)."""
    found = [f.name for f in schema if hasattr(f.type, "list_size")]
    if len(found) == 1 or "vector" in found:
        return found[0] if len(found) == 1 else "vector"
    raise InputError(
        f"{where} has {len(found)} vector columns ({', '.join(found) or 'none'}): choose one "
        "with --vector-column"
    )


class LanceAttachedBacking(AttachedBacking):
    """Another application's LanceDB table (``attach lancedb:...``), searched in place."""

    kind: ClassVar[str] = "lancedb-attached"
    describe_kind: ClassVar[str] = "a LanceDB table another application owns"
    capabilities: ClassVar[Capabilities] = ATTACHED.model_copy(
        update={"tripwires": "ragbound.knowledge.lancedb_tripwires.LanceTripwires"}
    )
    entry_type = LanceEntry
    access_type = LanceAccess

    @property
    def source(self) -> str:
        return self.location.table

    @classmethod
    def locate(
        cls,
        url: str,
        *,
        text_field: str | None = None,
        doc_field: str | None = None,
        vector_column: str | None = None,
        id_column: str | None = None,
        where: Sequence[str] = (),
    ) -> LanceLocation:
        """Defaults: the ``text`` column (else found where the frameworks put it), the row
        key as document id, the only vector column, ``id``; ``where`` ``COLUMN=VALUE``
        equalities (ANDed, typed as the column; ``metadata.topic=x``: a struct's field)."""
        return LanceLocation(
            **parse_url(url),
            text_field=text_field,
            doc_field=doc_field,
            vector_column=vector_column,
            id_column=id_column or "id",
            where=parse_filters(where),
        )
