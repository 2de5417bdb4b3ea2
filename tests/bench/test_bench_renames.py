"""The benchmark's renamed names: ``VerdictCounts`` -> ``OutcomeCounts``, ``Query`` ->
``SearchVector``; old ones warn."""

from __future__ import annotations

import pytest

import ragbound.bench.experiment as experiment
import ragbound.bench.results as results


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [(results, "VerdictCounts", "OutcomeCounts"), (experiment, "Query", "SearchVector")],
)
def test_an_old_name_is_the_new_object_with_a_warning(module, old: str, new: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated, use {new}"):
        assert getattr(module, old) is getattr(module, new)


def test_saved_counts_load_under_the_new_name() -> None:
    saved = {"outcomes": {"correct": 3}, "errors": 1, "unparsed": 0, "missing": 2}
    assert results.OutcomeCounts.model_validate(saved).model_dump() == saved
