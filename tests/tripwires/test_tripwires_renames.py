"""The tripwire names renamed for one meaning each: the old ones still work, and warn."""

from __future__ import annotations

import importlib
import warnings

import pytest

import ragbound.tripwires as tripwires

RENAMED = [
    ("ragbound.tripwires", "TripwireGuard", "TripwireTest"),
    ("ragbound.tripwires", "TripwireStore", "LiveTripwires"),
    ("ragbound.tripwires.guard", "TripwireGuard", "TripwireTest"),
    ("ragbound.tripwires.store", "TripwireStore", "LiveTripwires"),
    ("ragbound.tripwires.store", "Home", "TripwireBacking"),
    ("ragbound.tripwires.store", "home_of", "backing_of"),
    ("ragbound.tripwires.folder", "FolderHome", "FolderTripwireBacking"),
    ("ragbound.tripwires.collection", "CollectionHome", "CollectionTripwireBacking"),
    ("ragbound.tripwires.cascade", "ModerationVerdict", "JudgeResult"),
]


@pytest.mark.parametrize(("module", "old", "new"), RENAMED, ids=[r[1] for r in RENAMED])
def test_an_old_name_is_the_new_object_with_a_warning(module: str, old: str, new: str) -> None:
    imported = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated, use {new}"):
        assert getattr(imported, old) is getattr(imported, new)


def test_from_import_of_an_old_name_warns() -> None:
    with pytest.warns(DeprecationWarning, match="TripwireGuard is deprecated, use TripwireTest"):
        from ragbound.tripwires import TripwireGuard  # noqa: F401


def test_the_package_exports_the_new_names_only() -> None:
    assert {"TripwireTest", "LiveTripwires"} <= set(tripwires.__all__)
    assert not {"TripwireGuard", "TripwireStore"} & set(tripwires.__all__)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from ragbound.tripwires import LiveTripwires, TripwireTest  # noqa: F401


def test_the_judge_reads_as_forbidden() -> None:
    from ragbound.tripwires.cascade import JudgeResult

    assert JudgeResult(query="q", verdict="reject").forbidden is True
    assert JudgeResult(query="q", verdict="allow").forbidden is False
    assert JudgeResult(query="q", error="timeout").forbidden is None
