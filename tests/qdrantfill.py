"""Fill a Qdrant collection in qdrant-client's embedded mode, as another application would."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ragbound.corpus import Chunk


def fill(
    folder: Path,
    chunks: Sequence[Chunk],
    vectors: np.ndarray,
    *,
    distance: str = "Cosine",
    collection: str = "docs",
    text_field: str = "page_content",
    vector_name: str | None = None,
    uuid_ids: bool = False,
) -> str:
    """Write ``chunks`` (payload: text, ``source``, ``topic``, ``n``) with ``vectors`` into a
    new collection of the embedded Qdrant ``folder``, close the client; return the
    ``qdrant+path:`` URL that attaches it."""
    from qdrant_client import QdrantClient, models

    params = models.VectorParams(size=vectors.shape[1], distance=models.Distance(distance))
    client = QdrantClient(path=str(folder))
    try:
        client.create_collection(
            collection, vectors_config=params if vector_name is None else {vector_name: params}
        )
        points = [
            models.PointStruct(
                id=str(uuid.UUID(int=i + 1)) if uuid_ids else i,
                vector=vector.tolist() if vector_name is None else {vector_name: vector.tolist()},
                payload={
                    text_field: chunk.text,
                    "source": chunk.source,
                    "topic": Path(chunk.source).parent.name,
                    "n": i,
                },
            )
            for i, (chunk, vector) in enumerate(zip(chunks, vectors, strict=True))
        ]
        client.upsert(collection, points)
    finally:
        client.close()
    return f"qdrant+path://{folder.absolute()}?collection={collection}"
