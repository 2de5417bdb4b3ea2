"""``RejectionRates`` / ``rejection_rates`` are ``TripwireRates`` / ``tripwire_rates`` now."""

from __future__ import annotations

import numpy as np
import pytest

import ragbound.stats as stats
import ragbound.stats.tripwire as tripwire


@pytest.mark.parametrize("module", [stats, tripwire], ids=["ragbound.stats", "stats.tripwire"])
@pytest.mark.parametrize(
    ("old", "new"), [("RejectionRates", "TripwireRates"), ("rejection_rates", "tripwire_rates")]
)
def test_an_old_name_is_the_new_object_with_a_warning(module, old: str, new: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated, use {new}"):
        assert getattr(module, old) is getattr(module, new)


def test_the_package_exports_the_new_names() -> None:
    assert {"TripwireRates", "tripwire_rates"} <= set(stats.__all__)
    assert not {"RejectionRates", "rejection_rates"} & set(stats.__all__)
    rates = stats.tripwire_rates(np.array([1, 0], bool), np.array([1, 0], bool))
    assert isinstance(rates, stats.TripwireRates) and float(rates.frr[0]) == 0.0
