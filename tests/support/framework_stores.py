"""Collections written the way LangChain and LlamaIndex write them, for the attach tests.

Each ``langchain_*`` / ``llamaindex_*`` function indexes :data:`TEXTS` with :data:`METADATAS`
into one store location through the framework's own default calls (LangChain's ``from_texts``;
LlamaIndex's ``VectorStoreIndex.from_documents`` over a ``StorageContext``, default
``SentenceSplitter``), embedding with ragbound's bundled MiniLM wrapped as the framework's
embedding class, and closes what it opened. Every framework import is inside the function, so a
test imports this module freely and skips with ``pytest.importorskip`` on the package it needs.

Measured on these packages (2026-12-04): LangChain embeds the plain text; LlamaIndex embeds
its metadata lines with it (median cosine 0.92 with the plain text's vector, 1.000 with
``MetadataMode.EMBED``'s text), and keeps the text in Qdrant only inside ``_node_content``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from llama_index.core.embeddings import BaseEmbedding

TITLES = ["Tide pools", "Sourdough", "Bicycle brakes", "Lichens", "Night trains"]
TEXTS = [
    "Tide pools on rocky shores hold anemones, hermit crabs and sea stars that survive twice "
    "a day without the open sea, sheltering under wet kelp until the water comes back.",
    "A sourdough starter is flour and water left to sour with wild yeast and lactic bacteria; "
    "fed every day it doubles in a few hours and raises bread without any bought yeast.",
    "Rim brakes on a bicycle squeeze the wheel's rim with rubber pads, while disc brakes grip "
    "a steel rotor at the hub and keep working when the rims are wet or muddy.",
    "Lichens are partnerships of a fungus with an alga or a cyanobacterium; they grow a few "
    "millimetres a year on bare rock and bark and are among the first life on new lava.",
    "Night trains let travellers sleep in couchettes or sleeper cabins while crossing a "
    "country, arriving in another city's centre in the morning without an airport transfer.",
]
METADATAS: list[dict[str, Any]] = [
    {"title": title, "source": f"notes/{title.lower().replace(' ', '-')}.md"} for title in TITLES
]
DIMENSION = 384


@cache
def _encoder() -> Any:
    from ragbound.embedders import load_dense_embedder

    return load_dense_embedder("minilm")


def embed(texts: list[str]) -> list[list[float]]:
    """MiniLM vectors (unit length) of ``texts``, as the frameworks want them."""
    return [[float(x) for x in row] for row in _encoder().encode(list(texts))]


def langchain_embeddings() -> Embeddings:
    """ragbound's MiniLM as a LangChain ``Embeddings``."""
    from langchain_core.embeddings import Embeddings

    class MiniLM(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return embed(texts)

        def embed_query(self, text: str) -> list[float]:
            return embed([text])[0]

    return MiniLM()


def llamaindex_embedding() -> BaseEmbedding:
    """ragbound's MiniLM as a LlamaIndex ``BaseEmbedding``."""
    from llama_index.core.embeddings import BaseEmbedding

    class MiniLM(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return embed([query])[0]

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return embed([query])[0]

        def _get_text_embedding(self, text: str) -> list[float]:
            return embed([text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return embed(texts)

    return MiniLM(model_name="all-MiniLM-L6-v2")


# ---- LangChain ------------------------------------------------------------------------------


def langchain_qdrant(path: Path, collection: str = "langchain") -> None:
    """``QdrantVectorStore.from_texts`` into an embedded Qdrant folder."""
    from langchain_qdrant import QdrantVectorStore

    store = QdrantVectorStore.from_texts(
        TEXTS,
        langchain_embeddings(),
        metadatas=METADATAS,
        path=str(path),
        collection_name=collection,
    )
    store.client.close()


def langchain_chroma(client: Any, collection: str = "langchain") -> None:
    """``Chroma.from_texts`` through a chromadb client (its default collection name)."""
    from langchain_chroma import Chroma

    Chroma.from_texts(
        TEXTS,
        langchain_embeddings(),
        metadatas=METADATAS,
        collection_name=collection,
        client=client,
    )


def langchain_lancedb(path: Path, table: str = "vectorstore") -> None:
    """``LanceDB.from_texts`` (langchain-community) into a LanceDB folder."""
    from langchain_community.vectorstores import LanceDB

    LanceDB.from_texts(
        TEXTS, langchain_embeddings(), metadatas=METADATAS, uri=str(path), table_name=table
    )


# ---- LlamaIndex -----------------------------------------------------------------------------


def _llamaindex_index(vector_store: Any) -> None:
    from llama_index.core import Document, StorageContext, VectorStoreIndex

    documents = [
        Document(text=text, metadata=dict(metadata))
        for text, metadata in zip(TEXTS, METADATAS, strict=True)
    ]
    VectorStoreIndex.from_documents(
        documents,
        storage_context=StorageContext.from_defaults(vector_store=vector_store),
        embed_model=llamaindex_embedding(),
    )


def llamaindex_qdrant(path: Path, collection: str = "llamaindex") -> None:
    """``VectorStoreIndex.from_documents`` over a ``QdrantVectorStore`` on an embedded folder."""
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(path))
    try:
        _llamaindex_index(QdrantVectorStore(collection_name=collection, client=client))
    finally:
        client.close()


def llamaindex_chroma(client: Any, collection: str = "llamaindex") -> None:
    """``VectorStoreIndex.from_documents`` over a ``ChromaVectorStore`` through a chromadb
    client."""
    from llama_index.vector_stores.chroma import ChromaVectorStore

    _llamaindex_index(
        ChromaVectorStore(chroma_collection=client.get_or_create_collection(collection))
    )


def llamaindex_lancedb(path: Path, table: str = "vectors") -> None:
    """``VectorStoreIndex.from_documents`` over a ``LanceDBVectorStore`` (its default table)."""
    from llama_index.vector_stores.lancedb import LanceDBVectorStore

    _llamaindex_index(LanceDBVectorStore(uri=str(path), table_name=table))
