"""The PostgreSQL backings: a knowledge base whose rows live in PostgreSQL + pgvector.

The knowledge-base folder holds only ``manifest.json`` (plus the calibration and tripwires,
as for any knowledge base); its ``backing`` field (kind ``postgres`` or
``postgres-attached``) names the DSN (never the password), the table and its columns. Both
store chunks only: sentence and window units are refused before any work. Searching runs in
the database (:class:`~ragbound.stores.postgres.PostgresStore`); the chunk texts are read
once when the knowledge base is loaded.

- **owned** (``ragbound index CORPUS --out KB --store postgresql://...``): ragbound creates
  the table (``row_number`` = the knowledge base's row, chunk fields, ``embedding``) and
  appends to it on ``add``: rows past the manifest's ``n_chunks`` are an add that did not
  commit (a crash between the database and the manifest), never searched and replaced by the
  next add. Loading checks the rows against the manifest's content hash.
- **attached** (``ragbound attach postgresql://... --table T ...``): another application's
  table (LangChain's ``langchain_pg_embedding``, LlamaIndex's ``data_<name>``, ...) is read
  in place, never copied or re-embedded. Attaching re-embeds a sample of its texts and
  refuses when the stored vectors were made by another embedder. When the table changes
  afterwards, the next load sees its new rows: the fingerprint changes and calibrations made
  before refuse to run (calibrate again).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import model_validator

from ragbound.artifacts import read_manifest, sha256_text, utc_now, write_json
from ragbound.corpus import Chunk, ChunkingParams
from ragbound.corpus.units import Granularity, granularity_label
from ragbound.embedders import canonical_spec, is_lexical, load_dense_embedder
from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge.backing import ATTACHED, Capabilities, Contents, Loaded, refuse_missing
from ragbound.knowledge.layout import KB_FORMAT, MANIFEST
from ragbound.knowledge.manifest import BackingRecord, KBManifest, corpus_hash
from ragbound.knowledge.segments import FineUnits, check_new_folder, same_dir
from ragbound.stores import Retriever, SearchInfo
from ragbound.stores.postgres import (
    OWNED_MARK,
    ROW_COLUMN,
    PostgresStore,
    PostgresTable,
    check_dimension,
    check_identifier,
    connect,
    database_errors,
    default_table,
    filter_sql,
    hnsw_index_sql,
    parse_filter,
    regclass_name,
    require_columns,
    require_hnsw_index,
    search_method,
    split_store_url,
    stored_dimension,
    table_columns,
    table_sql,
)

DEFAULT_SAMPLE = 32  # stored texts re-embedded by attach
# median cosine between a stored vector and the re-embedded text that counts as the same
# embedder: the same model on other hardware or library versions stays above 0.999
SAME_EMBEDDER_COSINE = 0.99
_OWNED_COLUMNS = ("chunk_id", "doc_id", "source", "position", "n_words", "text", "metadata")


def owned_location(url: str, out: Path) -> PostgresTable:
    """Where ``index --store URL --out OUT`` puts its rows: the URL's ``table`` parameter,
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
    connection = connect(location.dsn, create_extension=True)
    try:
        with database_errors(location.describe()):
            _check_table_free(connection, location, overwrite)
    finally:
        connection.close()


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


class PostgresRecord(BackingRecord):
    """The manifest's ``backing`` of a PostgreSQL knowledge base: where its rows live."""

    kind: Literal["postgres", "postgres-attached"]
    location: PostgresTable

    @model_validator(mode="after")
    def _kind_matches(self) -> PostgresRecord:
        if self.location.owned != (self.kind == "postgres"):
            raise ValueError(f"a {self.kind} backing with owned={self.location.owned}")
        return self


class PostgresBacking:
    """What owned and attached tables share: the search in the database, loading."""

    kind: ClassVar[str]
    describe_kind: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    holds_vectors: ClassVar[bool] = False

    def __init__(self, location: PostgresTable, *, saved_rows: int = 0):
        self.location = location
        self.saved_rows = saved_rows  # rows the last committed manifest counts (searched)
        self.keys: list[str] | None = None  # attached tables: each row's key, in row order

    @classmethod
    def from_record(cls, record: BackingRecord) -> PostgresBacking:
        return cls(PostgresRecord.model_validate(record.model_dump()).location)

    @property
    def record(self) -> BackingRecord:
        return PostgresRecord(kind=self.kind, location=self.location)

    def retriever(self, contents: Contents, granularity: tuple[Granularity, ...]) -> Retriever:
        """Search in the table, over the rows the last committed manifest counts."""
        if granularity != ("chunk",):
            refuse_missing(self, units=granularity)
        if not self.saved_rows:
            raise InputError("save this knowledge base first: its rows are searched in PostgreSQL")
        return PostgresStore(
            self.location,
            size=self.saved_rows,
            dimension=contents.manifest.embedder.dimension,
            similarity=contents.manifest.embedder.similarity,
            keys=self.keys,
        )

    def describe(
        self, contents: Contents, granularity: tuple[Granularity, ...]
    ) -> SearchInfo | None:
        if granularity != ("chunk",):
            refuse_missing(self, units=granularity)
        return None  # the table's search says (exact or pgvector's HNSW index)

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
    ) -> KBManifest | None:
        """Commit the rows to the table, then the manifest to ``target`` (a new or empty
        folder, or the folder it was loaded from to append an ``add``). ``overwrite``
        replaces an owned table ragbound made before (never a folder's knowledge base, never
        another application's table)."""
        manifest_file = target / MANIFEST
        if contents.path is not None and manifest_file.exists() and same_dir(target, contents.path):
            committed = read_manifest(manifest_file, KBManifest, KB_FORMAT, "manifest")
            return self._append(contents, target, committed)
        check_new_folder(target)
        return self._create(contents, target, overwrite)

    def _create(self, contents: Contents, target: Path, overwrite: bool) -> KBManifest:
        return self._commit_manifest(contents, target)

    def _append(self, contents: Contents, target: Path, committed: KBManifest) -> KBManifest | None:
        refuse_missing(self, add=True)
        return None

    def _commit_manifest(self, contents: Contents, target: Path) -> KBManifest:
        """Name the new segments, replace the manifest (the commit of every write)."""
        named = [
            s if not s.name.startswith("unsaved-") else s.model_copy(update={"name": f"{i:06d}"})
            for i, s in enumerate(contents.manifest.segments, start=1)
        ]
        manifest = contents.manifest.model_copy(update={"segments": named, "backing": self.record})
        write_json(target / MANIFEST, manifest.model_dump(mode="json"))
        self.saved_rows = manifest.n_chunks
        return manifest

    def load(self, root: Path, manifest: KBManifest) -> Loaded:
        """The chunks come from the table (checked against the manifest when owned)."""
        if manifest.units.fine:
            # made by an earlier ragbound that recorded units it never stored in the table
            raise ArtifactError(
                f"{root / MANIFEST} records {granularity_label(manifest.units.fine)} units, "
                f"but {self.location.describe()} holds chunks only: index the corpus again "
                "(with --granularity chunk, or into a local knowledge base)"
            )
        connection = connect(self.location.dsn)
        try:
            with database_errors(self.location.describe()):
                chunks = self._read(connection, manifest)
        finally:
            connection.close()
        manifest = self._checked(chunks, manifest)
        self.saved_rows = len(chunks)
        return Loaded(manifest, chunks, FineUnits.empty(manifest.embedder.dimension), None)

    def _read(self, connection: Any, manifest: KBManifest) -> list[Chunk]:
        raise NotImplementedError

    def _checked(self, chunks: list[Chunk], manifest: KBManifest) -> KBManifest:
        raise NotImplementedError


class PostgresOwnedBacking(PostgresBacking):
    """A table ragbound creates (``index --store postgresql://...``) and appends to."""

    kind: ClassVar[str] = "postgres"
    describe_kind: ClassVar[str] = "a PostgreSQL table ragbound owns"
    capabilities: ClassVar[Capabilities] = Capabilities(
        units=("chunk",), vector_dtypes=("float32",), approximate=True
    )

    @classmethod
    def for_url(cls, url: str, out: Path) -> PostgresOwnedBacking:
        """The table ``index --store URL --out OUT`` fills (see :func:`owned_location`)."""
        return cls(owned_location(url, out))

    def check_target(self, out: Path, *, overwrite: bool, delete_other_files: bool) -> None:
        check_new_folder(out)
        check_owned_target(self.location, overwrite=overwrite)

    def _create(self, contents: Contents, target: Path, overwrite: bool) -> KBManifest:
        location = self.location
        connection = connect(location.dsn, create_extension=True)
        try:
            with database_errors(location.describe()), connection.transaction():
                _check_table_free(connection, location, overwrite)
                _create_owned_table(connection, location, contents.manifest)
                _copy_rows(connection, location, contents.chunks, _pending_vectors(contents), 0)
                if location.search == "hnsw":  # built once over every row, then kept
                    connection.execute(hnsw_index_sql(location, contents.similarity))
        finally:
            connection.close()
        return self._commit_manifest(contents, target)

    def _append(self, contents: Contents, target: Path, committed: KBManifest) -> KBManifest | None:
        """Append the pending segments after the rows ``committed`` counts."""
        if not contents.pending:
            return None
        location = self.location
        start = committed.n_chunks
        connection = connect(location.dsn)
        try:
            with database_errors(location.describe()), connection.transaction():
                # rows of an add that never committed its manifest
                connection.execute(_delete_from(location, start))
                _copy_rows(
                    connection, location, contents.chunks[start:], _pending_vectors(contents), start
                )
        finally:
            connection.close()
        return self._commit_manifest(contents, target)

    def _read(self, connection: Any, manifest: KBManifest) -> list[Chunk]:
        return _read_owned(connection, self.location, manifest.n_chunks)

    def _checked(self, chunks: list[Chunk], manifest: KBManifest) -> KBManifest:
        _check_owned_rows(chunks, manifest, self.location)
        return manifest


class PostgresAttachedBacking(PostgresBacking):
    """Another application's table (``attach postgresql://...``), read in place."""

    kind: ClassVar[str] = "postgres-attached"
    describe_kind: ClassVar[str] = "a PostgreSQL table another application owns"
    capabilities: ClassVar[Capabilities] = ATTACHED

    @staticmethod
    def check_url(url: str) -> None:
        """ValueError unless ``url`` is a postgresql:// URL ``attach`` takes."""
        split_store_url(url)

    def _read(self, connection: Any, manifest: KBManifest) -> list[Chunk]:
        chunks = _read_attached(connection, self.location)
        self.keys = [chunk.doc_id for chunk in chunks]
        return chunks

    def _checked(self, chunks: list[Chunk], manifest: KBManifest) -> KBManifest:
        if corpus_hash(chunks) == manifest.corpus_hash:
            return manifest
        # the application changed its rows: the fingerprint changes with them
        return manifest.model_copy(
            update={
                "n_chunks": len(chunks),
                "n_documents": len(chunks),
                "corpus_hash": corpus_hash(chunks),
            }
        )

    @classmethod
    def attach(
        cls,
        url: str,
        *,
        table: str,
        text_column: str,
        vector_column: str,
        id_column: str | None = None,
        where: Sequence[str] = (),
        embedder: str = "minilm",
        sample: int = DEFAULT_SAMPLE,
        search: str = "exact",
        ef_search: int | None = None,
    ) -> tuple[PostgresAttachedBacking, KBManifest, list[Chunk], Any]:
        """Check another application's table and describe it: its columns, the vectors'
        dimension and (on ``sample`` re-embedded texts) that ``embedder`` made them.

        ``where`` holds ``COLUMN=VALUE`` filters (ANDed, compared as text), e.g.
        ``collection_id=<uuid>`` for LangChain's table. ``id_column`` defaults to the
        table's single-column primary key. ``search="hnsw"`` searches with the HNSW index the
        table must already have (approximate, ``ef_search`` candidates per query).
        Returns the backing, a manifest, the rows as chunks and the loaded embedder.
        """
        dsn, parameters = split_store_url(url)
        if parameters:
            raise InputError(
                "give attach's table and search as options (--table, --search, --ef-search), "
                f"not in the URL ({', '.join(parameters)})"
            )
        method, ef = search_method(search, ef_search)
        spec = canonical_spec(embedder)
        if is_lexical(spec):
            raise InputError("attach needs the dense embedder that made the stored vectors")
        dense = load_dense_embedder(spec)
        location = PostgresTable(
            dsn=dsn,
            table=check_identifier(table, "table"),
            owned=False,
            text_column=check_identifier(text_column, "column"),
            vector_column=check_identifier(vector_column, "column"),
            key_column=check_identifier(id_column, "column") if id_column else ROW_COLUMN,
            where=dict(parse_filter(item) for item in where),
            search=method,
            ef_search=ef,
        )
        connection = connect(dsn)
        try:
            with database_errors(location.describe()):
                location = _checked_attachment(connection, location, id_column is None)
                check_dimension(
                    _dimension_of(connection, location),
                    dense.info.dimension,
                    location,
                    dense.info.name,
                )
                if method == "hnsw":
                    require_hnsw_index(connection, location, dense.info.similarity)
                chunks = _read_attached(connection, location)
                _check_embedder(connection, location, dense, sample)
        finally:
            connection.close()
        now = utc_now()
        backing = cls(location, saved_rows=len(chunks))
        backing.keys = [chunk.doc_id for chunk in chunks]
        manifest = KBManifest(
            created_at=now,
            updated_at=now,
            embedder_spec=spec,
            embedder=dense.info,
            chunking=ChunkingParams(),
            text_field=location.text_column,
            id_field=location.key_column,
            n_chunks=len(chunks),
            n_documents=len(chunks),
            corpus_hash=corpus_hash(chunks),
            segments=[],
            backing=backing.record,
        )
        return backing, manifest, chunks, dense


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
def _checked_attachment(connection: Any, location: PostgresTable, guess_key: bool) -> PostgresTable:
    """The location with its key column settled (the primary key when not given), after
    checking every named column exists."""
    columns = table_columns(connection, location.table)
    if guess_key and columns:
        location = location.model_copy(update={"key_column": _primary_key(connection, location)})
    named = {
        "--text-column": location.text_column,
        "--vector-column": location.vector_column,
        "--id-column": location.key_column,
        **{f"--where {column}=...": column for column in location.where},
    }
    require_columns(columns, location, named)
    return location


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


def _dimension_of(connection: Any, location: PostgresTable) -> int | None:
    declared = table_columns(connection, location.table)[location.vector_column]
    return stored_dimension(connection, location, declared)


def _attached_rows(location: PostgresTable, extra: str = "", order: str = "{key}::text") -> Any:
    """SELECT over the rows an attached table lends: filter, non-null text and vector."""
    from psycopg import sql

    return sql.SQL(
        "SELECT {key}::text, {text}::text" + extra + " FROM {t} WHERE {w} AND {text} IS NOT "
        "NULL AND {v} IS NOT NULL ORDER BY " + order
    ).format(
        key=sql.Identifier(location.key_column),
        text=sql.Identifier(location.text_column),
        v=sql.Identifier(location.vector_column),
        t=table_sql(location.table),
        w=filter_sql(location.where),
    )


def _read_attached(connection: Any, location: PostgresTable) -> list[Chunk]:
    """One chunk per row, in key order: id = hash of key and text, doc_id = the key."""
    rows = connection.execute(_attached_rows(location)).fetchall()
    if not rows:
        raise InputError(
            f"{location.describe()} has no rows with text and vector{_filtered(location)}"
        )
    keys = [key for key, _ in rows]
    if len(set(keys)) != len(keys):
        raise InputError(
            f"{location.describe()}: column {location.key_column!r} has duplicate values; "
            "name a unique column with --id-column"
        )
    return [
        Chunk(
            id=sha256_text(key, text)[:16],
            text=text,
            doc_id=key,
            source=location.table,
            position=0,
            n_words=len(text.split()),
        )
        for key, text in rows
    ]


def _filtered(location: PostgresTable) -> str:
    if not location.where:
        return ""
    return " matching " + " and ".join(f"{c}={v!r}" for c, v in sorted(location.where.items()))


def _check_embedder(connection: Any, location: PostgresTable, dense: Any, sample: int) -> None:
    """Re-embed ``sample`` stored texts (a fixed pseudo-random choice: ordered by the md5 of
    their key) and refuse unless their stored vectors point the same way (median cosine)."""
    query = _attached_rows(location, ", {v}", "md5({key}::text) LIMIT %s")
    rows = connection.execute(query, (sample,)).fetchall()
    stored = np.array([_as_array(row[2]) for row in rows])
    fresh = dense.encode([row[1] for row in rows])
    cosines = row_cosines(stored, fresh)
    median = float(np.median(cosines))
    if median < SAME_EMBEDDER_COSINE:
        raise InputError(
            f"the vectors in {location.describe()} were not made by the embedder "
            f"{dense.info.name}: re-embedding {len(rows)} stored texts gives a median cosine of "
            f"{median:.3f} with the stored vectors (at least {SAME_EMBEDDER_COSINE} expected); "
            "pass the embedder that filled the table with --embedder"
        )


def _as_array(vector: Any) -> np.ndarray:
    """pgvector's ``Vector`` (or an array, by version) as float32."""
    values = vector.to_numpy() if hasattr(vector, "to_numpy") else vector
    return np.asarray(values, dtype=np.float32)


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.einsum("ij,ij->i", a, b) / np.maximum(norms, np.finfo(np.float32).tiny)
