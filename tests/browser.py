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


def page_errors(page: Any, ignored: tuple[str, ...] = ()) -> list[str]:
    """The list the ``page``'s script errors and console errors (a CSP violation is one) are
    appended to from now on, but for console errors holding one of ``ignored``."""
    errors: list[str] = []

    def on_console(message: Any) -> None:
        if message.type == "error" and not any(part in message.text for part in ignored):
            errors.append(message.text)

    page.on("console", on_console)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors
