"""Owned and attached PostgreSQL knowledge bases end to end through the CLI, on a real server."""

from __future__ import annotations

import json
import secrets
import uuid
from pathlib import Path

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.postgres import PostgresOwnedBacking, owned_location
from tests.cli.runner import run
from tests.support.pgserver import PASSWORD
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE, TOPICS
from tests.tripwires.tripwire_texts import UNSAFE, write_tripwire_file


def _rows(dsn: str, sql: str, *params) -> list[tuple]:
    """Run one statement as another application would; its rows ([] for a command)."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        cursor = connection.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def _queries_file(folder: Path) -> Path:
    path = folder / "calibration.txt"
    path.write_text("\n".join(IN_KNOWLEDGE + MORE_IN_KNOWLEDGE) + "\n", encoding="utf-8")
    return path


def _decide(monkeypatch, capsys, kb: Path, *queries: str, force: bool = False) -> list[dict]:
    extra = ["--force"] if force else []
    code, out, err = run(monkeypatch, capsys, "decide", str(kb), *queries, "--json", *extra)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_owned_index_add_check_and_tripwires(monkeypatch, capsys, pg_dsn, corpus_dir, tmp_path):
    kb, table = tmp_path / "kb", f"owned_{secrets.token_hex(3)}"
    code, out, err = run(
        monkeypatch, capsys, "index", str(corpus_dir / "bees"), "--out", str(kb),
        "--backing", f"{pg_dsn}&table={table}", "--json",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(out)
    assert report["n_chunks"] == 5 and report["backing"]["location"]["table"] == table
    manifest_text = (kb / "manifest.json").read_text()
    manifest = json.loads(manifest_text)
    assert PASSWORD not in manifest_text and manifest["backing"]["kind"] == "postgres"
    assert manifest["backing"]["location"]["owned"] is True
    assert manifest["embedder"]["name"] == "all-MiniLM-L6-v2" and manifest["corpus_hash"]
    assert not (kb / "segments").exists()  # the rows are in the table only
    assert _rows(pg_dsn, f"SELECT count(*) FROM {table}") == [(5,)]

    # the same similarities as a local knowledge base over the same chunks
    loaded = KnowledgeBase.load(kb)
    local = KnowledgeBase.build([corpus_dir / "bees"], embedder="minilm")
    assert loaded.backing.kind == "postgres" and loaded.fingerprint == local.fingerprint
    queries = IN_KNOWLEDGE[:4] + OUT_OF_KNOWLEDGE
    got, want = loaded.search(queries, 3), local.search(queries, 3)
    np.testing.assert_allclose(got.similarities, want.similarities, atol=1e-5)
    np.testing.assert_array_equal(got.indices, want.indices)
    assert loaded.describe().backend == "pgvector"

    calibration = _queries_file(tmp_path)
    code, _, err = run(
        monkeypatch, capsys, "calibrate", str(kb), "--queries", str(calibration), "--k", "2"
    )
    assert code == 0, err
    before = _decide(monkeypatch, capsys, kb, IN_KNOWLEDGE[0], OUT_OF_KNOWLEDGE[0])
    assert before[0]["test"]["p_value"] > before[1]["test"]["p_value"]
    assert before[0]["neighbours"][0]["doc_id"].startswith("2")  # the waggle-dance document

    # add: only the new documents go in, after the committed rows
    (tmp_path / "more").mkdir()
    for i, text in enumerate(TOPICS["trains"]):
        (tmp_path / "more" / f"train{i}.txt").write_text(text + "\n", encoding="utf-8")
    code, out, err = run(monkeypatch, capsys, "add", str(kb), str(tmp_path / "more"), "--json")
    assert code == 0, err
    assert json.loads(out)["n_chunks"] == 10 and "calibrate again" in err
    assert _rows(pg_dsn, f"SELECT max(row_number), count(*) FROM {table}") == [(9, 10)]
    code, _, err = run(monkeypatch, capsys, "decide", str(kb), IN_KNOWLEDGE[5])
    assert code == 2 and "calibrate again" in err
    code, _, err = run(
        monkeypatch, capsys, "calibrate", str(kb), "--queries", str(calibration), "--k", "2"
    )
    assert code == 0, err
    after = _decide(monkeypatch, capsys, kb, IN_KNOWLEDGE[5])
    assert after[0]["neighbours"][0]["source"].startswith("train")

    # tripwires live beside the manifest and are searched with the table's chunks
    tripwires = tmp_path / "tripwires.jsonl"
    write_tripwire_file(tripwires)
    code, _, err = run(monkeypatch, capsys, "tripwire", "add", str(kb), str(tripwires))
    assert code == 0, err
    code, out, err = run(
        monkeypatch, capsys, "tripwire", "check", str(kb), UNSAFE[0], IN_KNOWLEDGE[0], "--json"
    )
    assert code == 0, err
    assert [json.loads(line)["forbidden"] for line in out.splitlines()] == [True, False]


def test_an_add_that_never_committed_is_replaced(pg_dsn, corpus_dir, tmp_path):
    kb_dir, table = tmp_path / "kb", f"crash_{secrets.token_hex(3)}"
    backing = PostgresOwnedBacking(owned_location(f"{pg_dsn}&table={table}", kb_dir))
    kb = KnowledgeBase.build([corpus_dir / "bees"], embedder="minilm", backing=backing)
    kb.save(kb_dir)
    # rows written by an add whose manifest never landed
    _rows(pg_dsn, f"INSERT INTO {table} SELECT row_number + 5, chunk_id || 'x', doc_id, source, "
          f"position, n_words, text, metadata, embedding FROM {table} RETURNING 1")  # fmt: skip
    loaded = KnowledgeBase.load(kb_dir)
    assert len(loaded) == 5 and loaded.search(["bees"], 5).indices.max() < 5
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "owl.txt").write_text("Owls hunt mice at night.\n", encoding="utf-8")
    assert loaded.add([tmp_path / "more"]) == 1
    loaded.save()
    assert _rows(pg_dsn, f"SELECT count(*) FROM {table}") == [(6,)]
    assert len(KnowledgeBase.load(kb_dir)) == 6


def test_owned_errors(monkeypatch, capsys, pg_dsn, corpus_dir, tmp_path):
    table = f"taken_{secrets.token_hex(3)}"
    _rows(pg_dsn, f"CREATE TABLE {table} (id int)")
    code, _, err = run(
        monkeypatch, capsys, "index", str(corpus_dir), "--out", str(tmp_path / "a"),
        "--backing", f"{pg_dsn}&table={table}",
    )  # fmt: skip
    assert code == 2 and "ragbound did not create it" in err
    code, _, err = run(
        monkeypatch, capsys, "index", str(corpus_dir), "--out", str(tmp_path / "b"),
        "--backing", "postgresql://ragbound@127.0.0.1:1/postgres",
    )  # fmt: skip
    assert code == 2 and "cannot reach the PostgreSQL database" in err
    monkeypatch.setenv("PGPASSWORD", "wrong")
    code, _, err = run(
        monkeypatch, capsys, "index", str(corpus_dir), "--out", str(tmp_path / "c"),
        "--backing", pg_dsn,
    )  # fmt: skip
    assert code == 2 and "wrong password for user ragbound" in err
    assert not any((tmp_path / name).exists() for name in "abc")


# ------------------------------------------------------------------------------ attach
def _langchain_tables(dsn: str, texts: dict[str, list[str]], vectors: dict[str, np.ndarray]):
    """LangChain's langchain-postgres layout: one embedding table for every collection."""
    suffix = secrets.token_hex(3)
    collections, embeddings = f"lc_collection_{suffix}", f"lc_embedding_{suffix}"
    ids = {name: uuid.uuid4() for name in texts}
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(connection)
        connection.execute(
            f"CREATE TABLE {collections} (uuid uuid PRIMARY KEY, name varchar, cmetadata json)"
        )
        connection.execute(
            f"CREATE TABLE {embeddings} (id varchar PRIMARY KEY, collection_id uuid REFERENCES "
            f"{collections}(uuid), embedding vector, document varchar, cmetadata jsonb)"
        )
        with connection.cursor() as cursor:
            for name, rows in texts.items():
                cursor.execute(
                    f"INSERT INTO {collections} VALUES (%s, %s, '{{}}')", (ids[name], name)
                )
                cursor.executemany(
                    f"INSERT INTO {embeddings} VALUES (%s, %s, %s, %s, '{{}}')",
                    [
                        (str(uuid.uuid4()), ids[name], vector, text)
                        for text, vector in zip(rows, vectors[name], strict=True)
                    ],
                )
            # a row LangChain could hold without an embedding: left out
            cursor.execute(
                f"INSERT INTO {embeddings} (id, collection_id, document) VALUES ('x', %s, 'no vector')",
                (ids["bees"],),
            )
    return embeddings, ids


@pytest.fixture(scope="module")
def embedded_topics() -> dict[str, np.ndarray]:
    from ragbound.embedders import load_dense_embedder

    minilm = load_dense_embedder("minilm")
    return {topic: minilm.encode(texts) for topic, texts in TOPICS.items()}


def _attach(monkeypatch, capsys, dsn: str, table: str, out: Path, *extra: str):
    return run(
        monkeypatch, capsys, "attach", dsn, "--table", table, "--text-column", "document",
        "--vector-column", "embedding", "--out", str(out), *extra,
    )  # fmt: skip


def test_attach_a_langchain_table(monkeypatch, capsys, pg_dsn, embedded_topics, tmp_path):
    table, ids = _langchain_tables(pg_dsn, TOPICS, embedded_topics)
    kb = tmp_path / "kb"
    code, out, err = _attach(
        monkeypatch, capsys, pg_dsn, table, kb, "--where", f"collection_id={ids['bees']}", "--json"
    )
    assert code == 0, err
    report = json.loads(out)
    location = report["backing"]["location"]
    assert report["n_chunks"] == 5 and location["key_column"] == "id"  # the primary key
    assert location["where"] == {"collection_id": str(ids["bees"])}

    loaded = KnowledgeBase.load(kb)
    assert sorted(chunk.text for chunk in loaded.chunks) == sorted(TOPICS["bees"])
    order = [TOPICS["bees"].index(chunk.text) for chunk in loaded.chunks]
    from ragbound.stores import ExactStore

    exact = ExactStore(embedded_topics["bees"][order], similarity="cosine")
    queries = IN_KNOWLEDGE[:5] + OUT_OF_KNOWLEDGE
    got = loaded.search(queries, 3)
    want = exact.search(loaded.embed(queries), 3)
    np.testing.assert_allclose(got.similarities, want.similarities, atol=1e-5)
    np.testing.assert_array_equal(got.indices, want.indices)

    calibration = tmp_path / "calibration.txt"
    calibration.write_text(
        "\n".join(q for q in IN_KNOWLEDGE + MORE_IN_KNOWLEDGE if "ee" in q) + "\n"
    )
    code, _, err = run(
        monkeypatch, capsys, "calibrate", str(kb), "--queries", str(calibration), "--k", "2"
    )
    assert code == 0, err
    rows = _decide(monkeypatch, capsys, kb, IN_KNOWLEDGE[0], IN_KNOWLEDGE[5])
    # trains are not in the bees collection
    assert rows[0]["test"]["p_value"] > rows[1]["test"]["p_value"]

    code, _, err = run(monkeypatch, capsys, "add", str(kb), str(calibration))
    assert code == 2 and "belongs to another application" in err

    # the application adds a row: the fingerprint moves, the old calibration is refused
    with psycopg.connect(pg_dsn, autocommit=True) as connection:
        register_vector(connection)
        connection.execute(
            f"INSERT INTO {table} VALUES ('new', %s, %s, 'Bees sleep at night.', '{{}}')",
            (ids["bees"], embedded_topics["bees"][0]),
        )
    code, _, err = run(monkeypatch, capsys, "decide", str(kb), IN_KNOWLEDGE[0])
    assert code == 2 and "calibrate again" in err
    assert len(KnowledgeBase.load(kb)) == 6


def test_attach_bad_inputs(monkeypatch, capsys, pg_dsn, embedded_topics, tmp_path):
    table, _ = _langchain_tables(pg_dsn, TOPICS, embedded_topics)
    out = tmp_path / "kb"
    code, _, err = run(
        monkeypatch, capsys, "attach", pg_dsn, "--table", table, "--text-column", "content",
        "--vector-column", "embedding", "--out", str(out),
    )  # fmt: skip
    assert code == 2 and "has no column 'content' (--text-column)" in err and "document" in err
    code, _, err = _attach(monkeypatch, capsys, pg_dsn, "no_such_table", out)
    assert code == 2 and "no such table" in err
    code, _, err = _attach(monkeypatch, capsys, pg_dsn, table, out, "--where", "nosuch=1")
    assert code == 2 and "has no column 'nosuch'" in err
    code, _, err = _attach(monkeypatch, capsys, pg_dsn, table, out, "--embedder", "mpnet")
    assert code == 2 and "holds 384-dimensional vectors but the embedder" in err
    code, _, err = _attach(
        monkeypatch, capsys, "postgresql://ragbound@127.0.0.1:1/postgres", table, out
    )
    assert code == 2 and "cannot reach" in err
    monkeypatch.setenv("PGPASSWORD", "wrong")
    code, _, err = _attach(monkeypatch, capsys, pg_dsn, table, out)
    assert code == 2 and "wrong password" in err
    assert not out.exists()


def test_owned_hnsw_builds_the_index_and_the_calibration_records_it(
    monkeypatch, capsys, pg_dsn, corpus_dir, tmp_path
):
    kb, table = tmp_path / "kb", f"hnsw_{secrets.token_hex(3)}"
    url = f"{pg_dsn}&table={table}&search=hnsw&ef_search=64"
    code, _, err = run(
        monkeypatch, capsys, "index", str(corpus_dir), "--out", str(kb), "--backing", url
    )
    assert code == 0, err
    indexes = _rows(pg_dsn, "SELECT indexdef FROM pg_indexes WHERE tablename = %s", table)
    assert any("USING hnsw" in row[0] and "vector_cosine_ops" in row[0] for row in indexes)
    calibration = _queries_file(tmp_path)
    code, _, err = run(
        monkeypatch, capsys, "calibrate", str(kb), "--queries", str(calibration), "--k", "2"
    )
    assert code == 0, err
    recorded = json.loads((kb / "calibration" / "manifest.json").read_text())["search"]
    assert recorded["backend"] == "pgvector" and recorded["exact"] is False
    assert recorded["parameters"]["ef_search"] == 64
    rows = _decide(monkeypatch, capsys, kb, IN_KNOWLEDGE[0], OUT_OF_KNOWLEDGE[0])
    assert rows[0]["test"]["p_value"] > rows[1]["test"]["p_value"]


def test_attach_with_hnsw_needs_the_tables_index(
    monkeypatch, capsys, pg_dsn, embedded_topics, tmp_path
):
    table, _ = _langchain_tables(pg_dsn, TOPICS, embedded_topics)
    out = tmp_path / "kb"
    code, _, err = _attach(monkeypatch, capsys, pg_dsn, table, out, "--search", "hnsw")
    assert code == 2 and "has no HNSW index on 'embedding'" in err
    # LangChain creates its column without a dimension: an index needs one
    _rows(pg_dsn, f"ALTER TABLE {table} ALTER COLUMN embedding TYPE vector(384)")
    _rows(pg_dsn, f"CREATE INDEX ON {table} USING hnsw (embedding vector_cosine_ops)")
    code, out_text, err = _attach(
        monkeypatch, capsys, pg_dsn, table, out, "--search", "hnsw", "--ef-search", "50", "--json"
    )
    assert code == 0, err
    assert json.loads(out_text)["backing"]["location"]["search"] == "hnsw"
    loaded = KnowledgeBase.load(out)
    assert not loaded.describe().exact and loaded.describe().parameters["ef_search"] == 50
    assert loaded.search([IN_KNOWLEDGE[0]], 3).indices.shape == (1, 3)
