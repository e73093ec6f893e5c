"""The rendered book, read by a real browser: Debian's Chromium, headless, driven by Playwright.

The book is built with Jupyter Book 1 (as `make book` does, into a temporary folder), served on
localhost, and every page of `_toc.yml` is opened: it must load with a title, show no error or
traceback in any notebook output, have every image loaded with a non-zero size, and have every
internal link (and its #anchor) resolve. The search page must find a chapter by a word from its text.
A screenshot of each page is kept in `_build/screenshots/` (override with BOOK_SCREENSHOTS) as the
test's artifact. Chromium comes from the project's set-up (`tools/setup.sh`, step "browser"); the
test runs that step when it is missing.
"""
from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import pytest

from tools.run_notebooks import toc_files as toc_pages

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
# Flags for a closed network: without the background-networking ones Chromium keeps dialling Google.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
SCREENSHOTS = Path(os.environ.get("BOOK_SCREENSHOTS", ROOT / "_build" / "screenshots"))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Build the book into a temporary folder and serve it on a free localhost port."""
    out = tmp_path_factory.mktemp("book")
    build = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build", ".", "--config", "book/_config.yml",
                            "--toc", "_toc.yml", "--path-output", str(out)],
                           cwd=ROOT, capture_output=True, text=True)
    html = out / "_build" / "html"
    assert build.returncode == 0 and (html / "index.html").is_file(), build.stdout[-3000:] + build.stderr[-3000:]
    warnings = [line for line in build.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    handler = functools.partial(_QuietHandler, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {"url": f"http://127.0.0.1:{server.server_address[1]}/", "html": html, "warnings": warnings}
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output readable
        pass


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():  # the project's own set-up installs it (Debian package chromium)
        subprocess.run(["bash", "tools/setup.sh"], cwd=ROOT, check=True, env={**os.environ, "SETUP_STEPS": "browser"})
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def test_the_build_has_no_warnings(site):
    assert site["warnings"] == [], "\n".join(site["warnings"])


def test_every_page_loads_cleanly_with_its_images(site, browser):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems = []
    for source in toc_pages():
        url = urljoin(site["url"], f"{source}.html")
        response = page.goto(url, wait_until="load")
        if response is None or response.status != 200:
            problems.append(f"{source}: HTTP {response and response.status}")
            continue
        page.wait_for_load_state("networkidle")
        if not page.title().strip():
            problems.append(f"{source}: empty <title>")
        errors = page.eval_on_selector_all(
            ".cell_output .traceback, .cell_output .output.error, div.output.traceback", "els => els.length")
        text = page.inner_text("main") if page.query_selector("main") else page.inner_text("body")
        if errors or "Traceback (most recent call last)" in text:
            problems.append(f"{source}: a notebook output shows an error or traceback")
        broken = page.eval_on_selector_all(
            "img", "els => els.filter(e => !(e.complete && e.naturalWidth > 0 && e.naturalHeight > 0)).map(e => e.src)")
        problems += [f"{source}: image not loaded: {src}" for src in broken]
        page.screenshot(path=str(SCREENSHOTS / f"{source.replace('/', '__')}.png"))
    page.close()
    assert not problems, "\n".join(problems)


def test_internal_links_and_anchors_resolve(site, browser):
    page = browser.new_page()
    origin = urlparse(site["url"]).netloc
    targets: dict[str, set[str]] = {}
    for source in toc_pages():
        page.goto(urljoin(site["url"], f"{source}.html"), wait_until="load")
        for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)"):
            if urlparse(href).netloc != origin:
                continue  # external links cannot be checked offline
            base, fragment = urldefrag(href)
            targets.setdefault(base, set())
            if fragment:
                targets[base].add(fragment)
    page.close()
    broken = []
    for base, fragments in sorted(targets.items()):
        path = site["html"] / urlparse(base).path.lstrip("/")
        if path.is_dir():
            path = path / "index.html"
        if not path.is_file():
            broken.append(f"missing page: {base}")
            continue
        if path.suffix != ".html":
            continue
        ids = set(re.findall(r'\sid="([^"]+)"', path.read_text(errors="replace")))
        broken += [f"missing anchor: {base}#{f}" for f in sorted(fragments) if f not in ids]
    assert len(targets) >= len(toc_pages())
    assert not broken, "\n".join(broken)


def test_search_finds_a_chapter(site, browser):
    page = browser.new_page()
    page.goto(urljoin(site["url"], "search.html?q=sparsemax"), wait_until="load")
    page.wait_for_selector("#search-results ul.search li a", timeout=20_000)
    hits = page.eval_on_selector_all("#search-results ul.search li a", "els => els.map(e => e.href)")
    page.screenshot(path=str(SCREENSHOTS / "search.png"))
    page.close()
    assert any(h.split("?")[0].endswith("notebooks/fdt.html") for h in hits), hits
