"""Tripwires in a framework's own store, found by the knowledge's search itself (the RAR design).

Documents flagged with metadata ``ragbound_tripwire`` are kept out of the knowledge's rows by
:class:`~ragbound.adapters._framework.FrameworkSearch`; :class:`FlaggedTripwires` hands them
to the :class:`~ragbound.tripwires.TripwireTest` as that query's tripwire hits, so one search
decides both.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ragbound.adapters._framework import Found, FrameworkKnowledge, metadata_of
from ragbound.artifacts import sha256_text
from ragbound.stores import Hits
from ragbound.tripwires import Tripwire, TripwireManifest, TripwireRule, TripwireTest
from ragbound.tripwires.collection import tripwire_of
from ragbound.tripwires.files import check_unique_ids
from ragbound.tripwires.models import set_hash


class FlaggedTripwires:
    """The tripwire set a :class:`~ragbound.tripwires.TripwireTest` reads on a framework
    store: ``search`` answers with the flagged documents the knowledge's search met.

    ``tripwires``: the set the application added to its store (may be empty: then the rule's
    fixed floor, or none, applies, as for a set of fewer than two).
    """

    reads_search = True  # its hits come from the knowledge's search, keyed by what it searched

    def __init__(
        self,
        knowledge: FrameworkKnowledge,
        tripwires: Sequence[Tripwire],
        *,
        margin: int = 5,
        embed: Callable[[list[str]], Any] | None = None,
    ):
        """``margin``: results the knowledge's search fetches beyond its depth, so that up to
        that many tripwires among the nearest cost no second search (the rule's k).
        ``embed``: embeds the declared texts for the floor (default: the knowledge's query
        embedder; without either, the rule's fixed floor applies)."""
        declared = list(tripwires)
        check_unique_ids(declared, "the declared tripwires")
        self.kb = knowledge
        self.tripwires = declared  # then any other flagged document met, in order met
        self.vectors = _embedded(knowledge, declared, embed)
        self.manifest = TripwireManifest(
            home="collection",
            embedder_identity=knowledge.embedder_name,
            n_tripwires=len(declared),
            set_hash=set_hash(declared),
        )
        self._rows = {t.id: row for row, t in enumerate(declared)}
        self._lock = threading.Lock()
        knowledge.store.tripwire_margin = max(knowledge.store.tripwire_margin, margin)

    def __len__(self) -> int:
        return len(self.tripwires)

    def topics(self) -> dict[str, int]:
        return dict(sorted(Counter(t.topic for t in self.tripwires).items()))

    def search(self, queries: Any, k: int) -> Hits:
        """Each query's flagged documents (at most ``k``), nearest first, as rows of
        ``tripwires``; rows with fewer are padded with -inf (never merged in)."""
        found = [self._met(query, k)[:k] for query in queries]
        width = max((len(row) for row in found), default=0)
        sims = np.full((len(found), width), -np.inf, dtype=np.float32)
        rows = np.zeros((len(found), width), dtype=np.int64)
        for i, row in enumerate(found):
            for j, (similarity, result) in enumerate(row):
                sims[i, j], rows[i, j] = similarity, self._row_of(result)
        return Hits(sims, rows)

    def _met(self, query: Any, k: int) -> list[tuple[float, Found]]:
        met = self.kb.store.flagged(query)
        if met is None:  # called without the knowledge's search (TripwireTest.check)
            self.kb.store.search(np.asarray([query]) if not isinstance(query, str) else [query], k)
            met = self.kb.store.flagged(query) or []
        return met

    def _row_of(self, result: Found) -> int:
        key, text, _, original = result
        metadata = metadata_of(original) or {}
        tripwire = tripwire_of(key or sha256_text(text)[:16], text, metadata, "the store")
        with self._lock:
            row = self._rows.get(tripwire.id)
            if row is None:
                row = self._rows[tripwire.id] = len(self.tripwires)
                self.tripwires.append(tripwire)
            return row


def _embedded(
    knowledge: FrameworkKnowledge,
    tripwires: list[Tripwire],
    embed: Callable[[list[str]], Any] | None,
) -> np.ndarray:
    """The declared tripwires' unit vectors (none: no way to embed them, or scores that are
    not the cosine: a floor derived from cosines would not be on their scale)."""
    if embed is None and knowledge.query_embedder() is not None:
        embed = knowledge.embed
    if not tripwires or embed is None or not knowledge.store.exact_scores:
        return np.empty((0, 0), np.float32)
    vectors = np.asarray(embed([t.text for t in tripwires]), np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def flagged_guard(
    knowledge: FrameworkKnowledge,
    tripwires: Sequence[Tripwire] | None,
    rule: TripwireRule | None = None,
    embed: Callable[[list[str]], Any] | None = None,
) -> TripwireTest | None:
    """The tripwire guard of a framework store holding ``tripwires`` (None: no rule), by
    ``rule`` (default :meth:`TripwireRule.default`); the search fetches the rule's k more."""
    if tripwires is None:
        return None
    rule = rule or TripwireRule.default()
    flagged = FlaggedTripwires(knowledge, tripwires, margin=rule.k, embed=embed)
    return TripwireTest(knowledge, rule, tripwires=flagged)
