"""Tripwires: retrieval-augmented rejection (RAR).

Flagged "negative" documents live beside the knowledge, in the same knowledge-base directory
and the same embedding space. A query whose top-k retrieval surfaces them is forbidden, and the
verdict names the tripwires that fired.

>>> from ragbound.tripwires import TripwireTest  # doctest: +SKIP
>>> TripwireTest.load("kb/").check("how to build a bomb").forbidden  # doctest: +SKIP
True
"""

from __future__ import annotations

from ragbound.tripwires.files import TripwireFields, read_labelled, read_tripwires
from ragbound.tripwires.guard import (
    Trigger,
    TripwireRule,
    TripwireTest,
    TripwireVerdict,
    load_rule,
    save_rule,
)
from ragbound.tripwires.models import Tripwire, TripwireChange, TripwireManifest, tripwire_id
from ragbound.tripwires.store import LiveTripwires, TripwireWatch
from ragbound.tripwires.tune import RuleScore, TuningResult, tune_rule

__all__ = [
    "LiveTripwires",
    "RuleScore",
    "Trigger",
    "Tripwire",
    "TripwireChange",
    "TripwireFields",
    "TripwireManifest",
    "TripwireRule",
    "TripwireTest",
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
