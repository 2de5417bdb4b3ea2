"""Grid search over tripwire rules on labelled safe/unsafe queries (RAR paper, Figure 3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from typing import Literal

import numpy as np
from pydantic import BaseModel

from ragbound.errors import InputError
from ragbound.stats.tripwire import (
    NO_FLOOR,
    TripwireFeatures,
    rule_decisions,
    tripwire_features,
    tripwire_rates,
)
from ragbound.tripwires.guard import MergedTopK, TripwireRule, TripwireTest

Objective = Literal["accuracy", "tpr", "f1", "tpr_at_frr"]
OBJECTIVES: tuple[str, ...] = ("accuracy", "tpr", "f1", "tpr_at_frr")
DEFAULT_KS: tuple[int, ...] = (1, 3, 5, 10)
DEFAULT_FLOORS: tuple[float | None, ...] = (None, 0.3, 0.4, 0.5, 0.6)
_RR_THRESHOLDS = 12  # reciprocal-rank-sum cut points per k, spread over the observed values


class RuleScore(BaseModel):
    """One rule's rates on the labelled queries (unsafe = positive)."""

    rule: TripwireRule
    accuracy: float
    tpr: float
    frr: float
    precision: float
    f1: float


class TradeOffSurface(BaseModel):
    """Rates over proportion x rank thresholds (combine any) at one k and floor: Figure 3."""

    k: int
    floor: float | None
    proportions: list[float]
    ranks: list[int]
    accuracy: list[list[float]]
    tpr: list[list[float]]
    frr: list[list[float]]
    f1: list[list[float]]


class TuningResult(BaseModel):
    """The chosen rule, the paper's default on the same data, the best rules, the surface."""

    objective: str
    max_frr: float | None
    n_safe: int
    n_unsafe: int
    best: RuleScore
    paper_default: RuleScore
    top: list[RuleScore]
    surface: TradeOffSurface


@dataclass(frozen=True)
class _Grid:
    rules: list[TripwireRule]
    decisions: np.ndarray  # (n_rules, n_queries) bool


def tune_rule(
    guard: TripwireTest,
    queries: Sequence[str],
    unsafe: Sequence[bool],
    *,
    objective: Objective = "accuracy",
    max_frr: float = 0.05,
    ks: Sequence[int] = DEFAULT_KS,
    floors: Sequence[float | None] = DEFAULT_FLOORS,
    top: int = 10,
) -> TuningResult:
    """Search rules (k, floor, proportion, rank, rr_sum, any/all) for the best ``objective``.

    ``tpr_at_frr`` maximises TPR among rules whose false-rejection rate on safe queries is at
    most ``max_frr``. Ties go to the lower false-rejection rate, then the simpler rule. Every
    query is embedded and retrieved once, at the largest k.
    """
    labels = np.asarray(unsafe, dtype=bool)
    _check_labels(queries, labels)
    if objective not in OBJECTIVES:
        raise InputError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    ks = sorted({k for k in ks if k <= len(guard.kb)})
    if not ks:
        raise InputError("no k in the grid fits the knowledge base")
    merged = guard.retrieve(queries, max(ks))
    grid = _grid(merged, ks, floors)
    rates = tripwire_rates(grid.decisions, labels)
    order = _ranking(rates, objective, max_frr, grid.rules)
    scores = [_score(grid.rules[i], rates, i) for i in order[:top]]
    default = TripwireRule(k=min(5, max(ks)), rank=1)
    default_decisions = _decisions(_features(merged, default.k, default.floor), default)
    default_rates = tripwire_rates(default_decisions[None, :], labels)
    best_rule = scores[0].rule
    return TuningResult(
        objective=objective,
        max_frr=max_frr if objective == "tpr_at_frr" else None,
        n_safe=int((~labels).sum()),
        n_unsafe=int(labels.sum()),
        best=scores[0],
        paper_default=_score(default, default_rates, 0),
        top=scores,
        surface=_surface(merged, labels, best_rule.k, best_rule.floor),
    )


def _check_labels(queries: Sequence[str], labels: np.ndarray) -> None:
    if len(queries) != len(labels):
        raise InputError(f"{len(queries)} queries but {len(labels)} labels")
    if labels.all() or not labels.any():
        which = "unsafe" if labels.all() else "safe"
        raise InputError(
            f"the tuning data holds only {which} queries; tuning needs both safe and unsafe ones"
        )


def _features(merged: MergedTopK, k: int, floor: float | None) -> TripwireFeatures:
    return tripwire_features(
        merged.flags, merged.similarities, k, NO_FLOOR if floor is None else floor
    )


def _decisions(features: TripwireFeatures, rule: TripwireRule) -> np.ndarray:
    return rule_decisions(
        features,
        proportion=rule.proportion,
        rank=rule.rank,
        rr_sum=rule.rr_sum,
        combine=rule.combine,
    )


def _grid(merged: MergedTopK, ks: Sequence[int], floors: Sequence[float | None]) -> _Grid:
    rules: list[TripwireRule] = []
    decisions: list[np.ndarray] = []
    for k, floor in product(ks, floors):
        features = _features(merged, k, floor)
        for rule in _rules_at(k, floor, features.rr_sum):
            rules.append(rule)
            decisions.append(_decisions(features, rule))
    return _Grid(rules, np.array(decisions))


def _rules_at(k: int, floor: float | None, rr_values: np.ndarray) -> list[TripwireRule]:
    """Single conditions, and proportion x rank pairs joined by any and all."""
    proportions = [j / k for j in range(1, k + 1)]
    ranks = list(range(1, k + 1))
    rules = [TripwireRule(k=k, proportion=p, rank=None, floor=floor) for p in proportions]
    rules += [TripwireRule(k=k, proportion=None, rank=r, floor=floor) for r in ranks]
    positive = np.unique(rr_values[rr_values > 0])
    if positive.size:
        cuts = np.unique(np.quantile(positive, np.linspace(0, 1, _RR_THRESHOLDS)))
        rules += [
            TripwireRule(k=k, proportion=None, rank=None, rr_sum=round(float(c), 6), floor=floor)
            for c in cuts
        ]
    for combine in ("any", "all"):
        rules += [
            TripwireRule(k=k, proportion=p, rank=r, floor=floor, combine=combine)
            for p, r in product(proportions, ranks)
        ]
    return rules


def _ranking(rates, objective: str, max_frr: float, rules: list[TripwireRule]) -> list[int]:
    """Rule indices best first: objective desc, false rejection asc, fewer conditions, small k."""
    if objective == "tpr_at_frr":
        allowed = rates.frr <= max_frr + 1e-12
        if not allowed.any():
            raise InputError(
                f"no rule keeps safe forbidden at or below {max_frr:g}; raise --max-frr"
            )
        value = np.where(allowed, rates.tpr, -1.0)
    else:
        value = getattr(rates, objective)
    conditions = np.array([len(rule.conditions()) for rule in rules])
    ks = np.array([rule.k for rule in rules])
    return list(np.lexsort((ks, conditions, rates.frr, -value)))


def _score(rule: TripwireRule, rates, i: int) -> RuleScore:
    return RuleScore(
        rule=rule,
        accuracy=float(rates.accuracy[i]),
        tpr=float(rates.tpr[i]),
        frr=float(rates.frr[i]),
        precision=float(rates.precision[i]),
        f1=float(rates.f1[i]),
    )


def _surface(
    merged: MergedTopK, labels: np.ndarray, k: int, floor: float | None
) -> TradeOffSurface:
    proportions = [j / k for j in range(1, k + 1)]
    ranks = list(range(1, k + 1))
    features = _features(merged, k, floor)
    decisions = np.array(
        [rule_decisions(features, proportion=p, rank=r) for p, r in product(proportions, ranks)]
    )
    rates = tripwire_rates(decisions, labels)
    shape = (len(proportions), len(ranks))
    return TradeOffSurface(
        k=k,
        floor=floor,
        proportions=proportions,
        ranks=ranks,
        accuracy=rates.accuracy.reshape(shape).tolist(),
        tpr=rates.tpr.reshape(shape).tolist(),
        frr=rates.frr.reshape(shape).tolist(),
        f1=rates.f1.reshape(shape).tolist(),
    )
