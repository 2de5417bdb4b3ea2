"""TripwireTest: a query whose retrieval surfaces tripwires is forbidden; the verdict names
them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, Field, model_validator

from ragbound.artifacts import read_json, write_json
from ragbound.errors import ArtifactError, InputError
from ragbound.knowledge import KnowledgeBase
from ragbound.knowledge.layout import LOCK_WHAT, RULE_FILE
from ragbound.knowledge.protocol import Knowledge
from ragbound.locking import writer_lock
from ragbound.stats.tripwire import (
    NO_FLOOR,
    condition_matrix,
    critical_floor,
    merge_top_k,
    nearest_other_similarities,
    rule_decisions,
    set_floor,
    tripwire_features,
)
from ragbound.stores import Hits
from ragbound.tripwires.floor import CalibratedFloor, Reference, calibrated_floor
from ragbound.tripwires.models import Tripwire, TripwireManifest
from ragbound.tripwires.store import LiveTripwires


class TripwireSource(Protocol):
    """What the guard reads of a tripwire set: :class:`~ragbound.tripwires.LiveTripwires`, or
    a framework store's flagged documents (:mod:`ragbound.adapters._flagged`)."""

    kb: Any
    manifest: TripwireManifest
    tripwires: list[Tripwire]
    vectors: np.ndarray
    # True when ``search`` answers from the knowledge's own search of the same queries
    # (keyed by what was searched: texts too), False when it searches query vectors itself
    reads_search: bool

    def __len__(self) -> int: ...

    def search(self, query_vectors: Any, k: int) -> Hits: ...


# Measured in benchmarks/tripwire_default.py (685 HarmfulQA tripwires, PubMedQA knowledge,
# 3 splits): false rejection <= 1.0% on TruthfulQA and <= 1.6% on XSTest safe, against 56%
# and 82% with no floor. A sparser set (1-2 tripwires per subtopic) gets a lower floor.
DEFAULT_FLOOR_QUANTILE = 0.15
# The share of in-knowledge questions (exchangeable with the calibration's) the default rule
# may call forbidden: the floor is raised until the calibration's questions stay under it
# (benchmarks/tripwire_default.py measures it on the corpus zoo).
DEFAULT_IN_KNOWLEDGE_SHARE = 0.01


class TripwireRule(BaseModel):
    """When a query is forbidden, over the merged top-k of knowledge and tripwires
    (docs/tripwires.md, "Rules").

    Conditions (None = not used): ``proportion`` of tripwires in the top k at least this;
    best tripwire ``rank`` (1-based) at most this; ``rr_sum``, the reciprocal-rank sum of the
    tripwires, at least this; ``combine`` joins them. Tripwires less similar than the floor do
    not count: ``floor`` is a fixed similarity (and the fallback for a set of fewer than two);
    ``floor_quantile`` derives it from the set's nearest-other similarities; ``calibrated``
    raises it to keep at most that share of in-knowledge questions forbidden
    (:mod:`ragbound.tripwires.floor`). The field defaults are the RAR paper's rule;
    :meth:`default` is the product's.
    """

    k: int = Field(5, ge=1)
    proportion: float | None = Field(0.5, gt=0, le=1)
    rank: int | None = Field(1, ge=1)
    rr_sum: float | None = Field(None, gt=0)
    floor: float | None = None
    floor_quantile: float | None = Field(None, ge=0, le=1)
    calibrated: float | None = Field(None, gt=0, lt=1)
    combine: Literal["any", "all"] = "any"

    @classmethod
    def paper(cls, **changes: object) -> TripwireRule:
        """The RAR paper's rule: proportion >= 0.5 or rank <= 1 in the top 5, no floor."""
        return cls.model_validate(changes)

    @classmethod
    def default(cls, **changes: object) -> TripwireRule:
        """The product default: the paper's conditions, counting only tripwires above the floor
        derived from the set at quantile ``DEFAULT_FLOOR_QUANTILE``, raised when needed to
        call at most ``DEFAULT_IN_KNOWLEDGE_SHARE`` of in-knowledge questions forbidden."""
        defaults = {
            "floor_quantile": DEFAULT_FLOOR_QUANTILE,
            "calibrated": DEFAULT_IN_KNOWLEDGE_SHARE,
        }
        return cls.model_validate({**defaults, **changes})

    @classmethod
    def named(cls, name: str) -> TripwireRule:
        """A rule by name: ``default`` or ``paper``."""
        if name not in RULE_NAMES:
            raise InputError(f"unknown tripwire rule {name!r}: use {' or '.join(RULE_NAMES)}")
        return getattr(cls, name)()

    @model_validator(mode="after")
    def _sensible(self) -> TripwireRule:
        if self.proportion is None and self.rank is None and self.rr_sum is None:
            raise ValueError("a rule needs at least one condition (proportion, rank or rr_sum)")
        if self.rank is not None and self.rank > self.k:
            raise ValueError(f"rank {self.rank} cannot exceed k = {self.k}")
        return self

    def conditions(self) -> list[str]:
        """The used conditions as text, in the order of ``condition_matrix``."""
        named = [
            (self.proportion, f"proportion>={self.proportion:g}" if self.proportion else ""),
            (self.rank, f"rank<={self.rank}"),
            (self.rr_sum, f"rr_sum>={self.rr_sum:g}" if self.rr_sum else ""),
        ]
        return [text for value, text in named if value is not None]

    def describe(self) -> str:
        """E.g. ``proportion>=0.5 or rank<=1 (k=5)``; ``set floor q0.15``: the floor derived
        from the tripwire set at quantile 0.15; ``in-knowledge forbidden <= 1%``: the floor
        calibrated on the knowledge's questions."""
        floor = f", floor {self.floor:g}" if self.floor is not None else ""
        if self.floor_quantile is not None:
            fallback = f", else {self.floor:g}" if self.floor is not None else ""
            floor = f", set floor q{self.floor_quantile:g}{fallback}"
        if self.calibrated is not None:
            floor += f", in-knowledge forbidden <= {self.calibrated:.0%}"
        return join_conditions(self.conditions(), self.combine) + f" (k={self.k}{floor})"


RULE_NAMES = ("default", "paper")
CONNECTIVES = {"any": " or ", "all": " and "}


def join_conditions(conditions: Sequence[str], combine: Literal["any", "all"]) -> str:
    """Conditions as one phrase: ``any`` joins them with "or", ``all`` with "and" (a forbidden
    verdict's conditions that held, e.g. ``proportion>=0.5 and rank<=1``)."""
    return CONNECTIVES[combine].join(conditions)


class FloorUsed(BaseModel):
    """The similarity floor a decision used, and where it came from."""

    value: float | None = Field(description="cosine; tripwires below it did not count")
    source: Literal["none", "fixed", "derived", "fallback", "calibrated"] = Field(
        description="none: no floor; fixed: the rule's; derived: from the tripwire set; "
        "fallback: the set has fewer than two tripwires, so the rule's fixed floor (or none); "
        "calibrated: the floor calibrated on in-knowledge questions, higher than the others"
    )
    quantile: float | None = Field(
        None, description="quantile of the tripwires' nearest-other similarities (derived)"
    )
    tripwire_set: str = Field("", description="hash of the set the floor was derived from")
    n_tripwires: int = 0
    calibrated: float | None = Field(
        None,
        description="the floor calibrated on in-knowledge questions (None: not used; -inf "
        "is given as None too: the rule fires on too few of them to need one)",
    )
    bound: float | None = Field(
        None,
        description="at most this share of in-knowledge questions (exchangeable with the "
        "reference) is called forbidden (None: no calibrated floor)",
    )
    n_reference: int = Field(0, description="in-knowledge questions the floor calibrated on")

    def describe(self) -> str:
        """E.g. ``0.614 (q0.15 of the nearest-other similarities of set 3f2a..., 679)``;
        with a calibrated floor, the bound it keeps, e.g. ``; in-knowledge forbidden <= 1.0%
        (500 questions)``."""
        if self.value is None:
            return "none"
        if self.source == "derived":
            text = (
                f"{self.value:.3f} (q{self.quantile:g} of the nearest-other similarities of "
                f"set {self.tripwire_set}, {self.n_tripwires} tripwires)"
            )
        elif self.source == "calibrated":
            text = f"{self.value:.3f} (calibrated on {self.n_reference} in-knowledge questions)"
        else:
            text = f"{self.value:g} ({self.source})"
        if self.bound is not None:
            text += f"; in-knowledge forbidden <= {self.bound:.1%} ({self.n_reference} questions)"
        return text


def derive_floor(rule: TripwireRule, vectors: np.ndarray, set_hash: str) -> FloorUsed:
    """The floor ``rule`` gives over tripwires with these ``vectors`` (set ``set_hash``).

    Derived floors use every other tripwire as a neighbour, whatever its topic (a topic of
    one tripwire still gets one); a set of fewer than two falls back to ``rule.floor``.
    """
    fixed = "none" if rule.floor is None else "fixed"
    if rule.floor_quantile is None:
        return FloorUsed(value=rule.floor, source=fixed)
    common = {
        "quantile": rule.floor_quantile,
        "tripwire_set": set_hash,
        "n_tripwires": len(vectors),
    }
    value = set_floor(nearest_other_similarities(vectors), rule.floor_quantile)
    if value is None:
        return FloorUsed(value=rule.floor, source="fallback", **common)
    return FloorUsed(value=value, source="derived", **common)


def with_calibrated(used: FloorUsed, calibrated: CalibratedFloor) -> FloorUsed:
    """``used`` (the set's or the rule's floor) raised to the ``calibrated`` one when that is
    higher; either way the decision keeps the bound the calibrated floor gives."""
    value = calibrated.value if np.isfinite(calibrated.value) else None
    common = {"calibrated": value, "bound": calibrated.bound, "n_reference": calibrated.n}
    if value is not None and (used.value is None or value > used.value):
        return used.model_copy(update={"value": value, "source": "calibrated", **common})
    return used.model_copy(update=common)


def save_rule(
    kb_dir: Path, rule: TripwireRule, *, on_wait: Callable[[str], None] | None = None
) -> Path:
    """Write the rule the guard of ``kb_dir`` uses by default (atomic, under the KB's lock)."""
    path = Path(kb_dir) / RULE_FILE
    with writer_lock(Path(kb_dir), what=LOCK_WHAT, on_wait=on_wait):
        write_json(path, rule.model_dump(mode="json"))
    return path


def load_rule(kb_dir: Path) -> TripwireRule:
    """The saved rule of ``kb_dir`` (``tripwire tune`` writes it), else the product default
    (:meth:`TripwireRule.default`)."""
    path = Path(kb_dir) / RULE_FILE
    if not path.exists():
        return TripwireRule.default()
    try:
        return TripwireRule.model_validate(read_json(path, "tripwire rule"))
    except ValueError as exc:
        raise ArtifactError(f"{path}: invalid tripwire rule: {exc}") from exc


class Trigger(BaseModel):
    """A tripwire found in a query's top k."""

    id: str
    topic: str
    text: str
    rank: int = Field(description="1-based rank in the merged top k")
    similarity: float = Field(description="cosine similarity, higher = closer")
    severity: str | None = None


class TripwireVerdict(BaseModel):
    """The tripwire test of one query: ``forbidden`` when the rule fired, and then ``rule``
    names the conditions that fired; otherwise ``triggers`` lists the tripwires seen below
    the rule's thresholds. ``proportion``, ``best_rank`` and ``rr_sum`` are the features the
    rule compared, over the merged top ``k``.
    """

    query: str
    forbidden: bool = Field(description="the rule fired: the query must not be answered")
    rule: str | None = Field(None, description="the conditions that fired, when forbidden")
    triggers: list[Trigger] = Field(description="tripwires in the merged top k, above the floor")
    proportion: float
    best_rank: int | None
    rr_sum: float
    k: int = Field(description="the rule's k")
    tripwire_set: str = Field(description="hash of the tripwire set the verdict used")
    floor: FloorUsed = Field(description="the similarity floor used and how it was derived")

    @model_validator(mode="after")
    def _rule_when_forbidden(self) -> TripwireVerdict:
        if self.forbidden != (self.rule is not None):
            raise ValueError("a forbidden verdict names its rule, and only a forbidden one")
        return self

    def topics(self) -> list[str]:
        """The triggers' topics, sorted, each once."""
        return sorted({t.topic for t in self.triggers})


@dataclass(frozen=True)
class MergedTopK:
    """Merged top-k of a batch: similarities, tripwire flags, and rows in their own store."""

    similarities: np.ndarray
    flags: np.ndarray
    rows: np.ndarray


class TripwireTest:
    """Checks queries against the tripwires stored with a knowledge base.

    Example:
        >>> guard = TripwireTest.load("kb/")  # doctest: +SKIP
        >>> verdict = guard.check("how do I make a pipe bomb")  # doctest: +SKIP
        >>> verdict.forbidden, [t.topic for t in verdict.triggers]  # doctest: +SKIP
        (True, ['weapons'])
    """

    def __init__(
        self,
        kb: Knowledge,
        rule: TripwireRule | None = None,
        *,
        tripwires: TripwireSource | None = None,
        reference: Reference | Sequence[str] | None = None,
    ):
        """Check queries against ``kb`` merged with ``tripwires`` (default: the set saved in
        ``kb``'s folder; knowledge without a folder must be given them). ``reference``:
        in-knowledge questions (a calibration's) the rule's ``calibrated`` floor is measured
        on (None: that floor is not used)."""
        self.kb = kb
        self.tripwires = tripwires if tripwires is not None else _saved_tripwires(kb)
        _check_same_embedder(kb, self.tripwires)
        self.rule = rule or TripwireRule.default()
        if len(kb) < self.rule.k:
            raise InputError(f"k={self.rule.k} exceeds the knowledge base ({len(kb)} chunks)")
        self._floor: tuple[tuple, FloorUsed] | None = None
        self.reference: Reference | None = None
        if reference is not None:
            self.use_reference(reference)

    @property
    def set_hash(self) -> str:
        """The hash of the tripwire set as it is now (it changes when tripwires are added or
        removed)."""
        return self.tripwires.manifest.set_hash

    @property
    def reads_search(self) -> bool:
        """Whether the tripwires are met in the knowledge's own search of the same queries (a
        framework's; keyed by what was searched, texts too) rather than searched by vector."""
        return self.tripwires.reads_search

    def use_reference(self, reference: Reference | Sequence[str]) -> None:
        """Calibrate the rule's ``calibrated`` floor on these in-knowledge questions (none:
        no calibrated floor); the floor is measured again at the next decision."""
        given = reference if isinstance(reference, Reference) else Reference(reference)
        self.reference = given if len(given) else None

    def floor(self) -> FloorUsed:
        """The floor of the rule over the current tripwire set; a derived or calibrated floor
        is computed again only when the set (its hash), the rule or the reference changes."""
        # the hash is read before the vectors: a change in between makes the next call recompute
        rule = self.rule
        key = (self.set_hash, rule.model_dump_json(), id(self.reference))
        if self._floor is None or self._floor[0] != key:
            used = derive_floor(rule, self.tripwires.vectors, key[0])
            if rule.calibrated is not None and self.reference is not None:
                used = with_calibrated(used, self._calibrated(rule, self.reference))
            self._floor = (key, used)
        return self._floor[1]

    def _calibrated(self, rule: TripwireRule, reference: Reference) -> CalibratedFloor:
        """The rule's floor calibrated on the reference questions' critical floors, searched
        as every query is (a framework's own search searched again: its tripwires are met
        in it)."""
        assert rule.calibrated is not None
        searched = reference.searched(self.kb)
        known = None if self.reads_search else reference.hits(self.kb, rule.k)
        merged = self.retrieve_vectors(searched, rule.k, known)
        critical = critical_floor(
            merged.flags,
            merged.similarities,
            rule.k,
            proportion=rule.proportion,
            rank=rule.rank,
            rr_sum=rule.rr_sum,
            combine=rule.combine,
        )
        return calibrated_floor(critical, rule.calibrated)

    @classmethod
    def load(cls, kb_dir: str | Path, rule: TripwireRule | None = None) -> TripwireTest:
        """Open a saved knowledge base with its tripwires and saved (or given) rule."""
        kb = KnowledgeBase.load(kb_dir)
        return cls(kb, rule or load_rule(Path(kb_dir)))

    @classmethod
    def saved(cls, kb: KnowledgeBase, rule: TripwireRule | None = None) -> TripwireTest | None:
        """The tripwires saved in ``kb``'s folder under ``rule`` (default: the rule saved
        there); None when it holds none (a lexical knowledge base never does)."""
        if kb.path is None or kb.manifest.embedder.kind != "dense":
            return None
        found = cls(kb, rule or load_rule(Path(kb.path)))
        return found if len(found.tripwires) else None

    def retrieve(self, queries: Sequence[str], k: int) -> MergedTopK:
        """Merged top-k of knowledge and tripwires for each query (one embedding per query)."""
        vectors = self.kb.prepare(queries).vectors  # validated, embedded once
        return self.retrieve_vectors(vectors, k)

    def retrieve_vectors(
        self, vectors: np.ndarray, k: int, knowledge: Hits | None = None
    ) -> MergedTopK:
        """As :meth:`retrieve`, for query vectors already embedded.

        ``knowledge``: the knowledge's top hits of these vectors (at least ``k`` per row) when
        the caller has searched already; they are not searched again.
        """
        if knowledge is None:
            knowledge = self.kb.store.search(vectors, k)
        elif knowledge.similarities.shape[1] < k:
            raise InputError(f"the knowledge hits hold {knowledge.similarities.shape[1]} < {k}")
        knowledge = Hits(knowledge.similarities[:, :k], knowledge.indices[:, :k])
        tripwires = self.tripwires.search(vectors, k)
        sims, flags, positions = merge_top_k(knowledge.similarities, tripwires.similarities, k)
        own = np.where(
            flags,
            np.take_along_axis(_pad(tripwires.indices, k), np.where(flags, positions, 0), axis=1),
            np.take_along_axis(knowledge.indices, np.where(flags, 0, positions), axis=1),
        )
        return MergedTopK(sims, flags, own)

    def check(self, query: str) -> TripwireVerdict:
        """Test one query."""
        return self.check_many([query])[0]

    def check_many(self, queries: Sequence[str]) -> list[TripwireVerdict]:
        """Test a batch (embedded together), in input order."""
        merged = self.retrieve(queries, self.rule.k)
        return self.decide(queries, merged)

    def check_vectors(
        self, queries: Sequence[str], vectors: np.ndarray, knowledge: Hits | None = None
    ) -> list[TripwireVerdict]:
        """:meth:`check_many` for queries embedded (or searched, ``knowledge``: see
        :meth:`retrieve_vectors`) already."""
        return self.decide(queries, self.retrieve_vectors(vectors, self.rule.k, knowledge))

    def decide(self, queries: Sequence[str], merged: MergedTopK) -> list[TripwireVerdict]:
        """Apply the rule to merged top-k results of ``queries``."""
        rule = self.rule
        used = self.floor()
        floor = NO_FLOOR if used.value is None else used.value
        features = tripwire_features(merged.flags, merged.similarities, rule.k, floor)
        thresholds = {"proportion": rule.proportion, "rank": rule.rank, "rr_sum": rule.rr_sum}
        forbidden = rule_decisions(features, combine=rule.combine, **thresholds)
        fired = condition_matrix(features, **thresholds)
        names = rule.conditions()
        verdicts: list[TripwireVerdict] = []
        for i, query in enumerate(queries):
            held = [n for n, f in zip(names, fired[i], strict=True) if f]
            best_rank = int(features.best_rank[i])
            verdict = TripwireVerdict(
                query=query.strip(),
                forbidden=bool(forbidden[i]),
                rule=join_conditions(held, "all") if forbidden[i] else None,
                triggers=self._triggers(merged, i, floor),
                proportion=float(features.proportion[i]),
                best_rank=best_rank if best_rank <= rule.k else None,
                rr_sum=float(features.rr_sum[i]),
                k=rule.k,
                tripwire_set=self.set_hash,
                floor=used,
            )
            verdicts.append(verdict)
        return verdicts

    def _triggers(self, merged: MergedTopK, i: int, floor: float) -> list[Trigger]:
        triggers = []
        for col in np.flatnonzero(merged.flags[i, : self.rule.k]):
            similarity = float(merged.similarities[i, col])
            if similarity < floor:
                continue
            tripwire = self.tripwires.tripwires[int(merged.rows[i, col])]
            triggers.append(
                Trigger(
                    id=tripwire.id,
                    topic=tripwire.topic,
                    text=tripwire.text,
                    rank=int(col) + 1,
                    similarity=similarity,
                    severity=tripwire.severity,
                )
            )
        return triggers


def _saved_tripwires(kb: Knowledge) -> LiveTripwires:
    if not isinstance(kb, KnowledgeBase):
        raise InputError(
            "tripwires are saved in a ragbound knowledge-base folder: give this retriever's "
            "guard the tripwires= of a folder indexed with the same embedder"
        )
    return LiveTripwires.open(kb)


def _check_same_embedder(kb: Knowledge, tripwires: TripwireSource) -> None:
    """The tripwires' vectors must be comparable with the knowledge's similarities."""
    theirs = tripwires.kb
    if theirs is kb:  # found by the knowledge's own search (a framework store's flags)
        return
    if theirs.embedder_name != kb.embedder_name or theirs.dimension != kb.store.dimension:
        raise InputError(
            f"the tripwires were embedded by {theirs.embedder_name} ({theirs.dimension} "
            f"dimensions), the knowledge by {kb.embedder_name} ({kb.store.dimension}): "
            "their similarities cannot be merged"
        )


def _pad(indices: np.ndarray, k: int) -> np.ndarray:
    """Tripwire rows padded to k columns (fewer tripwires than k), so take_along_axis fits."""
    if indices.shape[1] >= k:
        return indices
    return np.pad(indices, ((0, 0), (0, k - indices.shape[1])))
