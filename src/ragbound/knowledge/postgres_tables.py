"""PostgreSQL + pgvector tables: where a knowledge base's rows are, how to reach and search them.

What the PostgreSQL backings (:mod:`ragbound.knowledge.postgres`) share. Rows live in a
table, never in this process. A :class:`PostgresTable` says where (a DSN without the
password, a table, its text, vector and key columns, an optional equality filter);
:class:`PostgresStore` searches it, one round trip per batch of queries. The password comes
from ``PGPASSWORD`` or ``~/.pgpass`` (libpq's own lookup), never from a file ragbound
writes. Needs the ``postgres`` extra (``psycopg`` 3 and ``pgvector``); nothing here imports
them until a database is used.

pgvector computes *distances*; they become similarities here, once: cosine distance ``<=>``
gives 1 - d, negative inner product ``<#>`` gives -x, so every statistic sees the numbers
the local exact store gives on the same vectors.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import numpy as np
from pydantic import Field

from ragbound.embedders.base import Similarity
from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge.attached import AttachedLocation, first_line
from ragbound.stores.base import Hits, QueryKind, SearchInfo, query_vectors

SCHEMES = ("postgresql", "postgres")
# the column an owned table numbers its rows by (the knowledge base's row, 0-based)
ROW_COLUMN = "row_number"
OWNED_TEXT_COLUMN = "text"
OWNED_VECTOR_COLUMN = "embedding"
# what an owned table's comment starts with: ragbound drops or appends only to such tables
OWNED_MARK = "ragbound knowledge base"
CONNECT_TIMEOUT = 10  # seconds before an unreachable database is an error
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_OPERATORS: dict[str, str] = {"cosine": "<=>", "dot": "<#>"}
# the HNSW operator class that orders by each operator
_OPCLASSES: dict[str, str] = {"cosine": "vector_cosine_ops", "dot": "vector_ip_ops"}
SearchMethod = Literal["exact", "hnsw"]
SEARCH_METHODS: tuple[SearchMethod, ...] = ("exact", "hnsw")
MAX_EF_SEARCH = 1000  # pgvector's upper bound for hnsw.ef_search
DEFAULT_EF_SEARCH = 40  # pgvector's default
# parameters of a store URL that are ragbound's, not libpq's
URL_PARAMETERS = ("table", "search", "ef_search")
INSTALL_HINT = "install the postgres extra: pip install 'ragbound[postgres]'"


class PostgresTable(AttachedLocation):
    """Where a knowledge base's rows live, as recorded in its manifest (no password).

    ``owned``: ragbound created the table and numbers its rows by ``row_number``; otherwise
    it is another application's table, read through ``key_column`` and filtered by
    ``where`` (column = value pairs, compared as text). ``search`` is ``exact`` (a
    sequential scan, index scans off) or ``hnsw`` (pgvector's HNSW index, approximate,
    with ``ef_search`` candidates per query).
    """

    dsn: str
    table: str
    owned: bool
    text_column: str = OWNED_TEXT_COLUMN
    vector_column: str = OWNED_VECTOR_COLUMN
    key_column: str = ROW_COLUMN
    where: dict[str, str] = Field(default_factory=dict)
    search: SearchMethod = "exact"
    ef_search: int | None = None
    metadata_column: str | None = None  # an attached table's JSON metadata, if it has one
    doc_field: None = None  # a row's document id is its key

    def describe(self) -> str:
        """``table`` at ``dsn`` for messages."""
        return f"table {self.table} at {self.dsn}"


# ----------------------------------------------------------------------- names and DSNs
def check_identifier(name: str, what: str) -> str:
    """A table or column name ragbound will quote: letters, digits, ``_`` and ``$``;
    a table may be schema-qualified (``schema.table``). Returns it unchanged."""
    parts = name.split(".")
    if not 1 <= len(parts) <= (2 if what == "table" else 1) or not all(
        _IDENTIFIER.fullmatch(part) for part in parts
    ):
        shape = "NAME or SCHEMA.NAME" if what == "table" else "NAME"
        raise InputError(
            f"{what} name {name!r} is not a plain SQL name ({shape}: letters, digits, _ and $, "
            "not starting with a digit)"
        )
    return name


def parse_filter(text: str) -> tuple[str, str]:
    """``COLUMN=VALUE`` -> (column, value): an equality on one column, no SQL."""
    column, sep, value = text.partition("=")
    if not sep or not column.strip():
        raise InputError(f"filter {text!r} must be COLUMN=VALUE (for example collection_id=abc)")
    return check_identifier(column.strip(), "column"), value


def split_store_url(url: str) -> tuple[str, dict[str, str]]:
    """(DSN, ragbound's parameters) of a ``postgresql://`` URL: ``table``, ``search``
    (exact or hnsw) and ``ef_search`` are taken out, libpq's own parameters stay.

    A password written in the URL is refused: the DSN is recorded in the manifest, so the
    password must come from ``PGPASSWORD`` or ``~/.pgpass``.
    """
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise InputError(f"{url!r} is not a postgresql:// URL (postgresql://USER@HOST/DATABASE)")
    if parts.password is not None:
        raise InputError(
            "the PostgreSQL URL holds a password: ragbound records the URL in the manifest, so "
            "remove it and set PGPASSWORD or a ~/.pgpass entry instead"
        )
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {key: value for key, value in query if key in URL_PARAMETERS}
    if "table" in ours:
        check_identifier(ours["table"], "table")
    search_method(ours.get("search", "exact"), ours.get("ef_search"))
    rest = urlencode([(key, value) for key, value in query if key not in URL_PARAMETERS])
    return urlunsplit(parts._replace(query=rest)), ours


def search_method(search: str, ef_search: str | int | None) -> tuple[SearchMethod, int | None]:
    """A checked (method, ef_search): ``ef_search`` only with hnsw, in 1..1000 (default 40)."""
    if search not in SEARCH_METHODS:
        raise InputError(f"search must be one of {', '.join(SEARCH_METHODS)}, got {search!r}")
    if search == "exact":
        if ef_search is not None:
            raise InputError("ef_search applies to search=hnsw only")
        return "exact", None
    try:
        value = DEFAULT_EF_SEARCH if ef_search is None else int(ef_search)
    except ValueError:
        raise InputError(f"ef_search must be an integer, got {ef_search!r}") from None
    if not 1 <= value <= MAX_EF_SEARCH:
        raise InputError(f"ef_search must be in 1..{MAX_EF_SEARCH}, got {value}")
    return "hnsw", value


def default_table(folder_name: str) -> str:
    """``ragbound_<folder>`` with every character that is not a letter or digit as ``_``."""
    cleaned = re.sub(r"[^A-Za-z0-9]+", "_", folder_name).strip("_").lower() or "kb"
    return f"ragbound_{cleaned}"[:63]


def _user_of(dsn: str) -> str:
    return unquote(urlsplit(dsn).username or "") or "(default user)"


# ------------------------------------------------------------------------- connections
def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise InputError(f"a PostgreSQL store needs psycopg: {INSTALL_HINT}") from exc
    return psycopg


def connect(dsn: str, *, create_extension: bool = False) -> Any:
    """An autocommit psycopg connection with pgvector's types registered.

    An unreachable server, a wrong or missing password, an unknown database or a database
    without the ``vector`` extension is an InputError naming the DSN (never the password).
    ``create_extension`` first runs ``CREATE EXTENSION IF NOT EXISTS vector`` (for a table
    ragbound creates).
    """
    psycopg = _psycopg()
    try:
        from pgvector.psycopg import register_vector
    except ImportError as exc:
        raise InputError(f"a PostgreSQL store needs pgvector: {INSTALL_HINT}") from exc
    try:
        connection = psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT, autocommit=True)
    except psycopg.OperationalError as exc:
        raise InputError(_connect_failure(dsn, exc)) from exc
    try:
        if create_extension:
            connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(connection)
    except psycopg.Error as exc:  # the vector type is unknown in this database
        connection.close()
        raise InputError(
            f"the database at {dsn} has no usable pgvector extension (CREATE EXTENSION "
            f"vector): {first_line(exc)}"
        ) from exc
    return connection


def _connect_failure(dsn: str, exc: Exception) -> str:
    """One clear sentence for a failed connection: which DSN, and what to do."""
    detail = " ".join(str(exc).split())
    lowered = detail.lower()
    if "password authentication failed" in lowered:
        return (
            f"wrong password for user {_user_of(dsn)} at {dsn}: set PGPASSWORD or a ~/.pgpass "
            f"entry ({detail})"
        )
    if "no password supplied" in lowered or "fe_sendauth" in lowered:
        return f"{dsn} needs a password: set PGPASSWORD or a ~/.pgpass entry"
    if "does not exist" in lowered:
        return f"cannot connect to {dsn}: {detail}"
    return f"cannot reach the PostgreSQL database at {dsn}: {detail}"


@contextmanager
def database_errors(location: str) -> Iterator[None]:
    """Turn a failed statement into an ArtifactError that names ``location``."""
    psycopg = _psycopg()
    try:
        yield
    except psycopg.OperationalError as exc:
        raise ArtifactError(f"lost the connection to {location}: {first_line(exc)}") from exc
    except psycopg.Error as exc:
        raise ArtifactError(f"{location}: {first_line(exc)}") from exc


@contextmanager
def session(location: PostgresTable, *, create_extension: bool = False) -> Iterator[Any]:
    """A connection to ``location``'s database for one piece of work, closed after it; a
    failed statement is an ArtifactError naming the table (:func:`database_errors`)."""
    connection = connect(location.dsn, create_extension=create_extension)
    try:
        with database_errors(location.describe()):
            yield connection
    finally:
        connection.close()


def table_sql(table: str) -> Any:
    """A quoted, possibly schema-qualified table name."""
    from psycopg import sql

    return sql.Identifier(*table.split("."))


def filter_sql(where: Mapping[str, str]) -> Any:
    """``TRUE AND col::text = 'value' ...`` for an equality filter (values as literals)."""
    from psycopg import sql

    terms = [
        sql.SQL("{}::text = {}").format(sql.Identifier(column), sql.Literal(value))
        for column, value in sorted(where.items())
    ]
    return sql.SQL(" AND ").join([sql.SQL("TRUE"), *terms])


# ------------------------------------------------------------------------------ columns
def table_columns(connection: Any, table: str) -> dict[str, str]:
    """Column name -> SQL type (``vector(384)``, ``text``, ...) of ``table``; {} if absent."""
    rows = connection.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum",
        (regclass_name(table),),
    ).fetchall()
    return dict(rows)


def regclass_name(table: str) -> str:
    """``table`` quoted for ``to_regclass`` (each part in double quotes)."""
    return ".".join(f'"{part}"' for part in table.split("."))


def require_columns(columns: dict[str, str], location: PostgresTable, named: dict[str, str]):
    """InputError naming the table and its columns when one of ``named`` (option -> column)
    is missing, or when the vector column is not a pgvector ``vector``."""
    if not columns:
        raise InputError(f"{location.describe()}: no such table")
    for option, column in named.items():
        if column not in columns:
            raise InputError(
                f"{location.describe()} has no column {column!r} ({option}); its columns: "
                + ", ".join(columns)
            )
    kind = columns[location.vector_column]
    if not kind.startswith("vector"):
        raise InputError(
            f"{location.describe()}: column {location.vector_column!r} is {kind}, not a pgvector "
            "vector"
        )


def session_settings(location: PostgresTable) -> list[str]:
    """SET statements that make a connection search the way ``location`` says."""
    if location.search == "exact":
        # never let an HNSW or IVFFlat index on the column answer
        return ["SET enable_indexscan = off", "SET enable_bitmapscan = off"]
    ef_search = int(location.ef_search or DEFAULT_EF_SEARCH)
    return [
        f"SET hnsw.ef_search = {ef_search}",
        # filtered rows are skipped and the scan goes on until k rows pass
        "SET hnsw.iterative_scan = strict_order",
        # the HNSW index answers even where the planner would scan a small table or sort
        # the rows another index (the row numbers) finds
        "SET enable_seqscan = off",
        "SET enable_bitmapscan = off",
        "SET enable_sort = off",
    ]


def _tie_order(location: PostgresTable) -> Any:
    """How an exact search breaks ties: by the lower row. An index scan orders by distance
    alone (a second sort key would keep the planner from using the index)."""
    from psycopg import sql

    if location.search == "hnsw":
        return sql.SQL("distance")
    key = sql.Identifier(location.key_column)
    return key if location.owned else sql.SQL("{}::text").format(key)


def hnsw_index_sql(location: PostgresTable, similarity: Similarity) -> Any:
    """``CREATE INDEX ... USING hnsw`` on the vector column, for the similarity's operator."""
    from psycopg import sql

    return sql.SQL("CREATE INDEX ON {} USING hnsw ({} {})").format(
        table_sql(location.table),
        sql.Identifier(location.vector_column),
        sql.SQL(_OPCLASSES[similarity]),
    )


def require_hnsw_index(connection: Any, location: PostgresTable, similarity: Similarity) -> None:
    """InputError unless the vector column has an HNSW index for the similarity's operator."""
    definitions = connection.execute(
        "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = to_regclass(%s)",
        (regclass_name(location.table),),
    ).fetchall()
    opclass = _OPCLASSES[similarity]
    for (definition,) in definitions:
        if (
            "USING hnsw" in definition
            and opclass in definition
            and (location.vector_column in definition)
        ):
            return
    raise InputError(
        f"{location.describe()} has no HNSW index on {location.vector_column!r} with {opclass} "
        f"(for {similarity} similarity): create one (CREATE INDEX ON {location.table} USING "
        f"hnsw ({location.vector_column} {opclass})), or search exactly"
    )


# ------------------------------------------------------------------------------- search
def search_connection(location: PostgresTable) -> Any:
    """A connection set to search the way ``location`` says (:func:`session_settings`)."""
    connection = connect(location.dsn)
    for setting in session_settings(location):
        connection.execute(setting)
    return connection


def search_info(location: PostgresTable, similarity: Similarity) -> SearchInfo:
    """How a search of ``location`` runs: exact (a sequential scan) or HNSW with its
    ``ef_search`` (recorded by calibrations)."""
    parameters: dict[str, str | int | float | bool] = {
        "operator": _OPERATORS[similarity],
        "method": "sequential scan" if location.search == "exact" else "hnsw",
    }
    if location.search == "hnsw":
        parameters["ef_search"] = location.ef_search or DEFAULT_EF_SEARCH
        parameters["iterative_scan"] = "strict_order"
    return SearchInfo(
        backend="pgvector",
        exact=location.search == "exact",
        similarity=similarity,
        parameters=parameters,
    )


def distance_similarities(distances: np.ndarray, similarity: Similarity) -> np.ndarray:
    """pgvector's distances as similarities, higher = closer: ``<=>`` is 1 - cosine,
    ``<#>`` the negative dot product."""
    return 1.0 - distances if similarity == "cosine" else -distances


def search_sql(
    location: PostgresTable,
    similarity: Similarity,
    size: int | None = None,
    without_flag: str | None = None,
) -> Any:
    """One statement for a whole batch of query vectors (``%s`` the vectors, then k): each
    query's top k in a lateral subquery, as (query number, key as text, distance) rows;
    ``size`` bounds an owned table's rows (past it: an uncommitted add); ``without_flag``
    leaves out rows whose metadata column sets that key."""
    from psycopg import sql

    where = filter_sql(location.where)
    if without_flag and location.metadata_column:
        where = sql.SQL("{} AND coalesce({}::jsonb ->> {}, '') = ''").format(
            where, sql.Identifier(location.metadata_column), sql.Literal(without_flag)
        )
    if location.owned:
        where = sql.SQL("{} AND {} < {}").format(
            where, sql.Identifier(ROW_COLUMN), sql.Literal(size)
        )
    return sql.SQL(
        "SELECT q.ord, hit.key, hit.distance FROM unnest(%s::vector[]) WITH ORDINALITY "
        "AS q(vec, ord) CROSS JOIN LATERAL (SELECT {key}::text AS key, {v} {op} q.vec AS "
        "distance FROM {t} WHERE {w} AND {v} IS NOT NULL AND {text} IS NOT NULL "
        "ORDER BY distance, {order} "
        "LIMIT %s) AS hit ORDER BY q.ord, hit.distance, {order2}"
    ).format(
        key=sql.Identifier(location.key_column),
        v=sql.Identifier(location.vector_column),
        text=sql.Identifier(location.text_column),
        op=sql.SQL(_OPERATORS[similarity]),
        t=table_sql(location.table),
        w=where,
        order=_tie_order(location),
        order2=sql.SQL("hit.key::bigint") if location.owned else sql.SQL("hit.key"),
    )


class PostgresStore:
    """Nearest-neighbour search in an owned table's pgvector column: a vector
    :class:`~ragbound.stores.Retriever` whose row ``i`` is the table's ``row_number`` i.

    ``location.search`` "exact" switches index scans off, so an index on the column never
    makes the search approximate; "hnsw" makes the search use the column's HNSW index (with
    iterative scans, so filters still leave k rows): approximate, and ``describe()`` says so,
    with ``ef_search``.
    """

    query_kind: QueryKind = "vector"

    def __init__(
        self,
        location: PostgresTable,
        *,
        size: int,
        dimension: int,
        similarity: Similarity,
    ):
        if similarity not in _OPERATORS:
            raise InputError(f"a pgvector store scores by cosine or dot, not {similarity}")
        self.location = location
        self._size = size
        self._dimension = dimension
        self._similarity: Similarity = similarity
        self._connection: Any = None

    def __len__(self) -> int:
        return self._size

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def similarity(self) -> Similarity:
        return self._similarity

    def describe(self) -> SearchInfo:
        """Exact (a sequential scan) or HNSW with its ``ef_search``; recorded by calibrations."""
        return search_info(self.location, self._similarity)

    def search(self, queries: np.ndarray, k: int) -> Hits:
        """Top-k rows per query vector, similarity descending, ties by the lower row."""
        queries = query_vectors(queries, k, len(self), self._dimension)
        with database_errors(self.location.describe()):
            statement = search_sql(self.location, self._similarity, self._size)
            found = self._open().execute(statement, (list(queries), k)).fetchall()
        return self._hits(found, len(queries), k)

    def _open(self) -> Any:
        if self._connection is None or self._connection.closed:
            self._connection = search_connection(self.location)
        return self._connection

    def _hits(self, found: list[tuple[int, str, float]], n_queries: int, k: int) -> Hits:
        if len(found) != n_queries * k:
            raise ArtifactError(
                f"{self.location.describe()} returned {len(found)} rows for {n_queries} queries "
                f"x k={k}: rows were deleted since it was loaded; load the knowledge base again"
            )
        distances = np.array([row[2] for row in found], dtype=np.float64).reshape(n_queries, k)
        similarities = distance_similarities(distances, self._similarity)
        return Hits(
            similarities=similarities.astype(np.float32),
            indices=np.array([int(row[1]) for row in found], dtype=np.int64).reshape(n_queries, k),
        )
