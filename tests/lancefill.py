"""Fill a LanceDB table in a folder as another application would: LangChain's layout (``id``,
``vector``, ``text``, a ``metadata`` struct), LlamaIndex's (the same with ``doc_id`` and its node
JSON in ``metadata``) or a plain one (``key``, ``embedding``, ``body`` and flat columns)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragbound.corpus import Chunk


def rows(chunks: Sequence[Chunk], vectors: np.ndarray, layout: str = "langchain") -> list[dict]:
    """One row per chunk (metadata: ``source``, ``topic``, ``n``)."""
    made: list[dict[str, Any]] = []
    for i, (chunk, vector) in enumerate(zip(chunks, np.asarray(vectors, np.float32), strict=True)):
        metadata: dict[str, Any] = {
            "source": chunk.source, "topic": Path(chunk.source).parent.name, "n": i
        }  # fmt: skip
        if layout == "plain":
            made.append({"key": i, "embedding": vector.tolist(), "body": chunk.text, **metadata})
            continue
        row = {"id": f"row-{i:02d}", "vector": vector.tolist(), "text": chunk.text}
        if layout == "llamaindex":
            node = {"text": "", "metadata": {}, "class_name": "TextNode"}  # remove_text=True
            metadata |= {"_node_content": json.dumps(node), "_node_type": "TextNode"}
            metadata |= {"document_id": chunk.doc_id, "doc_id": chunk.doc_id}
            row["doc_id"] = chunk.doc_id
        made.append({**row, "metadata": metadata})
    return made


def fill(
    folder: Path,
    chunks: Sequence[Chunk],
    vectors: np.ndarray,
    *,
    table: str = "docs",
    layout: str = "langchain",
) -> str:
    """Write a new table of ``chunks`` and ``vectors`` into ``folder``; return the
    ``lancedb:`` URL that attaches it."""
    import lancedb

    lancedb.connect(str(folder)).create_table(table, data=rows(chunks, vectors, layout))
    return f"lancedb://{Path(folder).absolute()}?table={table}"


def table(url: str) -> Any:
    """The table a ``lancedb:`` URL names, opened as the application would."""
    import lancedb

    from ragbound.knowledge.lancedb import parse_url

    place = parse_url(url)
    return lancedb.connect(place["folder"]).open_table(place["table"])
