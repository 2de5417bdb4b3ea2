"""PostgresStore on a real server: the same top-k as the local exact store, clear errors."""

from __future__ import annotations

import secrets

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg import sql

from ragbound.errors import InputError
from ragbound.knowledge.postgres_tables import (
    ROW_COLUMN,
    PostgresStore,
    PostgresTable,
    connect,
    require_hnsw_index,
    search_connection,
    search_sql,
    split_store_url,
)
from ragbound.stores import ExactStore, Retriever, search_excluding

N_ROWS, DIM = 300, 48


def _fill_table(dsn: str, vectors: np.ndarray) -> str:
    """A fresh table laid out like an owned one (row_number, text, embedding)."""
    table = f"t_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(connection)
        connection.execute(
            f"CREATE TABLE {table} ({ROW_COLUMN} bigint PRIMARY KEY, text text, "
            f"embedding vector({vectors.shape[1]}))"
        )
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {table} VALUES (%s, %s, %s)",
                [(row, f"row {row}", vector) for row, vector in enumerate(vectors)],
            )
    return table


def _explain(store: PostgresStore, queries: np.ndarray, k: int) -> str:
    """PostgreSQL's plan for the store's search (which scan answers it), one line per step."""
    statement = sql.SQL("EXPLAIN {}").format(
        search_sql(store.location, store.similarity, len(store))
    )
    with search_connection(store.location) as connection:
        rows = connection.execute(statement, (list(queries.astype(np.float32)), k)).fetchall()
    return "\n".join(row[0] for row in rows)


def _store(dsn: str, vectors: np.ndarray, similarity: str) -> PostgresStore:
    location = PostgresTable(dsn=dsn, table=_fill_table(dsn, vectors), owned=True)
    return PostgresStore(location, size=len(vectors), dimension=DIM, similarity=similarity)


def _data(normalise: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    vectors = rng.normal(size=(N_ROWS, DIM)).astype(np.float32)
    queries = rng.normal(size=(25, DIM)).astype(np.float32)
    if normalise:
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    vectors[7] = vectors[3]  # an exact tie: the lower row comes first in both stores
    queries[0] = vectors[3]
    return vectors, queries


@pytest.mark.parametrize(("similarity", "normalise"), [("cosine", True), ("dot", False)])
def test_top_k_agrees_with_the_local_exact_store(pg_dsn, similarity, normalise):
    vectors, queries = _data(normalise)
    store = _store(pg_dsn, vectors, similarity)
    exact = ExactStore(vectors, similarity=similarity)
    got, want = store.search(queries, 10), exact.search(queries, 10)
    np.testing.assert_allclose(got.similarities, want.similarities, atol=1e-5)
    np.testing.assert_array_equal(got.indices, want.indices)
    assert got.indices[0, :2].tolist() == [3, 7]
    assert isinstance(store, Retriever) and len(store) == N_ROWS
    info = store.describe()
    assert info.backend == "pgvector" and info.exact and info.similarity == similarity


def _with_hnsw(dsn: str, table: str, options: str = "") -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            f"CREATE INDEX ON {table} USING hnsw (embedding vector_cosine_ops) {options}"
        )


def test_an_index_on_the_column_does_not_make_the_search_approximate(pg_dsn):
    vectors, queries = _data(normalise=True)
    store = _store(pg_dsn, vectors, "cosine")
    _with_hnsw(pg_dsn, store.location.table, "WITH (m = 2, ef_construction = 4)")
    got = store.search(queries, 20)
    want = ExactStore(vectors, similarity="cosine").search(queries, 20)
    np.testing.assert_array_equal(got.indices, want.indices)
    assert "Seq Scan" in _explain(store, queries[:1], 20)
    assert "Index Scan" not in _explain(store, queries[:1], 20)


def test_hnsw_search_uses_the_index_and_says_it_is_approximate(pg_dsn):
    vectors, queries = _data(normalise=True)
    location = PostgresTable(dsn=pg_dsn, table=_fill_table(pg_dsn, vectors), owned=True)
    _with_hnsw(pg_dsn, location.table)
    hnsw = PostgresStore(
        location.model_copy(update={"search": "hnsw", "ef_search": 100}),
        size=N_ROWS,
        dimension=DIM,
        similarity="cosine",
    )
    assert "Index Scan using" in _explain(hnsw, queries[:1], 10)
    info = hnsw.describe()
    assert not info.exact and info.parameters["ef_search"] == 100
    assert info.parameters["method"] == "hnsw"
    got = hnsw.search(queries, 10)
    want = ExactStore(vectors, similarity="cosine").search(queries, 10)
    # every returned similarity is the exact one of its row, sorted descending
    exact_of_rows = np.take_along_axis(queries @ vectors.T, got.indices, axis=1)
    np.testing.assert_allclose(got.similarities, exact_of_rows, atol=1e-5)
    assert (np.diff(got.similarities, axis=1) <= 1e-6).all()
    recall = np.mean(
        [len(set(a) & set(b)) / 10 for a, b in zip(got.indices, want.indices, strict=True)]
    )
    assert recall >= 0.9


def test_hnsw_needs_an_index_for_the_operator(pg_dsn):
    vectors, _ = _data(normalise=True)
    location = PostgresTable(dsn=pg_dsn, table=_fill_table(pg_dsn, vectors), owned=True)
    connection = connect(pg_dsn)
    try:
        with pytest.raises(InputError, match="no HNSW index on 'embedding' with vector_cosine_ops"):
            require_hnsw_index(connection, location, "cosine")
        _with_hnsw(pg_dsn, location.table)
        require_hnsw_index(connection, location, "cosine")
        with pytest.raises(InputError, match="vector_ip_ops"):
            require_hnsw_index(connection, location, "dot")
    finally:
        connection.close()


def test_leave_one_out_and_rows_past_the_committed_count(pg_dsn):
    vectors, queries = _data(normalise=True)
    location = PostgresTable(dsn=pg_dsn, table=_fill_table(pg_dsn, vectors), owned=True)
    # only the first 200 rows are committed: the others are an unfinished add
    store = PostgresStore(location, size=200, dimension=DIM, similarity="cosine")
    exact = ExactStore(vectors[:200], similarity="cosine")
    exclude = [{0, 3}] * len(queries)
    got = search_excluding(store, queries, 5, exclude)
    want = search_excluding(exact, queries, 5, exclude)
    np.testing.assert_array_equal(got.indices, want.indices)
    assert got.indices.max() < 200


def test_bad_queries_and_k(pg_dsn):
    vectors, _ = _data(normalise=True)
    store = _store(pg_dsn, vectors, "cosine")
    with pytest.raises(InputError, match=r"shape \(n, 48\)"):
        store.search(np.zeros((2, 5), np.float32), 3)
    with pytest.raises(InputError, match="larger than the knowledge base"):
        store.search(np.zeros((1, DIM), np.float32), N_ROWS + 1)


def test_unreachable_database_is_a_clear_error():
    with pytest.raises(InputError, match="cannot reach the PostgreSQL database at postgresql://"):
        connect("postgresql://nobody@127.0.0.1:1/db")


def test_wrong_or_missing_password_is_a_clear_error(postgres, monkeypatch):
    monkeypatch.setenv("PGPASSWORD", "not-the-password")
    with pytest.raises(InputError, match="wrong password for user ragbound") as error:
        connect(postgres.dsn)
    assert "not-the-password" not in str(error.value)
    monkeypatch.delenv("PGPASSWORD")
    monkeypatch.setenv("PGPASSFILE", "/nonexistent/pgpass")
    with pytest.raises(InputError, match="needs a password: set PGPASSWORD"):
        connect(postgres.dsn)


def test_a_password_in_the_url_is_refused_and_table_is_split_off():
    with pytest.raises(InputError, match="holds a password"):
        split_store_url("postgresql://user:secret@db.example/kb")
    dsn, ours = split_store_url("postgresql://user@/kb?host=/tmp/x&table=chunks&search=hnsw")
    assert (dsn, ours) == (
        "postgresql://user@/kb?host=%2Ftmp%2Fx",
        {"table": "chunks", "search": "hnsw"},
    )
    with pytest.raises(InputError, match="ef_search applies to search=hnsw only"):
        split_store_url("postgresql://user@/kb?ef_search=10")
    with pytest.raises(InputError, match="search must be one of exact, hnsw"):
        split_store_url("postgresql://user@/kb?search=ivfflat")
    with pytest.raises(InputError, match="not a postgresql:// URL"):
        split_store_url("mysql://user@db/kb")
