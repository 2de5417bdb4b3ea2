"""The dashboard and its JSON over real HTTP (uvicorn in a thread, a real MiniLM gate)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import httpx
import pytest

from ragbound.gate import Gate
from ragbound.serve import ServeSettings, Tokens, create_app
from ragbound.serve.dashboard import (
    P_VALUE_BINS,
    RECENT_DECISIONS,
    RECENT_FORBIDDEN,
    DashboardState,
)
from tests.browser import needs_chromium
from tests.serve.dashboard_page import SCRIPTED, assert_the_page_updates
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
from tests.texts import MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE
from tests.tripwires.tripwire_texts import TRIPWIRES

WINDOW = 5


@pytest.fixture(scope="module")
def kb_dir(minilm_kb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return served_kb(minilm_kb_dir, tmp_path_factory.mktemp("dashboard") / "kb")


@pytest.fixture(scope="module")
def url(kb_dir: Path):
    tokens = Tokens.from_lines([f"read:{READ}", f"admin:{ADMIN}"])
    settings = ServeSettings(
        tokens=tokens, log=kb_dir.parent / "queries.log.jsonl", monitor_window=WINDOW
    )
    with ThreadServer(create_app(Gate.load(kb_dir), settings)) as url:
        wait_ready(url)
        added = httpx.post(
            f"{url}/v1/tripwires", json={"tripwires": TRIPWIRES}, headers=auth(ADMIN)
        )
        assert added.status_code == 200, added.text
        yield url


def test_stats_count_the_decisions_and_keep_the_forbidden_ones(url: str) -> None:
    before = stats(url)
    assert before["ready"] and set(before["counts"]) == {"answer", "abstain", "reject"}
    results = check_all(url, [*MORE_IN_KNOWLEDGE[:4], OUT_OF_KNOWLEDGE[0], SCRIPTED])
    after = stats(url)
    for action in ("answer", "abstain", "reject"):
        made = sum(r["action"] == action for r in results)
        assert after["counts"][action] == before["counts"][action] + made
    assert after["total"] == before["total"] + len(results)
    assert after["alpha"] == pytest.approx(results[0]["test"]["alpha"])

    histogram = after["p_values"]
    assert histogram["reference"] == "uniform"
    assert len(histogram["counts"]) == P_VALUE_BINS and len(histogram["edges"]) == P_VALUE_BINS + 1
    assert sum(histogram["counts"]) == histogram["n"] == after["total"]  # fewer than 200 so far
    assert histogram["expected_per_bin"] == pytest.approx(histogram["n"] / P_VALUE_BINS)
    lowest = min(r["test"]["p_value"] for r in results)
    assert histogram["counts"][min(int(lowest * P_VALUE_BINS), P_VALUE_BINS - 1)] >= 1

    rejected = results[-1]
    assert rejected["action"] == "reject" and rejected["tripwires"]["forbidden"]
    newest = after["forbidden"][0]
    assert newest["query"] == SCRIPTED
    assert newest["p_value"] == pytest.approx(rejected["test"]["p_value"])
    assert newest["rule"] == rejected["tripwires"]["rule"]
    assert [(t["id"], t["topic"]) for t in newest["triggers"]] == [
        (t["id"], t["topic"]) for t in rejected["tripwires"]["triggers"]
    ]
    assert all(0 < t["similarity"] <= 1 for t in newest["triggers"])
    schema = httpx.get(f"{url}/openapi.json").json()
    assert set(after) == set(schema["components"]["schemas"]["Stats"]["properties"])


def test_stats_show_the_monitor_windows(url: str) -> None:
    check_all(url, [*MORE_IN_KNOWLEDGE[4:8], *OUT_OF_KNOWLEDGE[:WINDOW]])
    monitor = stats(url)["monitor"]
    assert monitor["window_size"] == WINDOW
    windows = monitor["windows"]
    assert len(windows) >= 1
    assert [w["window"] for w in windows] == sorted(w["window"] for w in windows)
    for window in windows:
        assert window["n"] == WINDOW and 0 <= window["p_value"] <= 1
        assert window["alarm"] == (window["p_value"] <= window["alpha"])
    assert monitor["alarms"] == sum(w["alarm"] for w in windows)


def test_the_state_is_bounded_and_keeps_what_the_log_keeps(url: str, kb_dir: Path) -> None:
    rejected = Gate.load(kb_dir).decide(SCRIPTED)  # the tripwires the server added
    assert rejected.action == "reject"
    hashed, hidden = DashboardState("hash"), DashboardState("none")
    for state in (hashed, hidden):
        state.record([rejected] * (RECENT_DECISIONS + 30))
    snapshot = hashed.snapshot(True, None, WINDOW).model_dump()
    assert snapshot["counts"]["reject"] == snapshot["total"] == RECENT_DECISIONS + 30
    assert snapshot["p_values"]["n"] == RECENT_DECISIONS
    assert len(snapshot["forbidden"]) == RECENT_FORBIDDEN and snapshot["monitor"] is None
    digest = hashlib.sha256(SCRIPTED.encode()).hexdigest()
    assert snapshot["forbidden"][0]["query"] == f"sha256:{digest}"
    assert hidden.snapshot(True, None, WINDOW).forbidden[0].query is None


@pytest.mark.parametrize("path", ["/dashboard", "/v1/stats"])
def test_the_dashboard_needs_a_read_token(url: str, path: str) -> None:
    missing = httpx.get(f"{url}{path}")
    assert missing.status_code == 401 and missing.json()["error"]
    assert missing.headers["WWW-Authenticate"].startswith("Basic")
    assert httpx.get(f"{url}{path}", headers=auth("not-a-known-token-at-all")).status_code == 401
    assert httpx.get(f"{url}{path}", auth=("anyone", "wrong-token-0123456789")).status_code == 401
    assert httpx.get(f"{url}{path}", headers=auth(READ)).status_code == 200
    assert httpx.get(f"{url}{path}", auth=("anyone", READ)).status_code == 200


def test_the_page_has_a_strict_policy_and_no_external_asset(url: str) -> None:
    response = httpx.get(f"{url}/dashboard", headers=auth(READ))
    assert response.headers["content-type"].startswith("text/html")
    policy = dict(
        part.strip().split(" ", 1)
        for part in response.headers["Content-Security-Policy"].split(";")
    )
    nonce = re.fullmatch(r"'nonce-([A-Za-z0-9_-]{16,})'", policy["script-src"]).group(1)
    assert policy["default-src"] == "'none'"
    assert policy["style-src"] == f"'nonce-{nonce}'"
    assert policy["connect-src"] == "'self'" and policy["img-src"] == "data:"
    assert "unsafe" not in response.headers["Content-Security-Policy"]
    page = response.text
    assert page.count("<script") == page.count(f'<script nonce="{nonce}">') == 1
    assert page.count("<style") == page.count(f'<style nonce="{nonce}">') == 1
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert " style=" not in page and "innerHTML" not in page
    again = httpx.get(f"{url}/dashboard", headers=auth(READ))
    assert nonce not in again.headers["Content-Security-Policy"]  # fresh per response


@needs_chromium
def test_the_page_updates_in_headless_chromium(url: str) -> None:
    check_all(url, MORE_IN_KNOWLEDGE[:WINDOW])  # a whole monitor window: a timeline to draw
    assert_the_page_updates(url)
