"""Knowledge bases whose rows live in PostgreSQL + pgvector: owned or attached.

The knowledge-base folder holds only ``manifest.json`` (plus the calibration and tripwires,
as for any knowledge base); its ``store`` field names the DSN (never the password), the
table and its columns. Searching runs in the database (:class:`~ragbound.stores.postgres.
PostgresStore`); the chunk texts are read once when the knowledge base is loaded.

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
from typing import Any

import numpy as np

from ragbound.artifacts import read_manifest, sha256_text, utc_now, write_json
from ragbound.corpus import Chunk, ChunkingParams, Document
from ragbound.embedders import canonical_spec, is_lexical, load_dense_embedder
from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge import (
    KB_FORMAT,
    LOCK_WHAT,
    MANIFEST,
    KBManifest,
    KnowledgeBase,
    Segment,
    check_index_target,
    corpus_hash,
)
from ragbound.locking import writer_lock
from ragbound.stores import Retriever
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


def check_new_folder(out: Path) -> None:
    """A PostgreSQL knowledge base's folder must be new or empty (InputError otherwise)."""
    if (Path(out) / MANIFEST).exists():
        raise InputError(
            f"{out} already holds a knowledge base: a PostgreSQL knowledge base is saved into "
            "a new or empty folder"
        )
    check_index_target(Path(out))


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


class PostgresKnowledgeBase(KnowledgeBase):
    """A :class:`~ragbound.knowledge.KnowledgeBase` whose chunks and vectors live in a
    PostgreSQL table; ``search`` runs there (exact). ``vectors`` are not held here."""

    _saved_rows = 0  # rows the last committed manifest counts (what search may return)
    _keys: list[str] | None = None  # attached tables: each row's key, in row order

    # --------------------------------------------------------------------- building
    def place(self, location: PostgresTable) -> None:
        """Say where an unsaved, freshly built knowledge base's rows will go (owned)."""
        if self.manifest.embedder.kind != "dense":
            raise InputError(
                "a PostgreSQL knowledge base stores vectors: use a dense embedder (minilm, "
                "mpnet or a model folder), not bm25"
            )
        self.manifest = self.manifest.model_copy(update={"store": location})

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
    ) -> PostgresKnowledgeBase:
        """Use another application's table as it is: checks its columns, the vectors'
        dimension and (on ``sample`` re-embedded texts) that ``embedder`` made them.

        ``where`` holds ``COLUMN=VALUE`` filters (ANDed, compared as text), e.g.
        ``collection_id=<uuid>`` for LangChain's table. ``id_column`` defaults to the
        table's single-column primary key. ``search="hnsw"`` searches with the HNSW index the
        table must already have (approximate, ``ef_search`` candidates per query).
        Unsaved: ``save(folder)`` writes the manifest.
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
            store=location,
        )
        kb = cls(manifest, chunks, None, embedder=dense)
        kb._saved_rows = len(chunks)
        kb._keys = [chunk.doc_id for chunk in chunks]
        return kb

    @classmethod
    def open(cls, root: Path, manifest: KBManifest) -> PostgresKnowledgeBase:
        """Load a saved PostgreSQL knowledge base: its chunks come from the table.

        An owned table must hold the rows the manifest counts, with its content hash
        (ArtifactError otherwise). An attached table is read as it is now.
        """
        location = _location_of(manifest)
        connection = connect(location.dsn)
        try:
            with database_errors(location.describe()):
                if location.owned:
                    chunks = _read_owned(connection, location, manifest.n_chunks)
                else:
                    chunks = _read_attached(connection, location)
        finally:
            connection.close()
        if location.owned:
            _check_owned_rows(chunks, manifest, location)
        elif corpus_hash(chunks) != manifest.corpus_hash:  # the application changed its rows
            manifest = manifest.model_copy(
                update={
                    "n_chunks": len(chunks),
                    "n_documents": len(chunks),
                    "corpus_hash": corpus_hash(chunks),
                }
            )
        kb = cls(manifest, chunks, None, path=root)
        kb._saved_rows = len(chunks)
        kb._base_names = [s.name for s in manifest.segments]
        if not location.owned:
            kb._keys = [chunk.doc_id for chunk in chunks]
        return kb

    # ----------------------------------------------------------------------- search
    @property
    def location(self) -> PostgresTable:
        """Where the rows live (DSN without password, table, columns)."""
        return _location_of(self.manifest)

    @property
    def store(self) -> Retriever:
        """Exact search in the table, over the rows the last committed manifest counts."""
        if self._store is None:
            if not self._saved_rows:
                raise InputError(
                    "save this knowledge base first: its rows are searched in PostgreSQL"
                )
            self._store = PostgresStore(
                self.location,
                size=self._saved_rows,
                dimension=self.manifest.embedder.dimension,
                similarity=self.manifest.embedder.similarity,
                keys=self._keys,
            )
        return self._store

    @property
    def vectors(self) -> np.ndarray:
        raise InputError(
            f"the vectors of this knowledge base stay in {self.location.describe()}; "
            "search it instead"
        )

    def add_documents(self, documents: Sequence[Document], **options: Any) -> int:
        """Owned tables only: see :meth:`KnowledgeBase.add_documents` (same options)."""
        if not self.location.owned:
            raise InputError(
                f"{self.location.describe()} belongs to another application: add documents "
                "there; ragbound reads its new rows on the next load (then calibrate again)"
            )
        return super().add_documents(documents, **options)

    # ------------------------------------------------------------------ persistence
    def save(
        self,
        path: str | Path | None = None,
        *,
        overwrite: bool = False,
        delete_other_files: bool = False,
        on_wait: Callable[[str], None] | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> Path:
        """Commit the rows to the table, then the manifest to ``path`` (a new or empty folder,
        or the folder it was loaded from to append an ``add``).

        Under the knowledge base's writer lock, like a local save. ``overwrite`` replaces an
        owned table ragbound made before (never a folder's knowledge base, never another
        application's table).
        """
        target = Path(path) if path is not None else self.path
        if target is None:
            raise InputError("no directory given to save the knowledge base to")
        with writer_lock(target, what=LOCK_WHAT, on_wait=on_wait):
            manifest_file = target / MANIFEST
            if self.path is not None and manifest_file.exists() and _same(target, self.path):
                committed = read_manifest(manifest_file, KBManifest, KB_FORMAT, "manifest")
                self._append(target, committed)
            else:
                check_new_folder(target)
                self._create(target, overwrite)
        self.path = target
        return target

    def _create(self, target: Path, overwrite: bool) -> None:
        location = self.location
        if location.owned:
            connection = connect(location.dsn, create_extension=True)
            try:
                with database_errors(location.describe()), connection.transaction():
                    _check_table_free(connection, location, overwrite)
                    _create_owned_table(connection, location, self.manifest)
                    _copy_rows(connection, location, self.chunks, self._new_vectors(), 0)
                    if location.search == "hnsw":  # built once over every row, then kept
                        connection.execute(hnsw_index_sql(location, self.similarity))
            finally:
                connection.close()
        self._commit_manifest(target, self.manifest.segments)

    def _append(self, target: Path, committed: KBManifest) -> None:
        """Append the unsaved segments after the rows ``committed`` counts."""
        if [s.name for s in committed.segments] != self._base_names:
            self._rebase(KnowledgeBase.load(target))  # another writer committed meanwhile
        if not self._unsaved:
            return
        location = self.location
        start = committed.n_chunks
        connection = connect(location.dsn)
        try:
            with database_errors(location.describe()), connection.transaction():
                # rows of an add that never committed its manifest
                connection.execute(_delete_from(location, start))
                _copy_rows(connection, location, self.chunks[start:], self._new_vectors(), start)
        finally:
            connection.close()
        self._commit_manifest(target, self.manifest.segments)

    def _new_vectors(self) -> np.ndarray:
        parts = [new.vectors for new in self._unsaved if new.vectors is not None]
        return np.concatenate(parts) if parts else np.empty((0, self.dimension), np.float32)

    def _commit_manifest(self, target: Path, segments: list[Segment]) -> None:
        """Name the new segments, replace the manifest (the commit of every write)."""
        named = [
            s if not s.name.startswith("unsaved-") else s.model_copy(update={"name": f"{i:06d}"})
            for i, s in enumerate(segments, start=1)
        ]
        manifest = self.manifest.model_copy(update={"segments": named})
        write_json(target / MANIFEST, manifest.model_dump(mode="json"))
        self.manifest = manifest
        self._base_names = [s.name for s in named]
        self._unsaved = []
        self._saved_rows = manifest.n_chunks
        self._store = None


def _same(a: Path, b: Path) -> bool:
    return a.absolute() == b.absolute() or (a.exists() and b.exists() and a.samefile(b))


def _location_of(manifest: KBManifest) -> PostgresTable:
    location = manifest.store
    if location is None:
        raise InputError("this knowledge base has no PostgreSQL store (place it first)")
    return location


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
    cosines = _row_cosines(stored, fresh)
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


def _row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.einsum("ij,ij->i", a, b) / np.maximum(norms, np.finfo(np.float32).tiny)
