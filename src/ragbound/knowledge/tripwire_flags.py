"""How a store's records are told apart as tripwires: the metadata flag, read by the attached
backings (to leave tripwires out of the knowledge) and by :mod:`ragbound.tripwires.collection`
(to read and write them). Imports nothing from the package."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

TRIPWIRE_FLAG = "ragbound_tripwire"


class StoredRecords(NamedTuple):
    """Records read from a collection: ids, texts, metadata and vectors (rows aligned)."""

    keys: list[str]
    texts: list[str]
    metadatas: list[dict[str, Any]]
    vectors: np.ndarray


def is_tripwire(metadata: dict[str, Any] | None) -> bool:
    """Whether a record's metadata (or payload) flags it as a tripwire."""
    return bool(metadata) and metadata.get(TRIPWIRE_FLAG) not in (None, "")  # type: ignore[union-attr]
