"""A real headless Chromium (Debian's ``chromium``, installed by ``make setup``) driven by
Playwright, with the network cut off: every http(s) request fails and is recorded."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.servers import require_binary
from tests.steps.conftest import project  # noqa: F401  (the pipeline tests' dbt project)

CHROMIUM = "/usr/bin/chromium"
# an asset a page loads from elsewhere: <script src>, <link href>, <img src>, ... on http(s)
EXTERNAL_ASSET = re.compile(r"<(?:script|link|img|iframe|source|embed)\b[^>]*?\b(?:src|href)"
                            r"\s*=\s*[\"']?(https?://[^\"'\s>]+)", re.IGNORECASE)


def external_assets(folder: Path) -> dict[str, list[str]]:
    """Every http(s) asset referenced by a page under ``folder``, per page."""
    found = {}
    for page in folder.rglob("*.html"):
        urls = EXTERNAL_ASSET.findall(page.read_text())
        if urls:
            found[str(page)] = urls
    return found


@dataclass
class Visit:
    """A page opened offline, with what went wrong while it loaded."""

    page: Any
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    require_binary(CHROMIUM, "chromium")  # skipped without it, a failure under CI=true
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
        yield browser
        browser.close()


@pytest.fixture
def open_offline(chromium: Any) -> Iterator[Any]:
    """open_offline(path) → Visit: the page loaded from disk with no network at all."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    context.route(re.compile(r"^https?://"), lambda route: route.abort("internetdisconnected"))

    def visit(path: Path) -> Visit:
        page = context.new_page()
        seen = Visit(page)
        page.on("requestfailed", lambda r: seen.failed.append(f"{r.url}: {r.failure}"))
        page.on("pageerror", lambda exc: seen.errors.append(str(exc)))
        page.on("console", lambda m: seen.errors.append(m.text) if m.type == "error" else None)
        page.goto(path.resolve().as_uri(), wait_until="load")
        return seen

    yield visit
    context.close()
