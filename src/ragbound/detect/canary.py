"""Canaries: a few calibration queries and what the knowledge returned for them then.

A store another application owns, or an embedding endpoint, has no ragbound manifest: it may be
re-embedded or serve another model, and the calibration's p-values would be wrong. So a
calibration records :data:`CANARY_COUNT` of its queries with their top-k similarities (higher
= closer) and chunk ids, and :func:`check_canaries` searches them again (docs/stores.md). A
move is the largest absolute similarity change: rank by rank for an exact search; over the rows
found both times for an approximate one, whose graph search may find other neighbours (rank by
rank again when no canary finds any of its rows: re-indexed wholesale).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel

from ragbound.artifacts import utc_now
from ragbound.errors import IncompatibleArtifactError
from ragbound.knowledge.protocol import Knowledge

CANARY_COUNT = 5
CANARY_K = 5
# Exact searches: the same query and vectors give the same similarities to float32 rounding
# (1e-6 to 1e-5 across batch sizes and engines); 1e-3 is far above that and far below what a
# changed embedder or re-embedded rows move (0.05 and more on MiniLM's cosines).
EXACT_TOLERANCE = 1e-3
# Approximate searches: the compared rows are the same rows, but the engine may compute their
# distances along another float32 path (graph search vs. a full scan under a size threshold,
# a float16 graph, an int8 rescoring), and the fallback compares the top similarity of
# possibly different rows; 1e-2 leaves room for that and still catches a changed embedder.
# Rebuilding an HNSW graph moves the shared rows by 0 but the top-5 rank by rank by up to 0.30
# (tests/detect/test_canary.py): why approximate searches compare the same rows.
APPROXIMATE_TOLERANCE = 1e-2
PREVIEW = 40  # characters of a canary's query in messages


class Canary(BaseModel):
    """One probe query and its top-k as searched at calibration (similarities descending)."""

    query: str
    similarities: list[float]
    chunk_ids: list[str]


class CanaryCheck(BaseModel):
    """The canaries searched again: the largest similarity move (absolute, in the search's
    similarity units), the query that moved most, and how many canaries' top rows changed."""

    checked_at: str
    canaries: int
    largest_move: float
    moved_query: str | None = None
    rows_changed: int = 0
    tolerance: float
    exact: bool

    @property
    def ok(self) -> bool:
        return self.largest_move <= self.tolerance

    def message(self) -> str:
        """One line naming what moved (for a refusal or ``/readyz``)."""
        query = self.moved_query or ""
        shown = query if len(query) <= PREVIEW else query[: PREVIEW - 4] + " ..."
        return (
            f"the store's similarities moved by {self.largest_move:.3g} on canary {shown!r} "
            f"since calibration (tolerance {self.tolerance:g}; {self.rows_changed} of "
            f"{self.canaries} canaries' top rows changed): the collection was re-embedded or "
            "re-indexed, or the endpoint serves another model; calibrate again, or --force"
        )


def pick_canaries(queries: Sequence[str], count: int = CANARY_COUNT) -> list[str]:
    """``count`` queries spread evenly over ``queries`` (first and last included)."""
    if not queries:
        return []
    rows = np.unique(np.linspace(0, len(queries) - 1, min(count, len(queries))).round())
    return [queries[int(i)] for i in rows]


def record_canaries(kb: Knowledge, queries: Sequence[str], k: int) -> list[Canary]:
    """Search the canaries of ``queries`` in ``kb`` now and keep their top-min(CANARY_K, k)
    (``k``: the calibration's, which the search is known to fill; a framework retriever may
    return no more)."""
    probes = pick_canaries(queries)
    if not probes or len(kb) == 0:
        return []
    hits = kb.search(probes, min(CANARY_K, k, len(kb)))
    return [
        Canary(
            query=query,
            similarities=[float(s) for s in hits.similarities[i]],
            chunk_ids=[kb.chunk_at(int(j)).id for j in hits.indices[i]],
        )
        for i, query in enumerate(probes)
    ]


def check_canaries(kb: Knowledge, canaries: Sequence[Canary]) -> CanaryCheck:
    """Search the canaries again in ``kb`` and compare (see the module's docstring)."""
    exact = kb.describe().exact
    tolerance = EXACT_TOLERANCE if exact else APPROXIMATE_TOLERANCE
    check = CanaryCheck(
        checked_at=utc_now(), canaries=len(canaries), largest_move=0.0, tolerance=tolerance,
        exact=exact,
    )  # fmt: skip
    if not canaries:
        return check
    k = min(max(len(c.similarities) for c in canaries), len(kb))
    hits = kb.search([c.query for c in canaries], k)
    found = [
        (
            [float(s) for s in hits.similarities[i]],
            [kb.chunk_at(int(j)).id for j in hits.indices[i]],
        )
        for i in range(len(canaries))
    ]
    # no canary finds any of its rows again: re-indexed wholesale (new ids), compare by rank
    by_rank = exact or not any(
        set(c.chunk_ids) & set(ids) for c, (_, ids) in zip(canaries, found, strict=True)
    )
    for canary, (sims, ids) in zip(canaries, found, strict=True):
        move = _move(canary, sims, ids, by_rank=by_rank)
        check.rows_changed += ids[: len(canary.chunk_ids)] != canary.chunk_ids
        if check.moved_query is None or move > check.largest_move:
            check.largest_move, check.moved_query = move, canary.query
    return check


def _move(canary: Canary, sims: list[float], ids: list[str], *, by_rank: bool) -> float:
    """The largest absolute similarity change of one canary: rank by rank, or over the rows
    found both times (0 when it found none of them: a graph search that went astray)."""
    if by_rank:
        pairs = zip(sims, canary.similarities, strict=False)  # k may have shrunk
    else:
        now = dict(zip(ids, sims, strict=True))
        pairs = (
            (now[c], s)
            for c, s in zip(canary.chunk_ids, canary.similarities, strict=True)
            if c in now
        )
    return max((abs(a - b) for a, b in pairs), default=0.0)


def verify_canaries(kb: Knowledge, canaries: Sequence[Canary], *, force: bool = False) -> None:
    """Refuse (IncompatibleArtifactError, one line) when the canaries moved past the
    tolerance, unless ``force``; nothing is searched when forced or without canaries."""
    if force or not canaries:
        return
    check = check_canaries(kb, canaries)
    if not check.ok:
        raise IncompatibleArtifactError(check.message())
