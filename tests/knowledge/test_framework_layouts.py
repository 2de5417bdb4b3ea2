"""Collections the frameworks wrote attach as they are: LangChain's and LlamaIndex's own
default calls fill a Qdrant folder, a Chroma collection and a LanceDB table (tests/support/framework_stores.py),
and ``attach`` takes them with no option but the URL: the texts, the metadata, the vectors
LlamaIndex made of its metadata lines and text, and the same search as a local exact one."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest

from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.attached import Access, Found, Rows, check_sample
from tests.support import framework_stores as frameworks

QUERIES = ["How do sea stars survive low tide?", "What makes bread rise without yeast?"]


def _check(kb: KnowledgeBase, folder: Path, *, metadata_in_embedding: bool) -> None:
    assert sorted(chunk.text for chunk in kb.chunks) == sorted(frameworks.TEXTS)
    titles = {chunk.text: chunk.metadata.get("title") for chunk in kb.chunks}
    assert titles == dict(zip(frameworks.TEXTS, frameworks.TITLES, strict=True))
    location = json.loads((folder / "manifest.json").read_text())["backing"]["location"]
    assert location["metadata_in_embedding"] is metadata_in_embedding
    hits = kb.search(QUERIES, 1)
    assert [kb.chunk_at(int(row[0])).text for row in hits.indices] == frameworks.TEXTS[:2]


@pytest.mark.parametrize(
    ("fill", "package", "in_embedding"),
    [
        (frameworks.langchain_qdrant, "langchain_qdrant", False),
        (frameworks.llamaindex_qdrant, "llama_index.vector_stores.qdrant", True),
    ],
)
def test_a_qdrant_folder_a_framework_filled(fill, package: str, in_embedding: bool, tmp_path):
    pytest.importorskip(package, reason=f"{package} is not installed (the dev extra)")
    fill(tmp_path / "q", "docs")
    from ragbound.knowledge.qdrant import release

    try:
        kb = KnowledgeBase.attach(
            f"qdrant+path://{tmp_path / 'q'}?collection=docs", tmp_path / "kb"
        )
        _check(kb, tmp_path / "kb", metadata_in_embedding=in_embedding)
    finally:
        release(tmp_path / "q")


@pytest.mark.parametrize(
    ("fill", "package", "in_embedding"),
    [
        (frameworks.langchain_chroma, "langchain_chroma", False),
        (frameworks.llamaindex_chroma, "llama_index.vector_stores.chroma", True),
    ],
)
def test_a_chroma_collection_a_framework_filled(fill, package, in_embedding, chroma, tmp_path):
    pytest.importorskip(package, reason=f"{package} is not installed (the dev extra)")
    name = f"fw_{tmp_path.name[-12:].replace('-', '_')}"
    fill(chroma.client(), name)
    kb = KnowledgeBase.attach(chroma.url(name), tmp_path / "kb")
    _check(kb, tmp_path / "kb", metadata_in_embedding=in_embedding)


@pytest.mark.parametrize(
    ("fill", "package", "table", "in_embedding"),
    [
        (frameworks.langchain_lancedb, "langchain_community", "vectorstore", False),
        (frameworks.llamaindex_lancedb, "llama_index.vector_stores.lancedb", "vectors", True),
    ],
)
def test_a_lancedb_table_a_framework_filled(fill, package, table, in_embedding, tmp_path):
    pytest.importorskip("lancedb", reason="lancedb is not installed (the lancedb extra)")
    pytest.importorskip(package, reason=f"{package} is not installed (the dev extra)")
    fill(tmp_path / "lance", table)
    kb = KnowledgeBase.attach(f"lancedb://{tmp_path / 'lance'}?table={table}", tmp_path / "kb")
    _check(kb, tmp_path / "kb", metadata_in_embedding=in_embedding)


def test_a_postgres_table_in_llamaindex_s_layout(pg_dsn: str, tmp_path: Path):
    """LlamaIndex's PGVectorStore table (id, text, metadata_ json holding the node, node_id,
    embedding), written here by its shape (the package pins SQLAlchemy < 2.1): attach needs
    only the table; the vectors embed the metadata lines as LlamaIndex's do (measured on its
    package: title and source lines, a blank line, the text)."""
    import psycopg
    from pgvector.psycopg import register_vector

    nodes = [
        {"text": "", "metadata": metadata, "metadata_template": "{key}: {value}",
         "metadata_separator": "\n", "text_template": "{metadata_str}\n\n{content}",
         "excluded_embed_metadata_keys": [], "class_name": "TextNode"}
        for metadata in frameworks.METADATAS
    ]  # fmt: skip
    embedded = [
        f"title: {m['title']}\nsource: {m['source']}\n\n{text}"
        for m, text in zip(frameworks.METADATAS, frameworks.TEXTS, strict=True)
    ]
    table = f"data_{tmp_path.name[-8:].replace('-', '_')}"
    with psycopg.connect(pg_dsn, autocommit=True) as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(connection)
        connection.execute(
            f"CREATE TABLE {table} (id bigserial PRIMARY KEY, text varchar, metadata_ json, "
            "node_id varchar, embedding vector(384))"
        )
        connection.cursor().executemany(
            f"INSERT INTO {table} (text, metadata_, node_id, embedding) VALUES (%s, %s, %s, %s)",
            [
                (text, json.dumps({**m, "_node_content": json.dumps(node)}), f"n{i}", vector)
                for i, (text, m, node, vector) in enumerate(
                    zip(
                        frameworks.TEXTS,
                        frameworks.METADATAS,
                        nodes,
                        np.asarray(frameworks.embed(embedded), np.float32),
                        strict=True,
                    )
                )
            ],
        )
    kb = KnowledgeBase.attach(pg_dsn, tmp_path / "kb", table=table)
    _check(kb, tmp_path / "kb", metadata_in_embedding=True)


class _Texts(Access):
    """A labelled test double: stored vectors made from other texts than the rows hold."""

    name = "double"

    def __init__(self, vectors: np.ndarray):
        from ragbound.knowledge.chroma import ChromaLocation

        super().__init__(ChromaLocation(host="h", port=1, collection="c", space="cosine"))
        self.stored = vectors

    def errors(self):
        return contextlib.nullcontext()

    def vectors(self, keys):
        return self.stored[[int(key) for key in keys]]

    def query(self, vectors, depth):
        return [[Found(str(i), 0.0) for i in range(depth)] for _ in vectors]

    def similarities(self, scores):
        return 1.0 - scores


@pytest.mark.parametrize(
    ("texts", "cause"),
    [
        ([json.dumps({"text": t, "id_": "n"}) for t in frameworks.TEXTS], "look like JSON"),
        (list(reversed(frameworks.TEXTS)), "another embedder made them"),
    ],
)
def test_a_failed_check_names_the_likely_cause(texts: list[str], cause: str):
    from ragbound.embedders import load_dense_embedder

    dense = load_dense_embedder("minilm")
    rows = Rows()
    for i, text in enumerate(texts):
        rows.add(str(i), text, {})
    with pytest.raises(InputError, match=cause):
        check_sample(_Texts(dense.encode(frameworks.TEXTS)), rows, dense, 5)
