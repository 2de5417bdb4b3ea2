"""The tripwire records of an attached Chroma collection (see
:mod:`ragbound.tripwires.collection`): read by scanning the metadata (Chroma cannot filter
on a key being present), written with their vectors and texts, deleted by id."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragbound.knowledge.chroma import (
    PAGE,
    ChromaLocation,
    chroma_errors,
    open_collection,
    pages,
)
from ragbound.knowledge.tripwire_flags import StoredRecords, StoreTripwires, is_tripwire, stacked


class ChromaTripwires(StoreTripwires):
    """Tripwire records of one Chroma collection, on its server."""

    location: ChromaLocation

    def read(self, vectors: bool = True) -> StoredRecords:
        """Every flagged record (any metadata filter aside), with its stored vector (none,
        an empty array, when not ``vectors``)."""
        include = ["documents", "metadatas", *(["embeddings"] if vectors else [])]
        with chroma_errors(self.location):
            collection = self._open()
            flagged = [
                key
                for page in pages(collection, None, ["metadatas"])
                for key, metadata in zip(page["ids"], page["metadatas"] or [], strict=True)
                if is_tripwire(metadata)
            ]
            found = [
                collection.get(ids=flagged[at : at + PAGE], include=include)
                for at in range(0, len(flagged), PAGE)
            ]
        rows = [row for page in found for row in page["embeddings"]] if vectors else []
        return StoredRecords(
            keys=[key for page in found for key in page["ids"]],
            texts=[text or "" for page in found for text in page["documents"]],
            metadatas=[dict(m) for page in found for m in page["metadatas"]],
            vectors=stacked(rows),
        )

    def write(self, records: StoredRecords) -> None:
        """Add the records (their vectors as given: nothing is embedded by Chroma)."""
        with chroma_errors(self.location):
            collection = self._open()
            for at in range(0, len(records.keys), PAGE):
                part = slice(at, at + PAGE)
                collection.add(
                    ids=records.keys[part],
                    embeddings=records.vectors[part],
                    documents=records.texts[part],
                    metadatas=records.metadatas[part],
                )

    def delete(self, keys: Sequence[str]) -> None:
        with chroma_errors(self.location):
            self._open().delete(ids=list(keys))

    def _open(self) -> Any:
        return open_collection(self.location)
