"""Guard: a knowledge base plus its calibration; ``check(query)`` gives a typed Verdict."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragbound.corpus import validate_query
from ragbound.detect.boundary import BoundaryDetector
from ragbound.detect.calibration import Calibration
from ragbound.detect.config import DEFAULTS, DetectorConfig, resolve_tau
from ragbound.errors import InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.results import Neighbour, Verdict
from ragbound.stores import Hits

PREVIEW_CHARS = 240


class Guard:
    """Online out-of-knowledge checks against one knowledge base.

    Example:
        >>> kb = KnowledgeBase.load("kb/")  # doctest: +SKIP
        >>> guard = Guard.calibrate(kb, in_knowledge_questions)  # doctest: +SKIP
        >>> verdict = guard.check("How do I bake sourdough bread?")  # doctest: +SKIP
        >>> verdict.reject, verdict.p_value  # doctest: +SKIP
        (True, 0.0033)
    """

    def __init__(self, kb: KnowledgeBase, calibration: Calibration, *, force: bool = False):
        calibration.check_compatible(kb.fingerprint, force=force)
        calibration.check_search(kb.describe(), force=force)
        self.kb = kb
        self.calibration = calibration
        self._detectors: dict[tuple[str, float], BoundaryDetector] = {}

    # ------------------------------------------------------------- lifecycle
    @classmethod
    def calibrate(
        cls,
        kb: KnowledgeBase,
        queries: Sequence[str],
        config: DetectorConfig | None = None,
        *,
        queries_source: str = "",
        progress: bool = False,
        **params: Any,
    ) -> Guard:
        """Retrieve top-k for in-knowledge queries and keep them as the empirical null.

        ``config`` holds the detector's parameters (default: :class:`DetectorConfig`'s);
        keyword ``params`` (statistic, k, tau, alpha, p_value_method) override single fields.
        ``tau="auto"`` takes the embedder's training temperature (:func:`resolve_tau`).
        """
        if "tau" in params:
            params["tau"] = resolve_tau(params["tau"], kb.manifest.embedder.name)
        config = (config or DEFAULTS).updated(**params)
        if len(queries) < 2:
            raise InputError(
                f"calibration needs at least 2 in-knowledge queries, got {len(queries)}"
            )
        hits = search_in_batches(kb, queries, config.k, progress=progress)
        calibration = Calibration.create(
            queries,
            hits.similarities,
            kb_fingerprint=kb.fingerprint,
            config=config,
            queries_source=queries_source,
            search=kb.describe(),
        )
        guard = cls(kb, calibration)
        _warn_if_powerless(len(queries), config.alpha)
        return guard

    def save(self, *, on_wait: Callable[[str], None] | None = None) -> Path:
        """Save the calibration inside the knowledge base's directory (see
        :meth:`Calibration.save`: under the knowledge base's writer lock, refused if the
        knowledge base changed since it was loaded)."""
        if self.kb.path is None:
            raise InputError("save the knowledge base first: the calibration lives inside it")
        return self.calibration.save(self.kb.path, on_wait=on_wait)

    @classmethod
    def load(cls, kb_dir: str | Path, *, force: bool = False) -> Guard:
        """Open a saved knowledge base and its calibration (refused if they do not match)."""
        kb = KnowledgeBase.load(kb_dir)
        return cls(kb, Calibration.load(Path(kb_dir)), force=force)

    # ------------------------------------------------------------- detectors
    @property
    def config(self) -> DetectorConfig:
        """The detector parameters saved with the calibration."""
        return self.calibration.manifest.detector

    @property
    def k(self) -> int:
        return self.config.k

    def detector(
        self, statistic: str | None = None, alpha: float | None = None
    ) -> BoundaryDetector:
        """The fitted detector for a statistic (default: the calibration's), cached."""
        config = self.config.updated(statistic=statistic, alpha=alpha)
        key = (config.statistic, config.alpha)
        if key not in self._detectors:
            detector = BoundaryDetector.from_config(config)
            self._detectors[key] = detector.fit(self.calibration.similarities)
        return self._detectors[key]

    # ----------------------------------------------------------------- checks
    def check(
        self,
        query: str,
        *,
        statistic: str | None = None,
        alpha: float | None = None,
        evidence: int = 3,
    ) -> Verdict:
        """Test one query: p-value, decision at alpha, and the nearest chunks as evidence."""
        return self.check_many([query], statistic=statistic, alpha=alpha, evidence=evidence)[0]

    def check_many(
        self,
        queries: Sequence[str],
        *,
        statistic: str | None = None,
        alpha: float | None = None,
        evidence: int = 3,
        progress: bool = False,
    ) -> list[Verdict]:
        """Test a batch of queries (embedded in batches; one Verdict per query, in order)."""
        detector = self.detector(statistic, alpha)
        hits = search_in_batches(self.kb, queries, self.k, progress=progress)
        scores, p_values = detector.score_p_value(hits.similarities)
        return [
            Verdict(
                query=query,
                statistic=detector.statistic,
                score=float(scores[i]),
                p_value=float(p_values[i]),
                reject=bool(p_values[i] <= detector.alpha),
                alpha=detector.alpha,
                critical_value=detector.critical_value_,
                k=detector.k,
                n_calibration=detector.n_calibration_,
                neighbours=self._neighbours(hits, i, evidence),
            )
            for i, query in enumerate(queries)
        ]

    def _neighbours(self, hits: Hits, row: int, count: int) -> list[Neighbour]:
        out = []
        for rank in range(min(count, hits.indices.shape[1])):
            chunk = self.kb.chunk_at(hits.indices[row, rank])
            out.append(
                Neighbour(
                    rank=rank + 1,
                    chunk_id=chunk.id,
                    doc_id=chunk.doc_id,
                    source=chunk.source,
                    similarity=float(hits.similarities[row, rank]),
                    text=chunk.text[:PREVIEW_CHARS],
                )
            )
        return out


def _warn_if_powerless(n_queries: int, alpha: float) -> None:
    """With n calibration queries no conformal p-value is below 1/(n+1): say so early."""
    needed = math.ceil(1 / alpha - 1)
    if n_queries < needed:
        warnings.warn(
            f"{n_queries} calibration queries cannot reject anything at alpha={alpha}: the "
            f"smallest p-value is 1/{n_queries + 1}; use at least {needed} queries",
            UserWarning,
            stacklevel=3,
        )


def search_in_batches(
    kb: KnowledgeBase, queries: Sequence[str], k: int, *, batch: int = 256, progress: bool = False
) -> Hits:
    """Search many queries in batches (bounded memory, a progress bar on a terminal)."""
    from ragbound.progress import progress_bar

    if not queries:
        raise InputError("no queries given")
    for number, query in enumerate(queries, start=1):
        validate_query(query, location=f"query {number}")  # numbered across the whole batch
    sims, idx = [], []
    with progress_bar(len(queries), "retrieving", progress) as advance:
        for start in range(0, len(queries), batch):
            part = kb.search(queries[start : start + batch], k)
            sims.append(part.similarities)
            idx.append(part.indices)
            advance(len(part.indices))
    return Hits(similarities=np.concatenate(sims), indices=np.concatenate(idx))
