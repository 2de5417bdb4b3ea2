"""The tripwire points of an attached Qdrant collection (see
:mod:`ragbound.tripwires.collection`): selected by the flag in their payload, written with
their vectors and texts, deleted by id.

A point ragbound writes keeps its text under the collection's text field and the flag beside
it, or, when the text field is LangChain's ``page_content``, under ``metadata`` as LangChain's
Qdrant store does: so the application's own framework reads it back as a flagged document.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragbound.knowledge.attached import (
    LANGCHAIN_TEXT,
    LLAMAINDEX_NODE,
    NESTED_METADATA,
)
from ragbound.knowledge.qdrant import (
    PAGE,
    QdrantLocation,
    open_client,
    payload_text,
    qdrant_errors,
    scroll,
    tripwire_condition,
    vector_of,
    wanted_vectors,
)
from ragbound.knowledge.tripwire_flags import TRIPWIRE_FLAG, StoredRecords, StoreTripwires, stacked


class QdrantTripwires(StoreTripwires):
    """Tripwire points of one Qdrant collection (a server or an embedded folder)."""

    location: QdrantLocation

    def key_of(self, tripwire_id: str) -> str:
        """A point id Qdrant takes (a UUID), the same for the same tripwire id."""
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"ragbound-tripwire:{tripwire_id}"))

    def read(self, vectors: bool = True) -> StoredRecords:
        """Every flagged point (any ``where`` filter aside), with its stored vector (none, an
        empty array, when not ``vectors``)."""
        from qdrant_client import models

        where = models.Filter(must=[tripwire_condition(models, present=True)])
        wanted = wanted_vectors(self.location) if vectors else False
        with qdrant_errors(self.location):
            points = list(scroll(open_client(self.location), self.location, where, wanted))
        rows = [vector_of(point, self.location) for point in points] if vectors else []
        field = self.location.text_field
        return StoredRecords(
            keys=[str(point.id) for point in points],
            texts=[str(payload_text(point.payload or {}, field) or "") for point in points],
            metadatas=[_metadata(point.payload or {}) for point in points],
            vectors=stacked(rows),
        )

    def write(self, records: StoredRecords) -> None:
        from qdrant_client import models

        points = [
            models.PointStruct(
                id=key,
                vector=self._vector(vector),
                payload=self._payload(text, metadata),
            )
            for key, text, metadata, vector in zip(*records, strict=True)
        ]
        client = open_client(self.location)
        with qdrant_errors(self.location):
            for at in range(0, len(points), PAGE):
                client.upsert(self.location.collection, points[at : at + PAGE], wait=True)

    def delete(self, keys: Sequence[str]) -> None:
        from qdrant_client import models

        client = open_client(self.location)
        with qdrant_errors(self.location):
            client.delete(
                self.location.collection,
                points_selector=models.PointIdsList(points=list(keys)),
                wait=True,
            )

    def _vector(self, vector: np.ndarray) -> Any:
        values = np.asarray(vector, np.float32).tolist()
        return {self.location.vector_name: values} if self.location.vector_name else values

    def _payload(self, text: str, metadata: dict[str, Any]) -> dict[str, Any]:
        """The layout the collection's framework reads back as a flagged document."""
        field = self.location.text_field or LANGCHAIN_TEXT
        if field == LANGCHAIN_TEXT:
            return {LANGCHAIN_TEXT: text, NESTED_METADATA: dict(metadata)}
        if field == LLAMAINDEX_NODE:  # a TextNode as LlamaIndex stores one, the flag inside too
            node = {"text": text, "metadata": dict(metadata), "class_name": "TextNode"}
            return {LLAMAINDEX_NODE: json.dumps(node), "_node_type": "TextNode", **metadata}
        return {field: text, **metadata}


def _metadata(payload: dict[str, Any]) -> dict[str, Any]:
    """The flag and its fields, from the payload's top or its ``metadata`` object."""
    nested = payload.get(NESTED_METADATA)
    if isinstance(nested, dict) and TRIPWIRE_FLAG in nested:
        return dict(nested)
    return dict(payload)
