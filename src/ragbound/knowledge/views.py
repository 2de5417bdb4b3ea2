"""A knowledge base searched at other granularities: which units it can be searched by, the
rows and bytes a search scores, and the views kept so their search is built once."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np

from ragbound.corpus.units import Granularity, granularity_label
from ragbound.errors import IncompatibleArtifactError
from ragbound.knowledge.backing import Contents
from ragbound.knowledge.manifest import KBManifest

V = TypeVar("V")


class Views(Generic[V]):
    """Views by granularity, kept for the objects they were made from (compared by identity:
    a change of contents or of search always replaces the manifest, so a view never outlives
    what it was made from)."""

    def __init__(self) -> None:
        self._views: dict[Hashable, V] = {}
        self._made_from: tuple[object, ...] = ()

    def get(self, made_from: tuple[object, ...], wanted: Hashable, make: Callable[[], V]) -> V:
        """The view ``wanted`` of what ``made_from`` names: kept, else ``make()`` kept."""
        if len(made_from) != len(self._made_from) or any(
            a is not b for a, b in zip(made_from, self._made_from, strict=True)
        ):
            self._views, self._made_from = {}, made_from
        if wanted not in self._views:
            self._views[wanted] = make()
        return self._views[wanted]


def check_indexed(manifest: KBManifest, path: Path | None, wanted: tuple[Granularity, ...]) -> None:
    """IncompatibleArtifactError when the knowledge base did not index a unit of ``wanted``."""
    missing = [g for g in wanted if g not in manifest.units.indexed]
    if missing:
        raise IncompatibleArtifactError(
            f"the knowledge base {path or ''} does not index {', '.join(missing)} units (it "
            f"indexes {granularity_label(manifest.units.indexed)}): index it again with "
            f"ragbound index --granularity {granularity_label(wanted)}"
        )


def index_size(contents: Contents, granularity: tuple[Granularity, ...]) -> tuple[int, int]:
    """Rows a search at ``granularity`` scores and their vectors' bytes (0 for BM25)."""
    fine = sum(u.granularity in granularity for u in contents.units.units)
    chunk_rows = len(contents.chunks) if "chunk" in granularity else 0
    if contents.manifest.embedder.kind != "dense":
        return fine + chunk_rows, 0
    chunk_bytes = np.dtype(contents.manifest.vector_dtype).itemsize  # units are float32
    return fine + chunk_rows, contents.dimension * (chunk_rows * chunk_bytes + fine * 4)
