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
    page,
)
from tests.browser import launch, needs_chromium, page_errors
from tests.serve.dashboard_page import REFUSED, SCRIPTED, assert_the_page_updates, log_in
from tests.serve.server import (
    ADMIN,
    READ,
    ChildServer,
    ThreadServer,
    auth,
    check_all,
    served_kb,
    stats,
    token_file,
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


def test_the_stats_need_a_read_token_and_the_page_none(url: str) -> None:
    missing = httpx.get(f"{url}/v1/stats")
    assert missing.status_code == 401 and missing.json()["error"]
    assert missing.headers["WWW-Authenticate"] == "Bearer"  # no browser login dialog
    wrong = httpx.get(f"{url}/v1/stats", headers=auth("not-a-known-token-at-all"))
    assert wrong.status_code == 401
    basic_wrong = httpx.get(f"{url}/v1/stats", auth=("anyone", "wrong-token-0123456789"))
    assert basic_wrong.status_code == 401
    assert httpx.get(f"{url}/v1/stats", headers=auth(READ)).status_code == 200
    assert httpx.get(f"{url}/v1/stats", auth=("anyone", READ)).status_code == 200
    response = httpx.get(f"{url}/dashboard")  # the page holds no data: no token needed
    assert response.status_code == 200
    nonce = re.search(r'<script nonce="([^"]+)">', response.text).group(1)
    assert response.text == page(nonce)  # the template as shipped, nothing of the service's


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
    html = response.text
    assert html.count("<script") == html.count(f'<script nonce="{nonce}">') == 1
    assert html.count("<style") == html.count(f'<style nonce="{nonce}">') == 1
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert " style=" not in html and "innerHTML" not in html
    again = httpx.get(f"{url}/dashboard", headers=auth(READ))
    assert nonce not in again.headers["Content-Security-Policy"]  # fresh per response


@needs_chromium
def test_the_page_updates_in_headless_chromium(url: str) -> None:
    check_all(url, MORE_IN_KNOWLEDGE[:WINDOW])  # a whole monitor window: a timeline to draw
    assert_the_page_updates(url)


WRONG = "wrong-token-0123456789abcdef"
TOKEN_KEY = "ragbound-token"  # the page's sessionStorage key


@needs_chromium
def test_a_browser_logs_in_with_a_token_through_the_page(
    minilm_kb_dir: Path, tmp_path: Path
) -> None:
    """A real ``ragbound serve --token-file``, the page opened at its plain address."""
    kb = served_kb(minilm_kb_dir, tmp_path / "kb")
    server = ChildServer(str(kb), "--token-file", str(token_file(tmp_path)))
    try:
        server.ready()
        seen = _log_in_wrong_then_right(server.url)
    finally:
        server.kill()
    assert seen["errors"] == []
    assert seen["refused"].startswith("The service refused this token (401")
    assert seen["zeros"] == "0" and seen["stored_after_wrong"] is None
    assert seen["stored"] == READ and seen["cookies"] == [] and seen["forgotten"] is None
    assert not any(READ in u or WRONG in u for u in seen["urls"])  # never in an address
    assert f"Bearer {READ}" in seen["sent"]  # the token goes as a header


def _log_in_wrong_then_right(url: str) -> dict:
    """Drive the page: the form, a wrong token, the read token, more decisions, a reload,
    "forget token"."""
    from playwright.sync_api import sync_playwright

    shows_total = "n => document.getElementById('count-total').textContent === String(n)"
    seen: dict = {"urls": [], "sent": []}
    with sync_playwright() as driver:
        browser = launch(driver)
        try:
            tab = browser.new_page()
            seen["errors"] = page_errors(tab, ignored=(REFUSED,))
            tab.on("request", lambda r: seen["urls"].append(r.url))
            tab.on("request", lambda r: seen["sent"].append(r.headers.get("authorization")))
            tab.goto(f"{url}/dashboard")
            tab.wait_for_selector("#login", state="visible", timeout=10_000)
            seen["zeros"] = tab.inner_text("#count-total")
            log_in(tab, WRONG)
            tab.wait_for_selector("#login-error", state="visible", timeout=10_000)
            seen["refused"] = tab.inner_text("#login-error")
            seen["stored_after_wrong"] = tab.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')")
            check_all(url, MORE_IN_KNOWLEDGE[:3])
            log_in(tab, READ)
            tab.wait_for_function(shows_total, arg=stats(url)["total"], timeout=10_000)
            check_all(url, MORE_IN_KNOWLEDGE[3:5])
            tab.wait_for_function(shows_total, arg=stats(url)["total"], timeout=15_000)
            tab.reload()  # the session keeps the token: numbers without the form
            tab.wait_for_function(shows_total, arg=stats(url)["total"], timeout=10_000)
            assert tab.is_hidden("#login") and tab.is_visible("#forget")
            seen["stored"] = tab.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')")
            seen["cookies"] = tab.context.cookies()
            tab.click("#forget")  # back to the form, the token gone
            tab.wait_for_selector("#login", state="visible", timeout=10_000)
            seen["forgotten"] = tab.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')")
        finally:
            browser.close()
    return seen


@needs_chromium
def test_without_tokens_the_page_asks_for_none(minilm_kb_dir: Path, tmp_path: Path) -> None:
    """A real ``ragbound serve`` with no token file: numbers at once, no form, no header."""
    from playwright.sync_api import sync_playwright

    server = ChildServer(str(served_kb(minilm_kb_dir, tmp_path / "kb")))
    try:
        server.ready()
        total = len(check_all(server.url, MORE_IN_KNOWLEDGE[:3]))
        sent: list[str | None] = []
        with sync_playwright() as driver:
            browser = launch(driver)
            try:
                tab = browser.new_page()
                errors = page_errors(tab)  # no 401 either
                tab.on("request", lambda r: sent.append(r.headers.get("authorization")))
                tab.goto(f"{server.url}/dashboard")
                tab.wait_for_function(
                    "n => document.getElementById('count-total').textContent === String(n)",
                    arg=total,
                    timeout=10_000,
                )
                hidden = tab.is_hidden("#login") and tab.is_hidden("#forget")
            finally:
                browser.close()
    finally:
        server.kill()
    assert errors == [] and hidden
    assert sent and set(sent) == {None}
