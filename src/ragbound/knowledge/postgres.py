"""The PostgreSQL backings (kinds ``postgres`` and ``postgres-attached``): rows in a
PostgreSQL + pgvector table, searched in the database
(:class:`~ragbound.knowledge.postgres_tables.PostgresStore`); the folder holds only the
manifest. Both store chunks only. docs/stores.md describes them.

- **owned** (``index --backing postgresql://...``): ragbound creates the table and appends to
  it; rows past the manifest's ``n_chunks`` are an add that did not commit, never searched and
  replaced by the next add.
- **attached** (``attach postgresql://... --table T``): another application's table, read in
  place through :mod:`ragbound.knowledge.attached`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import model_validator

from ragbound.artifacts import read_manifest, utc_now, write_json
from ragbound.corpus import Chunk
from ragbound.corpus.units import Granularity, granularity_label
from ragbound.embedders.base import Similarity
from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge.attached import Access, AttachedBacking, Found, Rows
from ragbound.knowledge.backing import Capabilities, Contents, Loaded, refuse_missing
from ragbound.knowledge.layout import KB_FORMAT, MANIFEST
from ragbound.knowledge.manifest import BackingEntry, KBManifest, corpus_hash
from ragbound.knowledge.postgres_tables import (
    OWNED_MARK,
    ROW_COLUMN,
    PostgresStore,
    PostgresTable,
    check_identifier,
    database_errors,
    default_table,
    distance_similarities,
    filter_sql,
    hnsw_index_sql,
    parse_filter,
    regclass_name,
    require_columns,
    require_hnsw_index,
    search_connection,
    search_info,
    search_method,
    search_sql,
    session,
    split_store_url,
    table_columns,
    table_sql,
)
from ragbound.knowledge.segments import FineUnits, check_new_folder, same_dir
from ragbound.knowledge.tripwire_flags import TRIPWIRE_FLAG
from ragbound.stores import Retriever, SearchInfo

_OWNED_COLUMNS = ("chunk_id", "doc_id", "source", "position", "n_words", "text", "metadata")


def owned_location(url: str, out: Path) -> PostgresTable:
    """Where ``index --backing URL --out OUT`` puts its rows: the URL's ``table`` parameter,
    or ``ragbound_<folder name>``; ``search=hnsw`` (and ``ef_search``) builds an HNSW index
    and searches with it."""
    dsn, parameters = split_store_url(url)
    table = parameters.get("table") or default_table(Path(out).absolute().name)
    search, ef_search = search_method(
        parameters.get("search", "exact"), parameters.get("ef_search")
    )
    return PostgresTable(
        dsn=dsn,
        table=check_identifier(table, "table"),
        owned=True,
        search=search,
        ef_search=ef_search,
    )


def check_owned_target(location: PostgresTable, *, overwrite: bool = False) -> None:
    """Before embedding: the database answers, and the table is free (or, with
    ``overwrite``, one ragbound made). Raises InputError otherwise. Creates the ``vector``
    extension if the database lacks it (so missing rights show before embedding)."""
    with session(location, create_extension=True) as connection:
        _check_table_free(connection, location, overwrite)


def _check_table_free(connection: Any, location: PostgresTable, overwrite: bool) -> None:
    if not table_columns(connection, location.table):
        return
    comment = connection.execute(
        "SELECT obj_description(to_regclass(%s), 'pg_class')", (regclass_name(location.table),)
    ).fetchone()[0]
    if not (comment or "").startswith(OWNED_MARK):
        raise InputError(
            f"{location.describe()} already exists and ragbound did not create it: choose "
            "another table (?table=NAME), or use it as it is with ragbound attach"
        )
    if not overwrite:
        raise InputError(
            f"{location.describe()} already holds a ragbound knowledge base: pass --overwrite "
            "to replace it, or choose another table (?table=NAME)"
        )


class PostgresEntry(BackingEntry):
    """The manifest's ``backing`` of a PostgreSQL knowledge base: where its rows live."""

    kind: Literal["postgres", "postgres-attached"]
    location: PostgresTable

    @model_validator(mode="after")
    def _kind_matches(self) -> PostgresEntry:
        if self.location.owned != (self.kind == "postgres"):
            raise ValueError(f"a {self.kind} backing with owned={self.location.owned}")
        return self


class PostgresOwnedBacking:
    """A table ragbound creates (``index --backing postgresql://...``) and appends to; it is
    searched in the database, and its chunk texts are read once at load."""

    kind: ClassVar[str] = "postgres"
    describe_kind: ClassVar[str] = "a PostgreSQL table ragbound owns"
    capabilities: ClassVar[Capabilities] = Capabilities(
        units=("chunk",), vector_dtypes=("float32",), approximate=True
    )
    holds_vectors: ClassVar[bool] = False

    def __init__(self, location: PostgresTable, *, saved_rows: int = 0):
        self.location = location
        self.saved_rows = saved_rows  # rows the last committed manifest counts (searched)

    @classmethod
    def for_url(cls, url: str, out: Path) -> PostgresOwnedBacking:
        """The table ``index --backing URL --out OUT`` fills (see :func:`owned_location`)."""
        return cls(owned_location(url, out))

    @classmethod
    def from_record(cls, record: BackingEntry) -> PostgresOwnedBacking:
        return cls(PostgresEntry.model_validate(record.model_dump()).location)

    @property
    def entry(self) -> BackingEntry:
        return PostgresEntry(kind=self.kind, location=self.location)

    def retriever(self, contents: Contents, granularity: tuple[Granularity, ...]) -> Retriever:
        """Search in the table, over the rows the last committed manifest counts."""
        refuse_missing(self, units=granularity)
        if not self.saved_rows:
            raise InputError("save this knowledge base first: its rows are searched in PostgreSQL")
        return PostgresStore(
            self.location,
            size=self.saved_rows,
            dimension=contents.manifest.embedder.dimension,
            similarity=contents.manifest.embedder.similarity,
        )

    def describe(
        self, contents: Contents, granularity: tuple[Granularity, ...]
    ) -> SearchInfo | None:
        refuse_missing(self, units=granularity)
        return None  # the table's search says (exact or pgvector's HNSW index)

    def check_target(self, out: Path, *, overwrite: bool, delete_other_files: bool) -> None:
        check_new_folder(out)
        check_owned_target(self.location, overwrite=overwrite)

    def save(
        self,
        contents: Contents,
        target: Path,
        *,
        overwrite: bool,
        delete_other_files: bool,
        notify: Callable[[str], None],
    ) -> KBManifest | None:
        """Commit the rows to the table, then the manifest to ``target`` (a new or empty
        folder, or the folder it was loaded from to append an ``add``). ``overwrite``
        replaces a table ragbound made before (never a folder's knowledge base, never
        another application's table)."""
        manifest_file = target / MANIFEST
        if contents.path is not None and manifest_file.exists() and same_dir(target, contents.path):
            committed = read_manifest(manifest_file, KBManifest, KB_FORMAT, "manifest")
            return self._append(contents, target, committed)
        check_new_folder(target)
        return self._create(contents, target, overwrite)

    def _commit_manifest(self, contents: Contents, target: Path) -> KBManifest:
        """Name the new segments, replace the manifest (the commit of every write)."""
        named = [
            s if not s.name.startswith("unsaved-") else s.model_copy(update={"name": f"{i:06d}"})
            for i, s in enumerate(contents.manifest.segments, start=1)
        ]
        manifest = contents.manifest.model_copy(update={"segments": named, "backing": self.entry})
        write_json(target / MANIFEST, manifest.model_dump(mode="json"))
        self.saved_rows = manifest.n_chunks
        return manifest

    def load(self, root: Path, manifest: KBManifest) -> Loaded:
        """The chunks come from the table, checked against the manifest."""
        if manifest.units.fine:
            # made by an earlier ragbound that recorded units it never stored in the table
            raise ArtifactError(
                f"{root / MANIFEST} records {granularity_label(manifest.units.fine)} units, "
                f"but {self.location.describe()} holds chunks only: index the corpus again "
                "(with --granularity chunk, or into a local knowledge base)"
            )
        with session(self.location) as connection:
            chunks = _read_owned(connection, self.location, manifest.n_chunks)
        _check_owned_rows(chunks, manifest, self.location)
        self.saved_rows = len(chunks)
        return Loaded(manifest, chunks, FineUnits.empty(manifest.embedder.dimension), None)

    def _create(self, contents: Contents, target: Path, overwrite: bool) -> KBManifest:
        location = self.location
        with session(location, create_extension=True) as connection, connection.transaction():
            _check_table_free(connection, location, overwrite)
            _create_owned_table(connection, location, contents.manifest)
            _copy_rows(connection, location, contents.chunks, _pending_vectors(contents), 0)
            if location.search == "hnsw":  # built once over every row, then kept
                connection.execute(hnsw_index_sql(location, contents.similarity))
        return self._commit_manifest(contents, target)

    def _append(self, contents: Contents, target: Path, committed: KBManifest) -> KBManifest | None:
        """Append the pending segments after the rows ``committed`` counts."""
        if not contents.pending:
            return None
        location = self.location
        start = committed.n_chunks
        with session(location) as connection, connection.transaction():
            connection.execute(_delete_from(location, start))  # an add that never committed
            vectors = _pending_vectors(contents)
            _copy_rows(connection, location, contents.chunks[start:], vectors, start)
        return self._commit_manifest(contents, target)


def _pending_vectors(contents: Contents) -> np.ndarray:
    parts = [new.vectors for new in contents.pending if new.vectors is not None]
    return np.concatenate(parts) if parts else np.empty((0, contents.dimension), np.float32)


def _delete_from(location: PostgresTable, start: int) -> Any:
    """DELETE the owned table's rows numbered ``start`` and up."""
    from psycopg import sql

    return sql.SQL("DELETE FROM {} WHERE {} >= {}").format(
        table_sql(location.table), sql.Identifier(ROW_COLUMN), sql.Literal(start)
    )


# ------------------------------------------------------------------------- owned tables
def _create_owned_table(connection: Any, location: PostgresTable, manifest: KBManifest) -> None:
    from psycopg import sql

    table = table_sql(location.table)
    connection.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    connection.execute(
        sql.SQL(
            "CREATE TABLE {} ({} bigint PRIMARY KEY, chunk_id text NOT NULL, doc_id text NOT "
            "NULL, source text NOT NULL, position integer NOT NULL, n_words integer NOT NULL, "
            "text text NOT NULL, metadata jsonb NOT NULL, {} vector({}) NOT NULL)"
        ).format(
            table,
            sql.Identifier(ROW_COLUMN),
            sql.Identifier(location.vector_column),
            sql.Literal(manifest.embedder.dimension),
        )
    )
    connection.execute(
        sql.SQL("COMMENT ON TABLE {} IS {}").format(
            table, sql.Literal(f"{OWNED_MARK} ({manifest.embedder.name}, {utc_now()})")
        )
    )


def _copy_rows(
    connection: Any,
    location: PostgresTable,
    chunks: Sequence[Chunk],
    vectors: np.ndarray,
    start: int,
) -> None:
    """COPY chunks and their vectors in, numbered from ``start``."""
    from psycopg import sql
    from psycopg.types.json import Jsonb

    if len(chunks) != len(vectors):
        raise ArtifactError(f"{len(chunks)} chunks but {len(vectors)} vectors to store")
    columns = sql.SQL(", ").join(
        map(sql.Identifier, (ROW_COLUMN, *_OWNED_COLUMNS, location.vector_column))
    )
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(table_sql(location.table), columns)
    with connection.cursor() as cursor, cursor.copy(statement) as copy:
        for row, (chunk, vector) in enumerate(zip(chunks, vectors, strict=True), start=start):
            copy.write_row(
                (
                    row,
                    chunk.id,
                    chunk.doc_id,
                    chunk.source,
                    chunk.position,
                    chunk.n_words,
                    chunk.text,
                    Jsonb(chunk.metadata),
                    np.ascontiguousarray(vector, np.float32),
                )
            )


def _read_owned(connection: Any, location: PostgresTable, n_rows: int) -> list[Chunk]:
    from psycopg import sql

    query = sql.SQL("SELECT {} FROM {} WHERE {} < %s ORDER BY {}").format(
        sql.SQL(", ").join(map(sql.Identifier, _OWNED_COLUMNS)),
        table_sql(location.table),
        sql.Identifier(ROW_COLUMN),
        sql.Identifier(ROW_COLUMN),
    )
    names = ("id", "doc_id", "source", "position", "n_words", "text", "metadata")
    return [
        Chunk(**dict(zip(names, row, strict=True))) for row in connection.execute(query, (n_rows,))
    ]


def _check_owned_rows(chunks: list[Chunk], manifest: KBManifest, location: PostgresTable) -> None:
    if len(chunks) != manifest.n_chunks or corpus_hash(chunks) != manifest.corpus_hash:
        raise ArtifactError(
            f"{location.describe()} no longer holds the {manifest.n_chunks} chunks the "
            f"manifest records (found {len(chunks)}, or other texts): it was changed outside "
            "ragbound; index the corpus again"
        )


# ---------------------------------------------------------------------- attached tables
# the columns LangChain (langchain-postgres) and LlamaIndex (PGVectorStore) write, in the
# order they are looked for when attach names none
TEXT_COLUMNS = ("text", "document", "content")
VECTOR_COLUMNS = ("embedding", "vector")
METADATA_COLUMNS = ("metadata_", "cmetadata", "metadata")


class PostgresAccess(Access):
    """Another application's table with a pgvector column."""

    location: PostgresTable

    def __init__(self, location: PostgresTable):
        super().__init__(location)
        self._connection: Any = None
        self.embedder: Similarity = "cosine"  # the operator searches use (the embedder's)

    def errors(self) -> Any:
        return database_errors(self.location.describe())

    @property
    def connection(self) -> Any:
        if self._connection is None or self._connection.closed:
            self._connection = search_connection(self.location)
        return self._connection

    def settle(self, dimension: int) -> PostgresTable:
        """The key, text, vector and metadata columns settled (named, or found where
        LangChain and LlamaIndex put them; the key defaults to the primary key), after
        checking they exist and, for ``search=hnsw``, the index (the vectors' dimension is
        the template's sample check)."""
        location = self.location
        columns = table_columns(self.connection, location.table)
        if not columns:
            raise InputError(f"{location.describe()}: no such table")
        update: dict[str, Any] = {
            "text_column": location.text_column or _first(columns, TEXT_COLUMNS),
            "vector_column": location.vector_column or _first(columns, VECTOR_COLUMNS),
            "metadata_column": next(
                (c for c in METADATA_COLUMNS if columns.get(c, "").startswith("json")), None
            ),
        }
        if location.key_column == ROW_COLUMN and ROW_COLUMN not in columns:
            update["key_column"] = _primary_key(self.connection, location)
        location = location.model_copy(update=update)
        named = {
            "--text-column": location.text_column,
            "--vector-column": location.vector_column,
            "--id-column": location.key_column,
            **{f"--where {column}=...": column for column in location.where},
        }
        require_columns(columns, location, named)
        if location.search == "hnsw":
            require_hnsw_index(self.connection, location, self.embedder)
        return location

    def read(self) -> Rows:
        """One row per table row with text and vector (and matching ``where``), in key order."""
        found = self.connection.execute(self._select()).fetchall()
        rows = Rows()
        for key, text, *metadata in found:
            rows.add(key, text, _json(metadata[0]) if metadata else None)
        if len(set(rows.keys)) != len(rows.keys):
            raise InputError(
                f"{self.location.describe()}: column {self.location.key_column!r} has duplicate "
                "values; name a unique column with --id-column"
            )
        return rows

    def _select(self, extra: str = "", where: str = "", order: str = "{key}::text") -> Any:
        """SELECT key, text[, metadata] over the rows the table lends: filter, text, vector."""
        from psycopg import sql

        location = self.location
        meta = ", {m}::jsonb" if location.metadata_column else ""
        return sql.SQL(
            "SELECT {key}::text, {text}::text" + meta + extra + " FROM {t} WHERE {w} AND {text} "
            "IS NOT NULL AND {v} IS NOT NULL" + where + " ORDER BY " + order
        ).format(
            key=sql.Identifier(location.key_column),
            text=sql.Identifier(location.text_column),
            v=sql.Identifier(location.vector_column),
            m=sql.Identifier(location.metadata_column or "-"),
            t=table_sql(location.table),
            w=filter_sql(location.where),
        )

    def vectors(self, keys: Sequence[str]) -> np.ndarray:
        query = self._select(", {v}", " AND {key}::text = ANY(%s)")
        found = {row[0]: row[-1] for row in self.connection.execute(query, (list(keys),))}
        return np.array([_as_array(found[key]) for key in keys], dtype=np.float64)

    def query(self, vectors: np.ndarray, depth: int) -> list[list[Found]]:
        statement = search_sql(self.location, self.embedder, without_flag=TRIPWIRE_FLAG)
        found: list[list[Found]] = [[] for _ in vectors]
        for number, key, distance in self.connection.execute(statement, (list(vectors), depth)):
            found[number - 1].append(Found(key, float(distance)))
        return found

    def similarities(self, scores: np.ndarray) -> np.ndarray:
        return distance_similarities(scores, self.embedder)

    def search_info(self, similarity: Similarity) -> SearchInfo:
        return search_info(self.location, similarity)

    def similarity(self, embedder: Similarity) -> Similarity:
        if embedder not in ("cosine", "dot"):
            raise InputError(f"a pgvector store scores by cosine or dot, not {embedder}")
        self.embedder = embedder
        return embedder


def _first(columns: dict[str, str], names: Sequence[str]) -> str:
    return next((name for name in names if name in columns), names[0])


def _json(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        value = json.loads(value)
    return value if isinstance(value, dict) else None


def _primary_key(connection: Any, location: PostgresTable) -> str:
    rows = connection.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary",
        (regclass_name(location.table),),
    ).fetchall()
    if len(rows) != 1:
        raise InputError(
            f"{location.describe()} has no single-column primary key: name the column that "
            "identifies a row with --id-column"
        )
    return rows[0][0]


def _as_array(vector: Any) -> np.ndarray:
    """pgvector's ``Vector`` (or an array, by version) as float32."""
    values = vector.to_numpy() if hasattr(vector, "to_numpy") else vector
    return np.asarray(values, dtype=np.float32)


class PostgresAttachedBacking(AttachedBacking):
    """Another application's table (``attach postgresql://...``), read in place."""

    kind: ClassVar[str] = "postgres-attached"
    describe_kind: ClassVar[str] = "a PostgreSQL table another application owns"
    entry_type = PostgresEntry
    access_type = PostgresAccess

    @classmethod
    def locate(
        cls,
        url: str,
        *,
        table: str,
        text_column: str | None = None,
        vector_column: str | None = None,
        id_column: str | None = None,
        where: Sequence[str] = (),
        search: str = "exact",
        ef_search: int | None = None,
    ) -> PostgresTable:
        """``table`` (NAME or SCHEMA.NAME); the columns of the texts and vectors (default:
        where LangChain or LlamaIndex put them); ``id_column`` (default: the table's
        single-column primary key); ``where`` ``COLUMN=VALUE`` filters (ANDed, compared as
        text), e.g. ``collection_id=<uuid>`` for LangChain's table; ``search="hnsw"``
        searches with the HNSW index the table must already have (approximate,
        ``ef_search`` candidates per query)."""
        dsn, parameters = split_store_url(url)
        if parameters:
            raise InputError(
                "give attach's table and search as options (--table, --search, --ef-search), "
                f"not in the URL ({', '.join(parameters)})"
            )
        method, ef = search_method(search, ef_search)
        columns = {"text_column": text_column, "vector_column": vector_column}
        return PostgresTable(
            dsn=dsn,
            table=check_identifier(table, "table"),
            owned=False,
            key_column=check_identifier(id_column, "column") if id_column else ROW_COLUMN,
            where=dict(parse_filter(item) for item in where),
            search=method,
            ef_search=ef,
            **{name: check_identifier(c, "column") if c else "" for name, c in columns.items()},
        )

    @classmethod
    def check_url(cls, url: str) -> None:
        """InputError unless ``url`` is a postgresql:// URL ``attach`` takes."""
        split_store_url(url)

    @property
    def source(self) -> str:
        return self.location.table
