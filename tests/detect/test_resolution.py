"""The resolution of a conformal calibration: steps of 1/(n+1), and the questions needed."""

from __future__ import annotations

import numpy as np
import pytest

from ragbound.detect.resolution import MAX_SPREAD, resolution
from ragbound.stats import EmpiricalNull


@pytest.mark.parametrize("alpha", [0.2, 0.1, 0.05, 0.01])
def test_nothing_is_flagged_below_one_over_alpha_and_something_from_it(alpha: float) -> None:
    """Against a real empirical null: with fewer questions no score reaches alpha."""
    least = resolution(10, alpha).needed  # any n: the powerless bound is what is checked
    first = next(n for n in range(1, 1000) if resolution(n, alpha).can_flag)
    assert first == round(1 / alpha) - 1
    for n in (first - 1, first):
        null = EmpiricalNull(np.arange(n, dtype=float))
        beyond = null.p_values(np.array([n + 1.0]))[0]  # above every calibration score
        assert (beyond <= alpha) == resolution(n, alpha).can_flag
    assert least >= first


def test_the_spread_follows_the_beta_law_of_the_share_flagged() -> None:
    """The share of new in-knowledge scores flagged, over many calibration sets of n drawn
    from one distribution: its relative spread is what the resolution says."""
    rng = np.random.default_rng(0)
    n, alpha = 40, 0.05
    shares = []
    for _ in range(4000):
        calibration = rng.random(n)
        critical = np.sort(calibration)[n - resolution(n, alpha).flaggable]  # m-th highest
        shares.append(1 - critical)  # uniform scores: the share above the critical value
    said = resolution(n, alpha)
    assert np.mean(shares) == pytest.approx(said.attained, rel=0.05)
    assert np.std(shares) / np.mean(shares) == pytest.approx(said.spread, rel=0.05)


@pytest.mark.parametrize("alpha", [0.1, 0.05, 0.02])
def test_needed_is_the_fewest_questions_within_the_spread(alpha: float) -> None:
    needed = resolution(10, alpha).needed
    assert not resolution(needed, alpha).coarse
    assert resolution(needed - 1, alpha).coarse
    assert resolution(needed, alpha).spread <= MAX_SPREAD


def test_a_shared_level_needs_more_questions() -> None:
    alone, shared = resolution(120, 0.05), resolution(120, 0.05, 0.033)
    assert not alone.coarse and shared.coarse
    assert shared.needed > alone.needed
    assert "each test's share of 0.05" in (shared.message() or "")
