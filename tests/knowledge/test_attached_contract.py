"""One contract over every attached store (:mod:`ragbound.knowledge.attached`), on the real
engines: another application fills a collection or table its own way (LangChain's layout,
MiniLM vectors), ragbound attaches it with no option but the URL (and PostgreSQL's table),
and each store must give the same rows, similarities and score direction as ragbound's own
exact search over the same vectors; keep flagged tripwire records out of the knowledge; read
rows the application changed at the next load (refusing a search that meets one before);
and name the embedder when the vectors are another's.

A new attached store joins with an :class:`Application` here.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge import BACKINGS, KnowledgeBase
from tests.support.chroma_server import ChromaServer, fill_collection
from tests.texts import IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

QUERIES = IN_KNOWLEDGE + OUT_OF_KNOWLEDGE
FLAG = {"ragbound_tripwire": "weapons", "ragbound_tripwire_id": "w1"}


class Application:
    """Another application writing records (id, text, vector, metadata) into its store."""

    kind: str

    def fill(self, ids, texts, vectors, metadatas) -> tuple[str, dict[str, Any]]:
        """A new collection of these records: its URL and attach's options."""
        raise NotImplementedError

    def add(self, key: str, text: str, vector: np.ndarray, metadata: dict) -> None:
        raise NotImplementedError


class ChromaApplication(Application):
    kind = "chroma-attached"

    def __init__(self, server: ChromaServer):
        self.server, self.name = server, f"app_{secrets.token_hex(3)}"

    def fill(self, ids, texts, vectors, metadatas):
        fill_collection(
            self.server, self.name, texts, vectors, ids=ids, space="cosine", metadatas=metadatas
        )
        return self.server.url(self.name), {}

    def add(self, key, text, vector, metadata):
        collection = self.server.client().get_collection(self.name)
        collection.add(ids=[key], embeddings=[vector], documents=[text], metadatas=[metadata])


class QdrantApplication(Application):
    """An embedded Qdrant folder in LangChain's layout (page_content, metadata)."""

    kind = "qdrant-attached"

    def __init__(self, folder: Path):
        self.folder = folder

    def _write(self, ids, texts, vectors, metadatas, *, create: bool) -> None:
        from qdrant_client import QdrantClient, models

        from ragbound.knowledge.qdrant import release

        release(self.folder)  # this process's client: let the application write
        client = QdrantClient(path=str(self.folder))
        try:
            if create:
                params = models.VectorParams(size=vectors.shape[1], distance=models.Distance.COSINE)
                client.create_collection("docs", vectors_config=params)
            points = [
                models.PointStruct(
                    id=int(key.removeprefix("r")),
                    vector=np.asarray(vector, np.float32).tolist(),
                    payload={"page_content": text, "metadata": metadata},
                )
                for key, text, vector, metadata in zip(ids, texts, vectors, metadatas, strict=True)
            ]
            client.upsert("docs", points)
        finally:
            client.close()

    def fill(self, ids, texts, vectors, metadatas):
        pytest.importorskip("qdrant_client", reason="qdrant-client is not installed (qdrant extra)")
        self._write(ids, texts, vectors, metadatas, create=True)
        return f"qdrant+path://{self.folder}?collection=docs", {}

    def add(self, key, text, vector, metadata):
        self._write([key], [text], np.asarray([vector]), [metadata], create=False)


class PostgresApplication(Application):
    """A table in langchain-postgres' layout (document, embedding, cmetadata)."""

    kind = "postgres-attached"

    def __init__(self, dsn: str):
        self.dsn, self.table = dsn, f"app_{secrets.token_hex(3)}"

    def _connect(self) -> Any:
        import psycopg
        from pgvector.psycopg import register_vector

        connection = psycopg.connect(self.dsn, autocommit=True)
        connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(connection)
        return connection

    def _insert(self, connection: Any, ids, texts, vectors, metadatas) -> None:
        connection.cursor().executemany(
            f"INSERT INTO {self.table} VALUES (%s, %s, %s, %s)",
            [
                (key, text, np.asarray(vector, np.float32), json.dumps(metadata))
                for key, text, vector, metadata in zip(ids, texts, vectors, metadatas, strict=True)
            ],
        )

    def fill(self, ids, texts, vectors, metadatas):
        with self._connect() as connection:
            connection.execute(
                f"CREATE TABLE {self.table} (id text PRIMARY KEY, document text, "
                "embedding vector, cmetadata jsonb)"
            )
            self._insert(connection, ids, texts, vectors, metadatas)
        return self.dsn, {"table": self.table}

    def add(self, key, text, vector, metadata):
        with self._connect() as connection:
            self._insert(connection, [key], [text], [vector], [metadata])


class LanceApplication(Application):
    """An embedded LanceDB folder, one table: id, text, vector and a column per metadata key."""

    kind = "lancedb-attached"

    def __init__(self, folder: Path):
        self.folder, self.url = folder, f"lancedb://{folder}?table=docs"

    def fill(self, ids, texts, vectors, metadatas):
        lancedb = pytest.importorskip("lancedb", reason="lancedb is not installed (lancedb extra)")
        keys = dict.fromkeys(key for metadata in metadatas for key in metadata)
        rows = [
            {"id": key, "text": text, "vector": np.asarray(vector, np.float32).tolist()}
            | {name: metadata.get(name) for name in keys}
            for key, text, vector, metadata in zip(ids, texts, vectors, metadatas, strict=True)
        ]
        lancedb.connect(self.url.removeprefix("lancedb://").split("?")[0]).create_table(
            "docs", rows
        )
        return self.url, {}

    def add(self, key, text, vector, metadata):
        from tests.lancefill import table

        row = {"id": key, "text": text, "vector": np.asarray(vector, np.float32).tolist()}
        table(self.url).add([row | metadata])


ATTACHED_KINDS = sorted(kind for kind in BACKINGS if not BACKINGS[kind].capabilities.index)


@pytest.fixture(params=ATTACHED_KINDS)
def application(request: pytest.FixtureRequest, tmp_path: Path) -> Application:
    kind = request.param
    if kind == "chroma-attached":
        return ChromaApplication(request.getfixturevalue("chroma"))
    if kind == "postgres-attached":
        return PostgresApplication(request.getfixturevalue("pg_dsn"))
    if kind == "qdrant-attached":
        return QdrantApplication(tmp_path / "qdrant")
    if kind == "lancedb-attached":
        return LanceApplication(tmp_path / "lance")
    raise AssertionError(f"{kind}: an attached store needs an Application in this contract")


@pytest.fixture(scope="module")
def local(minilm_kb_dir: Path) -> KnowledgeBase:
    """ragbound's own exact knowledge base: the vectors the applications write."""
    return KnowledgeBase.load(minilm_kb_dir)


def _records(local: KnowledgeBase, vectors: np.ndarray | None = None, extra: int = 0):
    """The local chunks as records (ids r0.., metadata topic and n), plus ``extra`` flagged
    tripwire records that copy the first chunks' vectors."""
    vectors = np.asarray(local.vectors if vectors is None else vectors, np.float32)
    chunks = list(local.chunks)
    ids = [f"r{i}" for i in range(len(chunks) + extra)]
    texts = [c.text for c in chunks] + [f"How do I build a weapon, {i}?" for i in range(extra)]
    metadatas = [{"topic": Path(c.doc_id).parts[0], "n": i} for i, c in enumerate(chunks)]
    metadatas += [FLAG | {"ragbound_tripwire_id": f"w{i}"} for i in range(extra)]
    return ids, texts, np.concatenate([vectors, vectors[:extra]]), metadatas


def _attach(application: Application, tmp_path: Path, records) -> KnowledgeBase:
    url, options = application.fill(*records)
    return KnowledgeBase.attach(url, tmp_path / "kb", **options)


def _texts(kb: KnowledgeBase, indices: np.ndarray) -> list[list[str]]:
    return [[kb.chunk_at(int(i)).text for i in row] for row in indices]


def test_the_same_rows_similarities_and_direction_as_a_local_exact_search(
    application: Application, local: KnowledgeBase, tmp_path: Path
):
    kb = _attach(application, tmp_path, _records(local))
    assert kb.backing.kind == application.kind and len(kb) == len(local)
    assert kb.fingerprint == KnowledgeBase.load(tmp_path / "kb").fingerprint
    ours, theirs = local.search(QUERIES, 4), kb.search(QUERIES, 4)
    assert _texts(kb, theirs.indices) == _texts(local, ours.indices)
    np.testing.assert_allclose(theirs.similarities, ours.similarities, atol=1e-5)
    assert (np.diff(theirs.similarities, axis=1) <= 0).all()  # higher = closer, best first
    itself = kb.store.search(np.asarray(local.vectors[:3], np.float32), 2)
    np.testing.assert_array_equal(itself.indices[:, 0], [0, 1, 2])
    np.testing.assert_allclose(itself.similarities[:, 0], 1.0, atol=1e-5)


def test_tripwire_records_are_never_knowledge(
    application: Application, local: KnowledgeBase, tmp_path: Path
):
    """Flagged records copy the nearest chunks' vectors, yet are never rows nor returned,
    neither those written before attach nor one the application adds after."""
    kb = _attach(application, tmp_path, _records(local, extra=2))
    assert len(kb) == len(local)
    assert not any("weapon" in chunk.text for chunk in kb.chunks)
    application.add("r99", "Where can I buy a weapon?", local.vectors[0], FLAG)
    for found in (kb, KnowledgeBase.load(tmp_path / "kb")):
        hits = found.store.search(np.asarray(local.vectors[:2], np.float32), 3)
        assert hits.indices.max() < len(local)
        np.testing.assert_array_equal(hits.indices[:, 0], [0, 1])


def test_rows_the_application_changes_are_read_at_the_next_load(
    application: Application, local: KnowledgeBase, tmp_path: Path
):
    kb = _attach(application, tmp_path, _records(local))
    application.add("r98", "Barn owls swallow mice whole.", local.vectors[0], {"topic": "owls"})
    with pytest.raises(ArtifactError, match="added after this knowledge base was loaded"):
        kb.store.search(np.asarray(local.vectors[:1], np.float32), len(kb))
    loaded = KnowledgeBase.load(tmp_path / "kb")
    assert len(loaded) == len(kb) + 1 and loaded.fingerprint != kb.fingerprint
    with pytest.raises(InputError, match="another application"):
        loaded.add_documents([])


def test_vectors_another_embedder_made_are_named(
    application: Application, local: KnowledgeBase, tmp_path: Path
):
    rng = np.random.default_rng(0)
    other = rng.normal(size=np.asarray(local.vectors).shape)
    other /= np.linalg.norm(other, axis=1, keepdims=True)
    with pytest.raises(InputError, match="do not match the embedder") as caught:
        _attach(application, tmp_path, _records(local, other))
    assert "\n" not in str(caught.value) and "--embedder" in str(caught.value)
    assert not (tmp_path / "kb" / "manifest.json").exists()
