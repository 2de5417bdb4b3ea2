"""A calibration: in-knowledge queries and their top-k similarities, saved beside a KB.

Layout (inside the knowledge-base directory)::

    calibration/manifest.json          detector config (k, tau, statistic, ...), KB fingerprint
    calibration/<id>.queries.jsonl     the calibration queries, in order
    calibration/<id>.similarities.npy  float64 (n_queries, k), rows sorted descending

The similarity matrix is the whole null: any statistic can be computed from it later
without re-embedding, so ``check --statistic NAME`` needs no recalibration. The manifest
is written last (atomic rename), so a crash never leaves a calibration that loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, model_validator

from ragbound._version import __version__
from ragbound.artifacts import (
    iter_jsonl,
    read_manifest,
    read_npy,
    sha256_text,
    utc_now,
    write_json,
    write_jsonl,
    write_npy,
)
from ragbound.detect.config import DETECTOR_PARAMS, DetectorConfig
from ragbound.errors import ArtifactError, IncompatibleArtifactError
from ragbound.stores import SearchInfo

CALIBRATION_FORMAT = "ragbound.calibration/1"
CALIBRATION_DIR = "calibration"


class CalibrationManifest(BaseModel):
    """What a calibration was made from and against, and the detector's parameters.

    ``detector`` nests the :class:`DetectorConfig`; manifests written before it existed kept
    k, tau, statistic, alpha and p_value_method at the top level and still load.
    """

    format: Literal["ragbound.calibration/1"] = CALIBRATION_FORMAT
    id: str
    library_version: str = __version__
    created_at: str
    kb_fingerprint: str
    detector: DetectorConfig
    n_queries: int
    queries_source: str = ""
    # how the calibration queries were searched (exact or approximate, with which parameters);
    # None in calibrations made before it was recorded
    search: SearchInfo | None = None

    @model_validator(mode="before")
    @classmethod
    def _nest_flat_parameters(cls, data: Any) -> Any:
        """Accept the older layout with the detector's parameters at the top level."""
        if isinstance(data, dict) and "detector" not in data:
            data = dict(data)
            data["detector"] = {n: data.pop(n) for n in DETECTOR_PARAMS if n in data}
        return data


class Calibration:
    """In-knowledge calibration data for one knowledge base."""

    def __init__(self, manifest: CalibrationManifest, queries: list[str], similarities: np.ndarray):
        self.manifest = manifest
        self.queries = queries
        self.similarities = similarities

    @classmethod
    def create(
        cls,
        queries: Sequence[str],
        similarities: np.ndarray,
        *,
        kb_fingerprint: str,
        config: DetectorConfig,
        queries_source: str = "",
        search: SearchInfo | None = None,
    ) -> Calibration:
        sims = np.ascontiguousarray(similarities, dtype=np.float64)
        created = utc_now()
        manifest = CalibrationManifest(
            id=sha256_text(kb_fingerprint, created, *queries)[:12],
            created_at=created,
            kb_fingerprint=kb_fingerprint,
            detector=config,
            n_queries=len(queries),
            queries_source=queries_source,
            search=search,
        )
        return cls(manifest, list(queries), sims)

    def check_compatible(self, kb_fingerprint: str, *, force: bool = False) -> None:
        """Refuse a knowledge base other than the one this calibration was made against."""
        if force or kb_fingerprint == self.manifest.kb_fingerprint:
            return
        raise IncompatibleArtifactError(
            f"this calibration was made against knowledge base {self.manifest.kb_fingerprint}, "
            f"not {kb_fingerprint} (its chunks or embedder changed): calibrate again with "
            "ragbound calibrate, or force it (--force) if you know the null still holds"
        )

    def save(self, kb_dir: Path) -> Path:
        """Write data files under new names, then the manifest; remove stale files."""
        folder = kb_dir / CALIBRATION_DIR
        ident = self.manifest.id
        write_npy(folder / f"{ident}.similarities.npy", self.similarities)
        write_jsonl(folder / f"{ident}.queries.jsonl", ({"query": q} for q in self.queries))
        write_json(folder / "manifest.json", self.manifest.model_dump(mode="json"))
        for path in folder.glob("*.*"):
            if path.name != "manifest.json" and not path.name.startswith(f"{ident}."):
                path.unlink(missing_ok=True)
        return folder

    @classmethod
    def exists(cls, kb_dir: Path) -> bool:
        return (kb_dir / CALIBRATION_DIR / "manifest.json").is_file()

    @classmethod
    def load(cls, kb_dir: Path) -> Calibration:
        """Load and check a calibration; missing, corrupt or inconsistent files raise."""
        folder = kb_dir / CALIBRATION_DIR
        if not cls.exists(kb_dir):
            raise ArtifactError(
                f"{kb_dir} has no calibration yet: run "
                f"ragbound calibrate {kb_dir} --queries IN_KNOWLEDGE_FILE"
            )
        manifest = read_manifest(
            folder / "manifest.json",
            CalibrationManifest,
            CALIBRATION_FORMAT,
            "calibration manifest",
        )
        sims = read_npy(folder / f"{manifest.id}.similarities.npy", "calibration similarities")
        rows = iter_jsonl(folder / f"{manifest.id}.queries.jsonl", "calibration queries")
        queries = [str(row.get("query", "")) for row in rows]
        expected = (manifest.n_queries, manifest.detector.k)
        if sims.shape != expected or len(queries) != manifest.n_queries:
            raise ArtifactError(
                f"{folder}: files hold {len(queries)} queries and similarities {sims.shape}, "
                f"the manifest says {expected}"
            )
        if not np.isfinite(sims).all():
            raise ArtifactError(f"{folder}: calibration similarities hold NaN or inf")
        return cls(manifest, queries, sims)
