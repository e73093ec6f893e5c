"""The rendered book, read by a real browser: Debian's Chromium, headless, driven by Playwright.

The book is built with Jupyter Book 1 (as `make book` does, into a temporary folder), served on
localhost, and every page of `_toc.yml` is opened: it must load with a title, show no error or
traceback in any notebook output, have every image loaded with a non-zero size, and have every
internal link (and its #anchor) resolve. The search page must find a chapter by a word from its text.
A screenshot of each page is kept in `_build/screenshots/` (override with BOOK_SCREENSHOTS) as the
test's artifact. Chromium comes from the project's set-up (`tools/setup.sh`, step "browser"); the
test runs that step when it is missing, and likewise step "mathjax" (the book's own MathJax).

The reader's checks (`survey`) open every page once more as a reader without a network would: on a
laptop's 1,366 x 900 screen, with every request that is not for localhost aborted (and recorded). Each
check is its own test, and each lists every offending page and element; screenshots of the pages
(`<page>@1366.png`) and of the offending elements (`problems/`) are kept beside the others:

* nothing is fetched from the network, and the math is typeset by the book's own MathJax (no raw
  LaTeX in the text a reader sees);
* no table, figure or code block is wider than the content column, and none scrolls sideways (printed text and
  code wrap: book/_static/reader.css);
* no image is shown at another aspect ratio than its file's (more than 2 % off);
* no page logs a console error (a script error, a failed request, the theme's complaints);
* no output shows NaN, a None cell, a TqdmWarning, a traceback or a stderr block;
* no link points at the placeholder repository (https://github.com/OWNER/REPO, tools/colab.py);
* every figure is shown large enough for its text to be read (rule in `test_figure_text_is_legible`);
* the intro's first screen holds the verdict table's first row, and no cell of the results page or the intro holds
  more than 300 characters.
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
import yaml

from tools.run_notebooks import toc_files as toc_pages

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
# Flags for a closed network: without the background-networking ones Chromium keeps dialling Google.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
SCREENSHOTS = Path(os.environ.get("BOOK_SCREENSHOTS", ROOT / "_build" / "screenshots"))
SPHINX_CONFIG = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())["sphinx"]["config"]
READER_VIEWPORT = {"width": 1366, "height": 900}  # a laptop's screen, the commonest one
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
PLACEHOLDER_REPO = "OWNER/REPO"  # tools.colab.PLACEHOLDER_URL's owner/name


def _mathjax_source() -> Path:
    """The MathJax that the build copies into _static/ (book/_config.yml: html_static_path + mathjax_path; the
    first static folder is the set-up's, .cache/assets/book-static, the second the book's own, book/_static)."""
    static = SPHINX_CONFIG["html_static_path"][0]
    return ROOT / static / SPHINX_CONFIG["mathjax_path"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Build the book into a temporary folder and serve it on a free localhost port."""
    if not _mathjax_source().is_file():  # the project's own set-up vendors it (npm package mathjax)
        subprocess.run(["bash", "tools/setup.sh"], cwd=ROOT, check=True, env={**os.environ, "SETUP_STEPS": "mathjax"})
    out = tmp_path_factory.mktemp("book")
    build = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build", ".",
                            "--config", "book/_config.yml", "--toc", "_toc.yml", "--path-output", str(out)],
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


def offline_context(browser, viewport: dict, blocked: list[str] | None = None):
    """A browser context in which every request that is not for localhost is aborted (and recorded in
    ``blocked``): CI has no network, and a request to the outside may hang there rather than fail, which
    would hold ``networkidle`` past its timeout. Whether a page asks for the network at all is
    `test_no_page_needs_the_network`'s question."""
    context = browser.new_context(viewport=viewport)

    def offline(route):
        if urlparse(route.request.url).hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            if blocked is not None:
                blocked.append(route.request.url)
            route.abort()

    context.route("**/*", offline)
    return context


def test_every_page_loads_cleanly_with_its_images(site, browser):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    context = offline_context(browser, {"width": 1280, "height": 900})
    page = context.new_page()
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
    context.close()
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


# ------------------------------------------------------------------------------------------------
# The reader's checks: every page once, offline, at 1,400 px
# ------------------------------------------------------------------------------------------------

# One pass over a page, in the browser. It marks each offending element with data-book-check="<id>"
# (for its screenshot) and returns what the tests assert on.
SURVEY_JS = r"""
(placeholder) => {
  const article = document.querySelector("article.bd-article") || document.querySelector("main")
    || document.body;
  const column = article.getBoundingClientRect();
  let marks = 0;
  const mark = (el) => {
    if (!el.dataset.bookCheck) el.dataset.bookCheck = `c${marks++}`;
    return el.dataset.bookCheck;
  };
  const name = (el) => {
    const heading = (() => {  // the section the element sits in, for the report
      let node = el;
      while (node && node !== article) {
        let sib = node.previousElementSibling;
        while (sib) {
          const h = sib.matches("h1,h2,h3,h4") ? sib : [...sib.querySelectorAll("h1,h2,h3,h4")].pop();
          if (h) return h.textContent.replace("#", "").trim().slice(0, 60);
          sib = sib.previousElementSibling;
        }
        node = node.parentElement;
      }
      return "";
    })();
    const what = el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
      + (el.tagName === "IMG" ? ` ${(el.getAttribute("src") || "").split("/").pop().slice(0, 24)}` : "");
    return heading ? `${what} (section "${heading}")` : what;
  };
  // Text nodes a reader sees as text: not source code (cell inputs, code blocks, inline code outside
  // outputs), not scripts, not typeset math.
  const skip = "script, style, template, .cell_input, mjx-container, mjx-assistive-mml, .headerlink";
  const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
  const prose = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest(skip)) continue;
    if (parent.closest("pre, code") && !parent.closest(".cell_output")) continue;
    prose.push({text: node.textContent, el: parent});
  }
  const found = (regex, outputsOnly) => prose
    .filter(p => regex.test(p.text) && (!outputsOnly || p.el.closest(".cell_output, table")))
    .map(p => ({text: p.text.trim().slice(0, 120),
                where: name(p.el.closest(".cell_output, table, p, li, div") || p.el),
                mark: mark(p.el.closest(".cell_output, table, p, li") || p.el)}));

  const overflow = [];
  if (article.scrollWidth > article.clientWidth + 1)
    overflow.push({what: `the content column itself (scrollWidth ${article.scrollWidth} px > `
                         + `clientWidth ${article.clientWidth} px)`, mark: mark(article)});
  for (const el of article.querySelectorAll("table, img, pre")) {
    const r = el.getBoundingClientRect();
    if (r.width === 0) continue;
    if (r.right > column.right + 1 || r.left < column.left - 1)
      overflow.push({what: `${name(el)}: ${Math.round(r.width)} px wide at x ${Math.round(r.left)}-`
                           + `${Math.round(r.right)}, column x ${Math.round(column.left)}-${Math.round(column.right)}`,
                     mark: mark(el)});
  }
  // A code block or a table that scrolls sideways inside the column is as wide as its content, not the column's.
  for (const el of article.querySelectorAll("pre, table, .pst-scrollable-table-container, .table-wrapper")) {
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1)
      overflow.push({what: `${name(el)}: scrolls sideways, ${el.scrollWidth} px of content in ${el.clientWidth} px: `
                           + JSON.stringify(el.textContent.trim().slice(0, 60)), mark: mark(el)});
  }
  for (const cell of article.querySelectorAll("td, th")) {  // a fixed-layout table's cell whose text runs over
    if (cell.clientWidth > 0 && cell.scrollWidth > cell.clientWidth + 1)
      overflow.push({what: `${name(cell.closest("table"))}: a cell's text runs over its column: `
                           + JSON.stringify(cell.textContent.trim().slice(0, 60)), mark: mark(cell.closest("table"))});
  }
  const longCells = [...article.querySelectorAll("td, th")]
    .filter(c => c.textContent.trim().length > 300)
    .map(c => ({text: c.textContent.trim().slice(0, 80), length: c.textContent.trim().length,
                where: name(c.closest("table")), mark: mark(c.closest("table"))}));
  const verdictRow = article.querySelector("table.verdicts tbody tr");
  const badCells = [...article.querySelectorAll("td, th")]
    .filter(c => ["None", "nan", "NaN", "<NA>", "NaT"].includes(c.innerText.trim()))
    .map(c => ({text: c.innerText.trim(), where: name(c.closest("table")), mark: mark(c.closest("table"))}));
  const stderr = [...article.querySelectorAll(".output.stderr, div.stderr")]
    .map(e => ({text: e.innerText.trim().slice(0, 160), where: name(e), mark: mark(e)}));
  const maths = [...article.querySelectorAll(".math")];
  // What a reader sees before scrolling: the text of elements whose top lies within the first viewport.
  const firstScreen = prose.filter(p => p.el.getBoundingClientRect().top + window.scrollY < window.innerHeight)
    .map(p => p.text).join(" ");
  return {
    firstScreen: firstScreen.slice(0, 20000),
    firstVerdictRowBottom: verdictRow ? verdictRow.getBoundingClientRect().bottom + window.scrollY : null,
    longCells,
    height: document.documentElement.scrollHeight,
    internalIds: found(/\[[a-z0-9]+(?:_[a-z0-9]+){2,}\]|\bRANK_RULE\b/, false),
    title: document.title,
    column: {left: column.left, right: column.right, width: column.width},
    overflow,
    nan: found(/\bNaN\b/, true), tqdm: found(/TqdmWarning/), traceback: found(/\bTraceback\b/), badCells, stderr,
    rawLatex: found(/\\\(|\\\)|\\\[|\\\]|\$\$|\\begin\{|\$[^$\s][^$]*\\[A-Za-z]+[^$]*\$/),
    math: {elements: maths.length, typeset: maths.filter(m => m.querySelector("mjx-container")).length,
           untypeset: maths.filter(m => !m.querySelector("mjx-container")).slice(0, 5)
                           .map(m => ({text: m.textContent.trim().slice(0, 80), where: name(m), mark: mark(m)}))},
    mathjaxScripts: [...document.querySelectorAll("script[src]")].map(s => s.src).filter(s => /mathjax/i.test(s)),
    placeholderLinks: [...document.querySelectorAll("a[href]")]
      .filter(a => {
        try { return decodeURI(a.href).includes(placeholder); } catch (e) { return a.href.includes(placeholder); }
      })
      .map(a => ({href: a.href, text: (a.innerText || a.getAttribute("aria-label") || a.title || "").trim()})),
    images: [...article.querySelectorAll("img")].map(i => ({
      src: i.currentSrc || i.src, natural: i.naturalWidth, rendered: i.getBoundingClientRect().width,
      naturalHeight: i.naturalHeight, renderedHeight: i.getBoundingClientRect().height,
      where: name(i), mark: mark(i)})),
  };
}
"""


def _page_name(source: str) -> str:
    return source.replace("/", "__")


@pytest.fixture(scope="module")
def survey(site, browser):
    """Every page of _toc.yml, opened offline at 1,400 px: {page: what SURVEY_JS measured, the requests
    that were blocked, the figures shown too small}, with screenshots (``SCREENSHOTS/<page>@1400.png``,
    and one per offending element in ``SCREENSHOTS/problems/``, named ``<page>.<check>.<n>.png``)."""
    from playwright.sync_api import Error as PlaywrightError  # its TimeoutError is one too

    problems_dir = SCREENSHOTS / "problems"
    problems_dir.mkdir(parents=True, exist_ok=True)
    for old in problems_dir.glob("*.png"):
        old.unlink()
    blocked: list[str] = []
    context = offline_context(browser, READER_VIEWPORT, blocked)
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: console.append(f"uncaught: {error}"))
    pages = {}
    for source in toc_pages():
        blocked.clear()
        console.clear()
        page.goto(urljoin(site["url"], f"{source}.html"), wait_until="load")
        page.wait_for_load_state("networkidle")
        mathjax = "not needed"
        if page.eval_on_selector_all("article .math", "els => els.length"):
            try:  # MathJax 3 loads deferred; wait until it has typeset the page
                page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                                       timeout=20_000)
                page.evaluate("() => window.MathJax.startup.promise")
                mathjax = "typeset"
            except PlaywrightError as error:  # reported by test_math_is_typeset_offline
                mathjax = f"MathJax did not start: {type(error).__name__}"
        data = page.evaluate(SURVEY_JS, PLACEHOLDER_REPO)
        data["blocked"] = list(blocked)
        data["console"] = list(console)
        data["mathjax"] = mathjax
        data["screenshot"] = SCREENSHOTS / f"{_page_name(source)}@{READER_VIEWPORT['width']}.png"
        page.screenshot(path=str(data["screenshot"]), full_page=True)
        data["small_figures"] = _small_figures(site["html"], data["images"])
        data["stretched"] = _stretched_images(data["images"])
        for check in ("overflow", "nan", "tqdm", "traceback", "badCells", "stderr", "rawLatex", "small_figures",
                      "stretched", "longCells"):
            _shoot(page, problems_dir / _page_name(source), check, data[check])
        _shoot(page, problems_dir / _page_name(source), "math", data["math"]["untypeset"])
        pages[source] = data
    context.close()
    return pages


def _shoot(page, prefix: Path, check: str, items: list[dict]) -> None:
    """A screenshot of each offending element (the first six elements), as item["shot"]."""
    from playwright.sync_api import Error as PlaywrightError

    shots: dict[str, str | None] = {}
    for item in items:
        if item["mark"] not in shots and len(shots) < 6:
            path = prefix.with_name(f"{prefix.name}.{check}.{len(shots)}.png")
            try:
                page.locator(f'[data-book-check="{item["mark"]}"]').screenshot(path=str(path), timeout=5_000)
                shots[item["mark"]] = str(path)
            except PlaywrightError:  # an element that cannot be shot (hidden, zero height): the page's shot stays
                shots[item["mark"]] = None
        if shots.get(item["mark"]):
            item["shot"] = shots[item["mark"]]


def _report(lines: list[str]) -> str:
    return "\n".join(lines) + f"\n(screenshots: {SCREENSHOTS}, offending elements in {SCREENSHOTS / 'problems'})"


def _where(item: dict) -> str:
    return item["where"] + (f" [{Path(item['shot']).name}]" if item.get("shot") else "")


def _grouped(source: str, what: str, items: list[dict], show_text: bool = True) -> list[str]:
    """One line per place (and text): '<page>: <what> in <where> (n times)'."""
    counts: dict[tuple[str, str], int] = {}
    shots: dict[tuple[str, str], str] = {}
    for item in items:
        key = (item["where"], item["text"] if show_text else "")
        counts[key] = counts.get(key, 0) + 1
        if item.get("shot"):
            shots.setdefault(key, Path(item["shot"]).name)
    return [f"{source}: {what} in {where}" + (f" [{shots[key]}]" if key in shots else "")
            + (f": {text!r}" if text else "") + (f" ({n} times)" if n > 1 else "")
            for key, n in counts.items() for where, text in [key]]


def test_mathjax_is_served_by_the_book(site):
    """MathJax comes from the built book (_static/), never from a CDN: the math typesets offline."""
    path = SPHINX_CONFIG["mathjax_path"]
    assert not urlparse(path).scheme and not path.startswith("//"), f"mathjax_path must be local, not {path!r}"
    assert (site["html"] / "_static" / path).is_file(), f"no _static/{path}: SETUP_STEPS=mathjax bash tools/setup.sh"
    remote = []
    for html in site["html"].rglob("*.html"):
        for src in re.findall(r"<script[^>]*\ssrc=\"([^\"]+)\"", html.read_text(errors="replace")):
            if "mathjax" in src.lower() and urlparse(src).scheme:
                remote.append(f"{html.relative_to(site['html'])}: {src}")
    assert not remote, "MathJax loaded from the network:\n" + "\n".join(remote)


def test_no_page_needs_the_network(survey):
    """With every non-localhost request aborted, no page asked for one (MathJax, fonts, scripts: all local)."""
    lines = [f"{source}: requested {url}" for source, data in survey.items() for url in data["blocked"]]
    lines += [f"{source}: MathJax script from elsewhere: {src}" for source, data in survey.items()
              for src in data["mathjaxScripts"] if urlparse(src).hostname not in LOCAL_HOSTS]
    assert not lines, _report(lines)


def test_math_is_typeset_offline(survey):
    """Every math element of a page is typeset by MathJax (an mjx-container inside it), and no text the
    reader sees is raw LaTeX: no \\( \\) \\[ \\] $$ \\begin{ and no $...\\command...$ (code is not prose)."""
    lines, with_math = [], []
    for source, data in survey.items():
        math = data["math"]
        if math["elements"]:
            with_math.append(source)
            if data["mathjax"] != "typeset":
                lines.append(f"{source}: {data['mathjax']}")
            if math["typeset"] < math["elements"]:
                examples = "; ".join(f"{m['text']!r} in {_where(m)}" for m in math["untypeset"])
                lines.append(f"{source}: {math['elements'] - math['typeset']} of {math['elements']} math elements "
                             f"not typeset, e.g. {examples}")
        lines += [f"{source}: raw LaTeX {item['text']!r} in {_where(item)}" for item in data["rawLatex"]]
    assert with_math, "no page has math: the check would prove nothing"
    assert not lines, _report(lines)


def test_no_table_or_figure_overflows_the_column(survey):
    """On a 1,366 px screen no table, image or code block is wider than the article's column (its bounding box
    stays inside the column's), none scrolls sideways inside it (a table's container, a code block), no cell's text
    runs over its column, and the column itself never scrolls sideways."""
    lines = [f"{source}: {item['what']}" + (f" [{Path(item['shot']).name}]" if item.get("shot") else "")
             for source, data in survey.items() for item in data["overflow"]]
    assert not lines, _report(lines)


def test_no_output_shows_nan_none_warnings_or_stderr(survey):
    """No output or table shows NaN, no table cell is None/nan/NaN/<NA>/NaT, no page shows a TqdmWarning
    or a Traceback (outside source code), and no output is a stderr block (MyST-NB's `output stderr`).
    Prose may name NaN (e.g. "JSON without NaN"); outputs and tables may not show one."""
    lines = []
    for source, data in survey.items():
        lines += _grouped(source, "NaN", [i for i in data["nan"]  # a cell that is just NaN: reported as a cell
                                          if not (i["where"].startswith("table") and i["text"] == "NaN")])
        lines += _grouped(source, "NaN/None table cell", data["badCells"])
        lines += _grouped(source, "TqdmWarning", data["tqdm"])
        lines += _grouped(source, "Traceback", data["traceback"])
        lines += _grouped(source, "stderr block", data["stderr"])
    assert not lines, _report(lines)


def test_no_link_points_at_the_placeholder_repository(survey):
    """While repository.url is the placeholder, no link (badge, launch button, repository icon) uses it."""
    lines = [f"{source}: link {link['text']!r} -> {link['href']}"
             for source, data in survey.items() for link in data["placeholderLinks"]]
    assert not lines, _report(lines)


# Figures must be legible where the book shows them. A label of F pt in a PNG saved at `dpi` is
# F * dpi / 72 image pixels tall; the page shows the image scaled by rendered / natural width, so the
# label is F * (dpi / 72) * (rendered / natural) CSS px tall on screen. The book's figure style
# (chapters/notebook.py) sets no text smaller than 9 pt, and 9 CSS px is the smallest legible screen
# text we accept, so every figure must be shown at >= 1 CSS px per point:
#     rendered_width >= natural_width * 72 / dpi      (i.e. at >= 75 % of its physical size)
# dpi is read from the PNG (matplotlib records savefig's dpi in its pHYs chunk). Only matplotlib
# PNGs are checked (photos, badges and SVG diagrams carry no point sizes). The test cannot see font
# sizes: a figure whose code passes fontsize=7 needs 9/7 times more room than this rule asks.
MIN_PX_PER_PT = 1.0


def _png_dpi(path: Path) -> float | None:
    """The dpi that matplotlib recorded in a PNG, or None when it is not a matplotlib PNG."""
    from PIL import Image, UnidentifiedImageError

    if path.suffix.lower() != ".png" or not path.is_file():
        return None
    try:
        with Image.open(path) as image:
            if image.format != "PNG" or "matplotlib" not in str(image.info.get("Software", "")).lower():
                return None
            dpi = image.info.get("dpi")
    except UnidentifiedImageError:
        return None
    return float(dpi[0]) if dpi else None


def _small_figures(html: Path, images: list[dict]) -> list[dict]:
    """The matplotlib figures among ``images`` that are shown below MIN_PX_PER_PT (with dpi and px_per_pt)."""
    small = []
    for image in images:
        url = urlparse(image["src"])
        if url.hostname not in LOCAL_HOSTS or not image["natural"] or not image["rendered"]:
            continue
        image["dpi"] = _png_dpi(html / url.path.lstrip("/"))
        if image["dpi"] is None:
            continue
        image["px_per_pt"] = image["rendered"] / image["natural"] * image["dpi"] / 72
        if image["px_per_pt"] < MIN_PX_PER_PT:
            small.append(image)
    return small


def test_figure_text_is_legible(survey):
    """Every matplotlib figure is shown at >= MIN_PX_PER_PT CSS px per point of font size (see above)."""
    checked = sum(1 for data in survey.values() for image in data["images"] if image.get("dpi"))
    lines = [f"{source}: {_where(i)}: {i['natural']} px at {i['dpi']:.0f} dpi shown {i['rendered']:.0f} px wide "
             f"= {i['px_per_pt']:.2f} px/pt (a 9 pt label at {9 * i['px_per_pt']:.1f} px); needs >= "
             f"{i['natural'] * 72 / i['dpi']:.0f} px"
             for source, data in survey.items() for i in data["small_figures"]]
    assert checked, "no matplotlib figure found: the check would prove nothing"
    assert not lines, _report(lines)


FINDING = re.compile(r"\b(reproduced|not reproduced|inconclusive|no effect at this scale)\b")


def test_the_first_screen_of_the_intro_results_and_every_chapter_states_a_finding(survey):
    """A reader learns what a page found before scrolling (1,400 x 900): a verdict word in the first viewport."""
    pages = [s for s in survey if s.startswith("notebooks/") or s.endswith(("intro", "results"))]
    lines = [f"{source}: no verdict (reproduced / not reproduced / inconclusive / no effect at this scale) in the "
             f"first 900 px" for source in pages if not FINDING.search(survey[source]["firstScreen"])]
    assert pages and not lines, _report(lines)


def test_no_page_shows_internal_ids(survey):
    """Claim ids such as [mlp_beats_linear] and rule constants are for code, not for a reader."""
    lines = [line for source, data in survey.items()
             for line in _grouped(source, "an internal id", data["internalIds"])]
    assert not lines, _report(lines)


# ------------------------------------------------------------------------------------------------
# What a reader sees (issue 62): shapes, the console, the first screen, the length of a cell
# ------------------------------------------------------------------------------------------------

MAX_ASPECT_ERROR = 0.02  # a figure drawn 2 % wider or taller than its file is a stretched figure


def _stretched_images(images: list[dict]) -> list[dict]:
    """The images shown at an aspect ratio more than MAX_ASPECT_ERROR off their file's (with the two ratios)."""
    stretched = []
    for image in images:
        if not (image["natural"] and image["naturalHeight"] and image["rendered"] and image["renderedHeight"]):
            continue
        image["file_ratio"] = image["natural"] / image["naturalHeight"]
        image["shown_ratio"] = image["rendered"] / image["renderedHeight"]
        if abs(image["shown_ratio"] / image["file_ratio"] - 1) > MAX_ASPECT_ERROR:
            stretched.append(image)
    return stretched


def test_no_image_is_stretched(survey):
    """Every image is shown at its file's aspect ratio (within 2 %): no fixed width or height squeezes a figure."""
    checked = sum(1 for data in survey.values() for image in data["images"] if image.get("file_ratio"))
    lines = [f"{source}: {_where(i)}: the file is {i['file_ratio']:.3f} wide per unit of height, shown "
             f"{i['shown_ratio']:.3f} ({i['rendered']:.0f} x {i['renderedHeight']:.0f} px)"
             for source, data in survey.items() for i in data["stretched"]]
    assert checked, "no image found: the check would prove nothing"
    assert not lines, _report(lines)


def test_no_page_logs_a_console_error(survey):
    """A page logs no error in the browser's console: no script error (an inline script included twice), no
    request that fails (a missing favicon), no theme complaint ("Got invalid theme mode")."""
    lines = [f"{source}: {message[:200]}" for source, data in survey.items() for message in data["console"]]
    assert not lines, _report(lines)


def test_the_intro_shows_the_first_verdict_on_its_first_screen(survey):
    """On a 1,366 x 900 screen, the intro's first screen holds the verdict table's header and first row."""
    intro = next(source for source in survey if source.endswith("intro"))
    bottom = survey[intro]["firstVerdictRowBottom"]
    assert bottom is not None, f"{intro}: no verdict table (table.verdicts, tools/results_page.py)"
    assert bottom <= READER_VIEWPORT["height"], _report([
        f"{intro}: the verdict table's first row ends {bottom:.0f} px down, below the first screen "
        f"({READER_VIEWPORT['height']} px)"])


def test_no_cell_of_the_results_page_or_the_intro_is_longer_than_300_characters(survey):
    """A table is for scanning: the results page's and the intro's cells hold a label, a number pair or a verdict;
    statements, evidence and diagnoses are lines of their own."""
    pages = [source for source in survey if source.endswith(("intro", "results"))]
    lines = [f"{source}: a cell of {cell['length']} characters in {_where(cell)}: {cell['text']!r}"
             for source in pages for cell in survey[source]["longCells"]]
    assert len(pages) == 2 and not lines, _report(lines)
