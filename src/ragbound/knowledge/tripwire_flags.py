"""How a store's records are told apart as tripwires: the metadata flag, read by the attached
backings (to leave tripwires out of the knowledge) and by :mod:`ragbound.tripwires.collection`
(to read and write them). Imports nothing from the package."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

TRIPWIRE_FLAG = "ragbound_tripwire"
KEY_PREFIX = "ragbound-tripwire-"  # the key of a tripwire record written by ragbound


class StoredRecords(NamedTuple):
    """Records read from a collection: ids, texts, metadata and vectors (rows aligned)."""

    keys: list[str]
    texts: list[str]
    metadatas: list[dict[str, Any]]
    vectors: np.ndarray


def is_tripwire(metadata: dict[str, Any] | None) -> bool:
    """Whether a record's metadata (or payload) flags it as a tripwire."""
    return bool(metadata) and metadata.get(TRIPWIRE_FLAG) not in (None, "")  # type: ignore[union-attr]


def stacked(vectors: list[Any]) -> np.ndarray:
    """Stored vectors as float32 rows (an empty (0, 0) array when there are none)."""
    return np.asarray(vectors, np.float32) if vectors else np.empty((0, 0), np.float32)


class StoreTripwires:
    """What the tripwire records of every attached store share: the location (for messages)
    and the key a tripwire written by ragbound gets."""

    def __init__(self, location: Any):
        self.location = location

    def describe(self) -> str:
        return self.location.describe()

    def key_of(self, tripwire_id: str) -> str:
        return KEY_PREFIX + tripwire_id
