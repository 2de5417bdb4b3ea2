"""Debian's headless chromium for the tests that render a page (through playwright)."""

from __future__ import annotations

import importlib.util
import shutil
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None or importlib.util.find_spec("playwright") is None,
    reason="needs Debian's chromium (apt install chromium) and the playwright package",
)


def launch(driver: Any) -> Any:
    """A headless chromium browser of playwright's ``driver`` (``sync_playwright()``)."""
    return driver.chromium.launch(executable_path=CHROMIUM, args=FLAGS)


def page_errors(page: Any) -> list[str]:
    """The list the ``page``'s script errors and console errors (a CSP violation is one) are
    appended to from now on."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors
