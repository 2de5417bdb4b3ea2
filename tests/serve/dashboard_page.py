"""The dashboard page driven in Debian's headless chromium (with playwright): the checks any
served knowledge base's page must pass, local or attached."""

from __future__ import annotations

from typing import Any

from ragbound.serve.dashboard import P_VALUE_BINS
from tests.browser import launch, page_errors
from tests.serve.server import READ, check_all, stats
from tests.texts import MORE_IN_KNOWLEDGE
from tests.tripwires.tripwire_texts import UNSAFE

# a forbidden query holding markup: the page must show it as text, never run it
SCRIPTED = f"<script>alert('x')</script> {UNSAFE[1]}"


def open_dashboard(driver: Any, url: str) -> tuple[Any, Any, list[str]]:
    """The browser, the ``url``/dashboard page (logged in with the read token through its
    own form when the service asks for one), and the list its script and console errors go
    to."""
    browser = launch(driver)
    page = browser.new_page()
    errors = page_errors(page, ignored=(REFUSED,))
    page.goto(f"{url}/dashboard")
    page.wait_for_function(FIRST_ANSWER, timeout=10_000)
    if page.is_visible("#login"):
        log_in(page, READ)
    return browser, page, errors


# chromium's console line for a 401: how the page learns that it needs a token
REFUSED = "the server responded with a status of 401"

# the page has polled once: it shows numbers (``updated``) or asks for a token
FIRST_ANSWER = (
    "() => !document.getElementById('login').hidden"
    " || document.getElementById('status').textContent.includes('updated')"
)


def log_in(page: Any, token: str) -> None:
    """Give ``token`` to the page's login form (which must be showing)."""
    page.fill("#token", token)
    page.click("#login button[type=submit]")


def assert_the_page_updates(url: str) -> None:
    """Open ``url``/dashboard after a forbidden ``SCRIPTED`` query; check the page shows it as
    text, draws the histogram and a dot per monitor window, and counts three more decisions at
    its next poll, with no script error nor CSP violation. The service needs the
    bees-and-trains tripwires."""
    from playwright.sync_api import sync_playwright

    check_all(url, [SCRIPTED])
    with sync_playwright() as driver:
        browser, page, errors = open_dashboard(driver, url)
        total = stats(url)["total"]
        page.wait_for_function(  # the first poll; a blocked script never gets here
            "n => document.getElementById('count-total').textContent === String(n)",
            arg=total,
            timeout=10_000,
        )
        first_query = page.inner_text("#forbidden td.query")
        scripts = page.eval_on_selector_all("script", "nodes => nodes.length")
        bars = page.eval_on_selector_all("#hist rect", "nodes => nodes.length")
        answered = int(page.inner_text("#count-answer"))
        fit_n = int(page.inner_text("#fit-n"))
        approximate_shown = page.is_visible("#approximate")

        made = check_all(url, MORE_IN_KNOWLEDGE[8:11])
        gained = sum(r["action"] == "answer" for r in made)
        page.wait_for_function(  # the next poll, about 2 s later
            "n => document.getElementById('count-total').textContent === String(n)",
            arg=total + len(made),
            timeout=15_000,
        )
        answered_after = int(page.inner_text("#count-answer"))
        causes = {
            cause: int(page.inner_text(f"#cause-{cause}"))
            for cause in ("out_of_knowledge", "unanswerable")
        }
        timeline = page.eval_on_selector_all("#timeline circle", "nodes => nodes.length")
        browser.close()
    after = stats(url)
    monitor = after["monitor"]
    assert fit_n == min(total, after["fit"]["window"])  # the flagged share's window
    assert approximate_shown == after["approximate"]
    assert errors == []  # no script error, no CSP violation (both are console errors)
    assert first_query == SCRIPTED and scripts == 1  # shown as text, not run as markup
    assert bars == P_VALUE_BINS
    assert timeline == (len(monitor["windows"]) if monitor else 0)
    assert answered_after == answered + gained and gained >= 1
    # no decision since the page's last poll: it shows the abstentions split by cause
    assert causes == {cause: after["causes"][cause] for cause in causes}
