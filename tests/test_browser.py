"""The built book as a reader meets it: every page opened in headless Chromium, through a local server.

The HTML is built (or reused when newer than every source) with `jupyter-book build`, served on
127.0.0.1 and opened page by page over the Chrome DevTools protocol. A page fails on a JavaScript
error, a request that leaves localhost, a resource that does not load, a formula MathJax did not
typeset, a missing image, a broken internal link or anchor, a cross-reference that prints a bare block
type ("Proposition" with no number or name), a Markdown table left as text, or a wide formula, output
or table cut at the column edge instead of scrolling (at 1280 px). Screenshots of the
landing page, chapter 4, results at a glance, the two papers' rates and the performance chapter are
written to ``_build/screens``.

Chromium comes from Debian's ``chromium`` package (``make browser`` installs it); set ``CHROMIUM`` to
use another binary. Without one the tests are skipped with that message.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from html import unescape
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import websocket
import yaml

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
SCREENS = ROOT / "_build" / "screens"
SOURCES = ["book", "_config.yml", "_toc.yml", "_ext", "_static"]
SCREENSHOTS = {"book/intro": "landing", "book/04_tightness": "chapter04", "book/29_results_at_a_glance": "glance",
               "book/34_two_papers": "two-papers", "book/10_performance": "performance"}
PAGE_TIMEOUT_S = 60.0


def _toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for part in toc.get("parts", []) for c in part["chapters"]]
    return [str(Path(f).with_suffix("")) for f in files]


PAGES = _toc_pages()

# Read in the page after MathJax finished: everything a reader would see wrong, as a list of strings.
CHECK_PAGE_JS = r"""
(async () => {
  const problems = [];
  const article = document.querySelector('article') || document.body;
  const snippet = (s) => s.replace(/\s+/g, ' ').trim().slice(0, 100);
  for (const el of article.querySelectorAll('span.math, div.math')) {
    if (!el.querySelector('mjx-container')) problems.push('formula not typeset: ' + snippet(el.textContent));
  }
  for (const el of article.querySelectorAll('mjx-merror')) {
    problems.push('MathJax error: ' + snippet(el.getAttribute('data-mjx-error') || el.textContent));
  }
  for (const img of document.querySelectorAll('img')) {
    img.loading = 'eager';
    try { await img.decode(); } catch (e) { /* a broken image is reported below */ }
    if (!img.complete || img.naturalWidth === 0) problems.push('image did not load: ' + img.getAttribute('src'));
  }
  const types = ['Axiom', 'Theorem', 'Lemma', 'Definition', 'Remark', 'Conjecture', 'Corollary', 'Algorithm',
                 'Criterion', 'Example', 'Property', 'Observation', 'Proposition', 'Assumption', 'Notation',
                 'Proof', 'Figure', 'Fig\\.', 'Table', 'Equation', 'Eq\\.', 'Section'];
  const bare = new RegExp('^(' + types.join('|') + ')?\\s*\\.?$');
  for (const a of article.querySelectorAll('a.reference.internal')) {
    const text = a.textContent.trim();
    if (bare.test(text) && !a.querySelector('img')) {
      problems.push('cross-reference prints a bare "' + text + '" (-> ' + a.getAttribute('href') + ') in: '
                    + snippet(a.parentElement.textContent));
    }
  }
  const prose = article.cloneNode(true);
  for (const el of prose.querySelectorAll('pre, code, script, style, mjx-container')) el.remove();
  // The separator row of a Markdown table; Sphinx's smart quotes turn its "---" into dashes.
  const table = /(\|\s*:?[-–—]+:?\s*){2,}\|/g;
  for (const m of prose.textContent.matchAll(table)) {
    const at = m.index;
    problems.push('Markdown table left as text: ' + snippet(prose.textContent.slice(Math.max(0, at - 60), at + 40)));
  }
  // Wide content must scroll: a formula's glyphs or a block's text may not pass the edge of a box that clips.
  const clippedBy = (el, left, right) => {
    for (let e = el.parentElement; e && e !== article.parentElement; e = e.parentElement) {
      const overflow = getComputedStyle(e).overflowX;
      if (overflow === 'auto' || overflow === 'scroll') return null;
      const box = e.getBoundingClientRect();
      if ((overflow === 'hidden' || overflow === 'clip') && (right > box.right + 1 || left < box.left - 1)) return e;
    }
    return null;
  };
  for (const c of article.querySelectorAll('mjx-container')) {
    const glyphs = c.querySelector('mjx-math');
    const r = glyphs ? glyphs.getBoundingClientRect() : null;
    const box = r ? clippedBy(c, r.left, r.right) : null;
    if (box) problems.push(`formula cut by ${box.tagName.toLowerCase()}.${box.className}: ` + snippet(c.textContent));
  }
  for (const el of article.querySelectorAll('pre, .cell_output, table')) {
    const overflow = getComputedStyle(el).overflowX;
    const r = el.getBoundingClientRect();
    const wide = el.scrollWidth > el.clientWidth + 1 && !['auto', 'scroll'].includes(overflow);
    if (wide || clippedBy(el, r.left, r.left + el.scrollWidth)) {
      problems.push('output cut at the column edge: ' + snippet(el.textContent));
    }
  }
  const links = [...document.querySelectorAll('a[href]')].map((a) => a.href);
  const images = [...article.querySelectorAll('img')].map((img) => img.src);
  return JSON.stringify({problems, links, images});
})()
"""


class CDP:
    """A minimal Chrome DevTools protocol client over one page's websocket: commands and the events seen."""

    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=PAGE_TIMEOUT_S, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self.events.append(message)

    def wait_for(self, event: str, deadline: float) -> None:
        while not any(e.get("method") == event for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {event} within {PAGE_TIMEOUT_S} s")
            self.events.append(json.loads(self.ws.recv()))

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")


def _newest_source_mtime() -> float:
    files: list[Path] = []
    for name in SOURCES:
        path = ROOT / name
        files += [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    return max(p.stat().st_mtime for p in files if p.exists())


@pytest.fixture(scope="module")
def site() -> Path:
    """``_build/html``, rebuilt when any source is newer than the last build."""
    stamp = SITE / "searchindex.js"
    if not stamp.exists() or stamp.stat().st_mtime < _newest_source_mtime():
        jb = Path(sys.executable).with_name("jupyter-book")
        command = [str(jb) if jb.exists() else "jupyter-book", "build", ".", "--warningiserror", "--keep-going"]
        done = subprocess.run([*command, "--path-output", "."], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, f"`{' '.join(command)}` failed:\n{(done.stdout + done.stderr)[-4000:]}"
    return SITE


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[str]:
    """The built book served on an ephemeral 127.0.0.1 port."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _chromium() -> str:
    for candidate in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    pytest.skip("headless Chromium not found: install Debian's `chromium` (`make browser` or "
                "`apt-get install chromium`), or point $CHROMIUM at a Chrome binary")


@pytest.fixture(scope="module")
def browser() -> Iterator[CDP]:
    """One headless Chromium tab, remote-controlled; every host but 127.0.0.1 resolves to nothing."""
    profile = tempfile.mkdtemp(prefix="lipnb-chromium-")
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", "--window-size=1280,900", "about:blank"]
    process = subprocess.Popen([_chromium(), *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port_file = Path(profile) / "DevToolsActivePort"
    deadline = time.monotonic() + PAGE_TIMEOUT_S
    while not port_file.exists() or not port_file.read_text().strip():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"Chromium did not start (exit code {process.poll()})")
        time.sleep(0.1)
    port = port_file.read_text().split()[0]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as response:
        tab = next(t for t in json.load(response) if t["type"] == "page")
    cdp = CDP(tab["webSocketDebuggerUrl"])
    for domain in ("Page", "Runtime", "Log", "Network"):
        cdp.send(f"{domain}.enable")
    cdp.send("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
    yield cdp
    cdp.ws.close()
    process.terminate()
    process.wait(timeout=30)
    shutil.rmtree(profile, ignore_errors=True)


@dataclass
class Visit:
    """What one page load showed: problems found in the page and in the browser's events, and its links."""

    problems: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)


def _visit(cdp: CDP, url: str, origin: str) -> Visit:
    cdp.events.clear()
    deadline = time.monotonic() + PAGE_TIMEOUT_S
    cdp.send("Page.navigate", url=url)
    cdp.wait_for("Page.loadEventFired", deadline)
    cdp.evaluate("window.MathJax && MathJax.startup ? MathJax.startup.promise.then(() => true) : false")
    report = json.loads(cdp.evaluate(CHECK_PAGE_JS))
    visit = Visit(problems=report["problems"], links=report["links"], images=report["images"])
    for event in cdp.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            visit.problems.append(f"JavaScript error: {text}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            visit.problems.append(f"console error: {[a.get('value') for a in params.get('args', [])]}")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            if entry.get("url", "").endswith("/favicon.ico"):
                continue  # Chromium asks for it on its own; no page links one
            visit.problems.append(f"browser error: {entry['text']} {entry.get('url', '')}".strip())
        elif method == "Network.requestWillBeSent":
            request_url = params["request"]["url"]
            if not request_url.startswith((origin, "data:", "blob:", "about:")):
                visit.problems.append(f"request outside localhost: {request_url}")
    return visit


@functools.cache
def _anchors(path: Path) -> frozenset[str]:
    return frozenset(re.findall(r'\bid="([^"]+)"', path.read_text(errors="replace")))


def _broken_links(links: list[str], origin: str, site: Path) -> list[str]:
    broken = []
    for link in sorted(set(links)):
        if not link.startswith(origin + "/"):
            continue
        parts = urlsplit(link)
        target = site / unquote(parts.path).lstrip("/")
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            broken.append(f"broken internal link: {parts.path}")
        elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _anchors(target):
            broken.append(f"broken anchor: {parts.path}#{parts.fragment}")
    return broken


def _screenshot(cdp: CDP, name: str) -> None:
    SCREENS.mkdir(parents=True, exist_ok=True)
    shot = cdp.send("Page.captureScreenshot", format="png")
    (SCREENS / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))
    first_table = "(document.querySelector('article table') || document.querySelector('article .cell_output'))"
    if cdp.evaluate(f"!!{first_table}"):
        cdp.evaluate(f"{first_table}.scrollIntoView({{block: 'start'}}); true")
        shot = cdp.send("Page.captureScreenshot", format="png")
        (SCREENS / f"{name}-output.png").write_bytes(base64.b64decode(shot["data"]))


def _repeated_figures(images: list[str], origin: str, site: Path) -> list[str]:
    """A figure drawn twice on one page (a cell's own output and its glued copy): same bytes, two images."""
    seen: dict[str, str] = {}
    repeated = []
    for src in images:
        if not src.startswith(origin + "/"):
            continue
        path = site / unquote(urlsplit(src).path).lstrip("/")
        if not path.is_file():
            continue  # reported as an image that did not load
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest in seen:
            repeated.append(f"figure repeated on the page: {urlsplit(src).path} (also {seen[digest]})")
        seen.setdefault(digest, urlsplit(src).path)
    return repeated


@pytest.mark.parametrize("page", PAGES)
def test_page_reads_right(page: str, site: Path, server: str, browser: CDP) -> None:
    """The page loads offline with no error, every formula typeset, every image, link and table whole."""
    visit = _visit(browser, f"{server}/{page}.html", server)
    if page in SCREENSHOTS:
        _screenshot(browser, SCREENSHOTS[page])
    problems = visit.problems + _broken_links(visit.links, server, site) + _repeated_figures(visit.images, server, site)
    assert not problems, f"{page}.html: {len(problems)} problem(s):\n  " + "\n  ".join(problems)


def test_citations_match_the_reference_list(site: Path) -> None:
    """The list is labelled author-year, and every citation in the text shows its entry's author or year."""
    listing = (site / "book" / "references.html").read_text()
    labels = dict(re.findall(r'id="(id\d+)" role="doc-biblioentry">\s*<span class="label">'
                             r'<span class="fn-bracket">\[</span>([^<]*)<', listing))
    assert labels, "book/references.html lists no entries"
    not_author_year = [label for label in labels.values() if not re.fullmatch(r"[^,]+, \d{4}[a-z]?", label)]
    assert not not_author_year, f"reference list labels not author-year: {not_author_year}"
    mismatched = []
    for page in sorted((site / "book").glob("*.html")):
        for target, html in re.findall(r'href="references\.html#(id\d+)"[^>]*>(.*?)</a>', page.read_text()):
            text = " ".join(unescape(re.sub(r"<[^>]+>", "", html)).split())
            author, year = labels[target].rsplit(", ", 1)
            if text not in (labels[target], author, year):
                mismatched.append(f"{page.name}: cites {text!r} for [{labels[target]}]")
    assert not mismatched, "citations disagree with the reference list:\n  " + "\n  ".join(mismatched)
