"""Tripwires: retrieval-augmented rejection (RAR).

Flagged "negative" documents live beside the knowledge, in the same knowledge-base directory
and the same embedding space. A query whose top-k retrieval surfaces them is forbidden, and the
verdict names the tripwires that fired.

>>> from ragbound.tripwires import TripwireGuard  # doctest: +SKIP
>>> TripwireGuard.load("kb/").check("how to build a bomb").forbidden  # doctest: +SKIP
True
"""

from __future__ import annotations

from ragbound.tripwires.files import TripwireFields, read_labelled, read_tripwires
from ragbound.tripwires.guard import (
    Trigger,
    TripwireGuard,
    TripwireRule,
    TripwireVerdict,
    load_rule,
    save_rule,
)
from ragbound.tripwires.models import Tripwire, TripwireChange, TripwireManifest, tripwire_id
from ragbound.tripwires.store import TripwireStore, TripwireWatch
from ragbound.tripwires.tune import RuleScore, TuningResult, tune_rule

__all__ = [
    "RuleScore",
    "Trigger",
    "Tripwire",
    "TripwireChange",
    "TripwireFields",
    "TripwireGuard",
    "TripwireManifest",
    "TripwireRule",
    "TripwireStore",
    "TripwireVerdict",
    "TripwireWatch",
    "TuningResult",
    "load_rule",
    "read_labelled",
    "read_tripwires",
    "save_rule",
    "tripwire_id",
    "tune_rule",
]
