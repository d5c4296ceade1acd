"""Browser fixtures: Debian's chromium driven by Playwright (never `playwright install`)."""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Playwright's sync API runs an event loop in the test thread; the ORM calls the tests make
# between browser steps are still synchronous and safe here.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="session")
def browser():
    if not shutil.which(CHROMIUM):
        pytest.skip(f"chromium not found at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture
def new_page(browser, live_server):
    """`new_page()` → a page in a fresh context (own cookies) allowed to use the clipboard."""
    contexts = []

    def make():
        context = browser.new_context(base_url=live_server.url)
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()
