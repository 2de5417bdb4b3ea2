"""The service says when its p-values are approximate, and measures whether the calibration
fits the traffic (the share of decided queries flagged, beside alpha): real services over
HTTP, a real MiniLM gate."""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ragbound.detect import Guard
from ragbound.detect.calibration import APPROXIMATE
from ragbound.gate import Gate
from ragbound.knowledge import KnowledgeBase
from ragbound.serve import ServeSettings, Tokens, create_app
from ragbound.serve.fit import _flag_rank, _lower_tail
from tests.browser import needs_chromium
from tests.serve.dashboard_page import open_dashboard
from tests.serve.server import (
    ADMIN,
    READ,
    ThreadServer,
    auth,
    check_all,
    served_kb,
    stats,
    wait_ready,
)
from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, MORE_OUT_OF_KNOWLEDGE, OUT_OF_KNOWLEDGE

INSIDE = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE
OUTSIDE = OUT_OF_KNOWLEDGE + MORE_OUT_OF_KNOWLEDGE
LOOSE_ALPHA = 0.3


def serve(kb_dir: Path) -> ThreadServer:
    tokens = Tokens.from_lines([f"read:{READ}", f"admin:{ADMIN}"])
    settings = ServeSettings(tokens=tokens, log=kb_dir.parent / "queries.log.jsonl")
    return ThreadServer(create_app(Gate.load(kb_dir), settings))


@pytest.fixture(scope="module")
def loose_url(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A service calibrated on synthetic questions that sit far from the corpus (questions
    about other topics stand in for an LLM's that miss the users' way of asking): its null
    is far looser than in-knowledge traffic."""
    kb_dir = tmp_path_factory.mktemp("loose") / "kb"
    shutil.copytree(minilm_kb_dir, kb_dir)
    kb = KnowledgeBase.load(kb_dir)
    Guard.calibrate(kb, OUTSIDE, k=4, alpha=LOOSE_ALPHA, questions="synthetic").save()
    with serve(kb_dir) as url:
        wait_ready(url)
        yield url


@pytest.fixture(scope="module")
def fitting_url(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A service calibrated on in-knowledge questions whose origin no record says."""
    kb_dir = served_kb(minilm_kb_dir, tmp_path_factory.mktemp("fitting") / "kb")
    with serve(kb_dir) as url:
        wait_ready(url)
        yield url


def metric(text: str, name: str) -> float:
    """One unlabelled sample of the Prometheus text."""
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{name} not in /metrics"
    return float(found.group(1))


def metrics(url: str) -> str:
    response = httpx.get(f"{url}/metrics", headers=auth(READ))
    assert response.status_code == 200, response.text
    return response.text


def test_a_synthetic_calibration_is_approximate_in_readyz_metrics_stats_and_decisions(
    loose_url: str,
) -> None:
    ready = httpx.get(f"{loose_url}/readyz").json()
    assert ready["ready"] and ready["approximate"] and ready["note"] == APPROXIMATE
    assert ready["questions"]["origin"] == "synthetic"
    assert ready["questions"]["n_synthetic"] == len(OUTSIDE)
    assert metric(metrics(loose_url), "ragbound_calibration_approximate") == 1
    assert stats(loose_url)["approximate"] is True
    decision = check_all(loose_url, INSIDE[:1])[0]
    assert decision["test"]["approximate"] is True
    assert decision["reason"].endswith(f"({APPROXIMATE})")


def test_a_loose_calibration_flags_fewer_than_alpha_and_shows_it(loose_url: str) -> None:
    before = stats(loose_url)["fit"]["n"]
    decided = [d for _ in range(4) for d in check_all(loose_url, INSIDE)]
    assert all(d["test"]["p_value"] > LOOSE_ALPHA for d in decided)  # nothing flagged
    fit = stats(loose_url)["fit"]
    assert fit["n"] == before + len(decided) and fit["flagged"] == 0 and fit["share"] == 0
    assert fit["alpha"] == LOOSE_ALPHA
    k = int(LOOSE_ALPHA * (len(OUTSIDE) + 1))  # 5 of 17
    assert fit["expected_at_least"] == pytest.approx(k / (len(OUTSIDE) + 1))
    assert fit["below"] and fit["lower_tail_p"] < 0.01
    text = metrics(loose_url)
    assert metric(text, "ragbound_p_at_most_alpha_share") == 0
    assert metric(text, "ragbound_p_at_most_alpha_window") == fit["n"]
    assert metric(text, "ragbound_alpha") == LOOSE_ALPHA
    assert metric(text, "ragbound_p_at_most_alpha_expected") == pytest.approx(
        fit["expected_at_least"]
    )


def test_a_fitting_calibration_counts_what_it_flags_and_is_not_below(fitting_url: str) -> None:
    ready = httpx.get(f"{fitting_url}/readyz").json()
    assert ready["approximate"] is False and ready["note"] is None
    assert ready["questions"]["origin"] == "unknown"
    text = metrics(fitting_url)
    assert metric(text, "ragbound_calibration_approximate") == 0
    assert metric(text, "ragbound_p_at_most_alpha_window") == 0  # the warm-up is not counted
    decided = check_all(fitting_url, INSIDE + OUTSIDE)
    flagged = sum(d["test"]["p_value"] <= d["test"]["alpha"] for d in decided)
    assert flagged >= len(OUTSIDE) // 2  # out-of-knowledge traffic raises the share
    fit = stats(fitting_url)["fit"]
    assert (fit["n"], fit["flagged"]) == (len(decided), flagged)
    assert fit["share"] == pytest.approx(flagged / len(decided)) and not fit["below"]
    assert all(not d["test"]["approximate"] for d in decided)
    text = metrics(fitting_url)
    assert metric(text, "ragbound_p_at_most_alpha_share") == pytest.approx(fit["share"])
    assert metric(text, "ragbound_p_at_most_alpha_total") == flagged


@needs_chromium
def test_the_dashboard_shows_the_flagged_share_and_that_p_values_are_approximate(
    loose_url: str,
) -> None:
    from playwright.sync_api import sync_playwright

    check_all(loose_url, INSIDE)
    fit = stats(loose_url)["fit"]
    with sync_playwright() as driver:
        browser, page, errors = open_dashboard(driver, loose_url)
        page.wait_for_function(  # the first poll
            "n => document.getElementById('fit-n').textContent === String(n)",
            arg=fit["n"],
            timeout=10_000,
        )
        shown = {
            key: page.inner_text(f"#{key}") for key in ("fit-share", "fit-alpha", "fit-verdict")
        }
        banner = page.inner_text("#approximate")
        visible = page.is_visible("#approximate")
        browser.close()
    assert errors == []
    assert visible and banner == APPROXIMATE
    assert shown["fit-share"] == "0.0%" and shown["fit-alpha"] == "30.0%"
    assert shown["fit-verdict"].startswith("fewer flagged than alpha allows")


@pytest.mark.parametrize(("alpha", "n_calibration", "rank"), [(0.05, 19, 1), (0.05, 18, None)])
def test_the_rank_a_conformal_p_value_must_pass(alpha, n_calibration, rank) -> None:
    # p <= alpha needs a score above the k-th largest of n, k = floor(alpha (n + 1))
    assert _flag_rank(alpha, n_calibration) == rank


def test_the_lower_tail_of_none_flagged_is_a_ratio_of_beta_functions() -> None:
    # P(0 of m | flag rate ~ Beta(k, b)) = B(k, b + m) / B(k, b) = prod (b + i) / (k + b + i)
    k, n_cal, m = 5, 16, 40
    b = n_cal + 1 - k
    expected = math.prod((b + i) / (k + b + i) for i in range(m))
    assert _lower_tail(0, m, k, n_cal) == pytest.approx(expected)
    assert _lower_tail(m, m, k, n_cal) == pytest.approx(1.0)
