"""A real browser for the console tests: Debian's Chromium driven by Playwright (no browser
download). Without /usr/bin/chromium the tests are skipped, unless BUILDBAY_TEST_BROWSER=required
(as .ci/run sets it, after installing the package). A failing test leaves a screenshot of its
page in test-artifacts/."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from tests.conftest import drives_chromium

# The browser shares two cores with the other test workers, their servers and PostgreSQL:
# a page that waits on an upload's verify or a large script took longer than Playwright's
# default 5 s there. A wrong page still fails, after this long.
expect.set_options(timeout=20_000)

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).parents[2] / "test-artifacts"

# A phone's screen (an iPhone 12 to 15's, in CSS pixels) and the browsers testers use on one.
PHONE: dict[str, Any] = {
    "viewport": {"width": 390, "height": 844},
    "is_mobile": True,
    "has_touch": True,
    "device_scale_factor": 3,
}


@pytest.fixture
def server(threaded_server: str) -> str:
    """The service in a thread of this process (tests/conftest.py): a browser scenario tests
    pages, which a process of its own would only start seconds later."""
    return threaded_server


class _Chromium:
    """One browser per test process (xdist worker), launched by the first browser test and
    closed after the last of a run of them (`pytest_runtest_teardown` below).

    Not a session-scoped fixture: Playwright's sync API keeps an event loop running in this
    thread while it is open, which the asyncio tests cannot share, so the browser closes before
    any test that does not use it. tests/conftest.py orders the browser tests one after the
    other, so a worker launches it about once a run, not once a module (each launch is a
    Playwright driver and a Chromium of several processes: seconds of CPU). Each test still
    gets fresh contexts (`new_page`: cookies, storage, cache of its own), as it did when the
    tests of a module shared the browser."""

    def __init__(self) -> None:
        self._running: contextlib.ExitStack | None = None
        self._browser: Browser | None = None

    def get(self) -> Browser:
        if self._browser is None:
            with contextlib.ExitStack() as stack:
                playwright = stack.enter_context(sync_playwright())
                self._browser = playwright.chromium.launch(
                    executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
                )
                self._running = stack.pop_all()
        return self._browser

    def close(self) -> None:
        browser, running = self._browser, self._running
        self._browser = self._running = None
        try:
            if browser is not None:
                browser.close()
        finally:
            if running is not None:
                running.close()


_CHROMIUM = _Chromium()


@pytest.fixture
def chromium() -> Browser:
    """Not named `browser`: many in-process console tests have a fixture of that name, an httpx
    client that keeps the console's cookies as a browser would (tests/console/
    test_distribution_pages.py), and the tests that drive Chromium are told from the others by
    this name (below, and in tests/conftest.py)."""
    if not CHROMIUM.exists():
        if os.environ.get("BUILDBAY_TEST_BROWSER") == "required":
            pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium) for the browser tests")
    return _CHROMIUM.get()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """After the test's own fixtures (its pages' contexts) are gone: the browser closes unless
    the next test uses it too."""
    try:
        return (yield)
    finally:
        if nextitem is None or not drives_chromium(nextitem):
            _CHROMIUM.close()


def pytest_sessionfinish() -> None:
    _CHROMIUM.close()  # a run stopped early (-x) may not have reached the teardown above


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    if report.when == "call":  # type: ignore[attr-defined]
        item.stash[_FAILED] = report.failed  # type: ignore[attr-defined]
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def new_page(chromium: Browser, request: pytest.FixtureRequest) -> Iterator[object]:
    """Pages in fresh contexts (each its own cookies), screenshotted if the test fails. Whatever
    the test does, no page may report a Content-Security-Policy violation (Chromium reports each
    one as a console error)."""
    contexts = []
    violations: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            violations.append(f"{message.location.get('url')}: {message.text}")

    def make(base_url: str, **options: Any) -> Page:
        """`options` for the context (a phone: PHONE | {"user_agent": IPHONE})."""
        context = chromium.new_context(
            base_url=base_url, **({"viewport": {"width": 1100, "height": 900}} | options)
        )
        context.set_default_timeout(15_000)
        contexts.append(context)
        page = context.new_page()
        page.on("console", on_console)
        return page

    yield make
    try:
        assert not violations, "\n".join(violations)
        if request.node.stash.get(_FAILED, False):
            ARTIFACTS.mkdir(exist_ok=True)
            name = re.sub(r"[^\w.-]+", "_", request.node.name)
            for n, context in enumerate(contexts):
                for m, page in enumerate(context.pages):
                    path = ARTIFACTS / f"{name}-{n}-{m}.png"
                    try:
                        page.screenshot(path=path, full_page=True)
                    except PlaywrightError as e:
                        # A page still busy (the failure's cause, often) cannot be drawn: the
                        # test's own failure is the report, not this.
                        path.with_suffix(".txt").write_text(f"no screenshot: {e}\n")
    finally:
        for context in contexts:
            context.close()


def add_unverified_member(page: Page, email: str) -> None:
    """Add an account by e-mail from the project page, through the confirmation the console asks
    for when the account has not verified its address (every account signed up in these tests:
    they follow no verification mail)."""
    page.get_by_label("Add by e-mail").fill(email)
    page.get_by_role("button", name="Add member").click()
    expect(page.locator("#e-unverified")).to_contain_text("has not verified this e-mail address")
    page.get_by_label(f"Add {email} anyway: e-mail not verified").check()
    page.get_by_role("button", name="Add member").click()
    expect(page.locator("#members")).to_contain_text(email)
