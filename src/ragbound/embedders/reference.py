"""Reference vectors of the bundled models (small fixtures beside this module, made once with
sentence-transformers by scripts/bundled_reference.py): what a graph built from the weights
without torch must reproduce, to :data:`TOLERANCE` on every coordinate."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from ragbound.artifacts import file_sha256

# by bundled embedder name: the reference file of its weights
REFERENCE_FILES = {"minilm": "reference_minilm.json", "mpnet": "reference_mpnet.json"}
# largest absolute difference allowed between a built graph's vector and the reference's
TOLERANCE = 1e-5


@dataclass(frozen=True)
class Reference:
    """Probe texts and sentence-transformers' unit vectors of them, for one set of weights."""

    file: str
    texts: list[str]
    vectors: np.ndarray
    made_with: str


def weights_digest(folder: Path) -> str:
    """The SHA-256 of ``folder``'s model.safetensors: a reference belongs to these weights."""
    return file_sha256(folder / "model.safetensors")


def reference_for(folder: Path) -> Reference | None:
    """The reference of ``folder``'s weights, or None (weights no fixture was made for)."""
    if not (folder / "model.safetensors").is_file():
        return None
    return _references().get(weights_digest(folder))


@cache
def _references() -> dict[str, Reference]:
    found = {}
    for name in REFERENCE_FILES.values():
        data = json.loads((Path(__file__).parent / name).read_text(encoding="utf-8"))
        vectors = np.asarray(data["vectors"], dtype=np.float32)
        found[data["weights_sha256"]] = Reference(name, data["texts"], vectors, data["made_with"])
    return found


def largest_difference(vectors: np.ndarray, reference: Reference) -> float:
    """The largest absolute difference between ``vectors`` and the reference's, coordinate
    by coordinate."""
    return float(np.max(np.abs(vectors.astype(np.float64) - reference.vectors)))
