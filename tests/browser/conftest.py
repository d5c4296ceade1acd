"""Browser fixtures: Debian's chromium driven by Playwright (never `playwright install`)."""

from __future__ import annotations

import os
import shutil

import pytest

# A tenant reconciled on the real control plane, for the browser tests of real workloads.
from tests.cluster.controller.conftest import (  # noqa: F401  (fixtures)
    controller_settings,
    make_tenant,
    tenant,
)
from tests.helpers.chromium import CHROMIUM, CHROMIUM_ARGS


# Module scope, not session: Playwright's sync API keeps an event loop running in the test thread
# while it is open, which would break every later test that starts its own loop (websockets).
@pytest.fixture(scope="module")
def browser():
    if not shutil.which(CHROMIUM):
        pytest.fail(f"chromium not found at {CHROMIUM}; `make setup` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    # The ORM calls the tests make between browser steps are synchronous and safe while that loop
    # runs; Django only needs to be told so, and only for as long as the browser is open.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as pw:
            instance = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield instance
            instance.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


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
