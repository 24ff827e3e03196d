"""Fixtures for the browser tests: the built book on a local HTTP server, and an installed Chromium.

Run with `make browser` (which builds the book and installs or finds a browser first). Nothing here
downloads a browser: Playwright drives the Chromium or Chrome that chromium.py finds
($KVTUTOR_CHROMIUM, else chromium, chromium-browser, google-chrome on PATH, else the macOS apps).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import importlib.util
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
# The browser lookup, shared with `make chromium` (tests/browser/ is not a package).
_spec = importlib.util.spec_from_file_location("_kvtutor_chromium", Path(__file__).with_name("chromium.py"))
assert _spec is not None and _spec.loader is not None
chromium = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(chromium)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: opens the built book in headless Chromium")


def pytest_report_header(config: pytest.Config) -> str:
    try:
        return f"browser: {chromium.find_chromium()}"
    except chromium.ChromiumNotFound as exc:
        return f"browser: {exc}"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # the browser hung up early
            super().handle_error(request, client_address)


@pytest.fixture(scope="session")
def site() -> Iterator[str]:
    """Base URL of _build/html served on 127.0.0.1 at a free port."""
    if not (HTML / "index.html").is_file():
        pytest.fail(f"no built book in {HTML}: run `make book` first (or `make browser`)")
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextlib.contextmanager
def chromium_context() -> Iterator[object]:
    """A headless Chromium context with a fresh, throwaway profile (never a downloaded browser)."""
    try:
        executable = chromium.find_chromium()
    except chromium.ChromiumNotFound as exc:
        pytest.fail(f"{exc} (or run `make chromium`; never `playwright install`)", pytrace=False)
    from playwright.sync_api import sync_playwright

    with (
        tempfile.TemporaryDirectory(prefix="kvtutor-chromium-") as profile,
        sync_playwright() as playwright,
    ):
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=executable,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture(scope="session")
def checks() -> object:
    """widget_checks.py, what the browser tests share (opening a page, fit and contrast checks)."""
    spec = importlib.util.spec_from_file_location(
        "_kvtutor_checks", Path(__file__).with_name("widget_checks.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def browser_context(site: str) -> Iterator[object]:
    """The built book's browser context (served by ``site``)."""
    with chromium_context() as context:
        yield context


@pytest.fixture(scope="session")
def file_context(request: pytest.FixtureRequest) -> Iterator[object]:
    """A context for pages opened from disk: ``browser_context`` when the book is built (one
    Playwright per process: its sync API refuses a second), else one of its own, so that those
    pages are checked without a built book."""
    if (HTML / "index.html").is_file():
        yield request.getfixturevalue("browser_context")
        return
    with chromium_context() as context:
        yield context
