"""The built book as a reader meets it: every page opened in headless Chromium, through a local server.

The HTML is built (or reused when newer than every source) with `jupyter-book build`, served on
127.0.0.1 and opened page by page over the Chrome DevTools protocol at 1280 px. A page fails on a
JavaScript error, a request that leaves localhost, a resource that does not load, a formula MathJax did
not typeset, a missing image, a broken internal link or anchor, a cross-reference that prints a bare block
type ("Proposition" with no number or name), a Markdown table left as text, a directive or role shown as
source text, a glued value printed as a quoted literal, a mention of the work tracker, five or more check
lines printed in a row, a figure without a caption, a wide formula, output or table cut at the column
edge, a table printed as text wider than the column, a Markdown table wider than the column, content
clipped by a box that hides its overflow, or a page that scrolls sideways. Each of these checks is shown
firing on a planted page. README and the introduction are checked against the Makefile (make targets,
durations, pinned versions, paths). Figures are checked where they are drawn (``lipnb.report.show``: text
too small for the page, overprinted labels within or between panels and colour bars, an offset on a title,
an empty legend entry). A full-page screenshot of every page is written to ``_build/screens``.

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
from reading_checks import KINDS, book_chapter_numbers, kind_of, layout_problems, prose_problems

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
SCREENS = ROOT / "_build" / "screens"
SOURCES = ["book", "_config.yml", "_toc.yml", "_ext", "_static"]
# Full-page screenshots of every page, cut at this height (a page longer than that is itself a defect to fix).
SCREENSHOT_MAX_PX = 60_000
PAGE_TIMEOUT_S = 60.0
# Pages read by lookup rather than in a sitting, exempt from the length rule (S2).
LONG_BY_NATURE = {"book/references"}
CHAPTER_NUMBERS = book_chapter_numbers(ROOT)
# What prose says about the build is checked against the Makefile (test_prose_agrees_with_the_makefile).
PROSE_ABOUT_THE_BUILD = ["README.md", "book/intro.md"]


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
  // Folded content (a hidden input, a closed dropdown) is laid out only once opened: it is judged then.
  const folded = (el) => el.closest('details:not([open])') !== null && !el.matches('details > summary *');
  // A line never breaks between an inline formula and the bracket before it or the punctuation after it
  // ("(" left at a line's end, "." starting the next): a character wholly above or below the formula's box.
  const charBox = (node, at) => {
    const range = document.createRange();
    range.setStart(node, at);
    range.setEnd(node, at + 1);
    return range.getBoundingClientRect();
  };
  for (const c of article.querySelectorAll('mjx-container:not([display="true"])')) {
    const box = c.getBoundingClientRect();
    if (folded(c) || box.height === 0) continue;
    const host = c.closest('span.math') || c;
    const [before, after] = [host.previousSibling, host.nextSibling];
    if (before && before.nodeType === Node.TEXT_NODE && before.textContent.endsWith('(')
        && charBox(before, before.textContent.length - 1).bottom <= box.top) {
      problems.push('a line breaks between "(" and its formula: ' + snippet(host.parentElement.textContent));
    }
    if (after && after.nodeType === Node.TEXT_NODE && /^[.,;:)]/.test(after.textContent)
        && charBox(after, 0).top >= box.bottom) {
      problems.push(`a line breaks between a formula and the "${after.textContent[0]}" after it: `
                    + snippet(host.parentElement.textContent));
    }
    // "$n$ = {glue:text}`…`": the relation, and a short glued value after it, stay on the formula's line
    const relation = after && after.nodeType === Node.TEXT_NODE ? /^\s*[=<>≤≥≈]/.exec(after.textContent) : null;
    const value = relation && /^\s*\S\s*$/.test(after.textContent) ? after.nextSibling : null;
    const valueBelow = value && value.nodeType === Node.ELEMENT_NODE && value.classList.contains('pasted-text')
        && value.textContent.length <= 16 && value.getBoundingClientRect().top >= box.bottom;
    if (relation && (charBox(after, relation[0].length - 1).top >= box.bottom || valueBelow)) {
      problems.push(`a line breaks inside "formula ${relation[0].trim()} value": `
                    + snippet(host.parentElement.textContent));
    }
  }
  for (const el of article.querySelectorAll('pre, .cell_output, table')) {
    if (folded(el)) continue;
    const overflow = getComputedStyle(el).overflowX;
    const r = el.getBoundingClientRect();
    const wide = el.scrollWidth > el.clientWidth + 1 && !['auto', 'scroll'].includes(overflow);
    if (wide || clippedBy(el, r.left, r.left + el.scrollWidth)) {
      problems.push('output cut at the column edge: ' + snippet(el.textContent));
    }
  }
  // A table printed as text (a DataFrame's repr: rows of columns separated by runs of spaces) wider than
  // the column: printed output wraps at the column edge, so its rows fold and its columns no longer line up.
  const isRow = (line) => (line.match(/\S {2,}(?=\S)/g) || []).length >= 2;
  for (const el of article.querySelectorAll('div.cell_output pre, div.output pre')) {
    const rows = el.textContent.split('\n').filter(isRow);
    if (rows.length < 3) continue;
    const probe = el.cloneNode(false);  // the rows alone, unwrapped, in the same box
    probe.textContent = rows.join('\n');
    probe.style.whiteSpace = 'pre';
    el.after(probe);
    const [width, column] = [probe.scrollWidth, probe.clientWidth];
    probe.remove();
    if (width > column + 1) {
      problems.push(`text table wider than its column (${width} > ${column} px; show it with `
                    + 'lipnb.report.markdown_table): ' + snippet(el.textContent));
    }
  }
  // A Markdown table's cells wrap (book.css): one wider than the column has a cell that cannot, and its
  // last columns would sit off-screen.
  for (const el of article.querySelectorAll('table.table')) {
    const width = el.getBoundingClientRect().width;
    if (width > el.parentElement.clientWidth + 1) {
      problems.push(`table wider than its column (${Math.round(width)} > ${el.parentElement.clientWidth} px): `
                    + snippet(el.textContent));
    }
  }
  // Content cut by a box that hides what passes its edge (a formula's screen-reader copy is meant to be).
  for (const el of article.querySelectorAll('*')) {
    if (el.closest('mjx-container') || folded(el)) continue;
    const overflow = getComputedStyle(el).overflowX;
    if ((overflow === 'hidden' || overflow === 'clip') && el.scrollWidth > el.clientWidth + 1) {
      problems.push(`content clipped by ${el.tagName.toLowerCase()}.${el.className} (${el.scrollWidth} > `
                    + `${el.clientWidth} px): ` + snippet(el.textContent));
    }
  }
  // What a reader should never see. Source text of a directive or role that did not render (a fence whose
  // title broke it shows "```{prf:lemma}" as text and the next block as code), outside the cells' code.
  const shown = article.cloneNode(true);
  for (const el of shown.querySelectorAll('div.cell_input, script, style, mjx-container')) el.remove();
  const source = /(```+|:::+)\s*\{[\w:-]+\}[^\n]{0,60}|^\s*:(label|name|class):[^\n]{0,40}/gm;
  for (const m of shown.textContent.matchAll(source)) {
    problems.push('directive shown as text: ' + snippet(m[0]));
  }
  // A glued value printed as a quoted literal ('17'): {glue} of a string where {glue:text} was meant.
  for (const el of article.querySelectorAll('code, .pasted-inline, .pasted-text')) {
    if (!el.closest('div.cell_input, div.cell_output, pre') && /^(['"])[-+−\d.,%x ]+\1$/.test(el.textContent.trim())) {
      problems.push('glued value printed as a quoted literal: ' + el.textContent.trim() + ' in: '
                    + snippet(el.parentElement.textContent));
    }
  }
  // The work tracker, which readers never saw ("issue 23", "#32"; an issue of a journal is fine).
  for (const m of article.textContent.matchAll(/.{0,40}(\b[Ii]ssues?\b(?! of)|(?<![\w&])#\d+\b).{0,40}/g)) {
    problems.push('names the work tracker: ' + snippet(m[0]));
  }
  // A wall of check lines: five or more "holds: ... | margin ..." lines in a row in one output.
  for (const el of article.querySelectorAll('div.cell_output pre, div.output pre')) {
    let run = 0, longest = 0;
    for (const line of el.textContent.split('\n')) {
      run = /^(holds|FAILS): .*\| margin \S+\s*$/.test(line) ? run + 1 : 0;
      longest = Math.max(longest, run);
    }
    if (longest >= 5) problems.push(`${longest} check lines printed in a row (show them with report.ledger()): `
                                    + snippet(el.textContent));
  }
  // Every figure has a caption: an image (or inline SVG) that no figure with a non-empty caption holds.
  for (const img of article.querySelectorAll('img, div.cell_output svg')) {
    if (img.closest('mjx-container, summary, button, a.reference')) continue;
    const caption = img.closest('figure') && img.closest('figure').querySelector('figcaption');
    if (!caption || !caption.textContent.trim()) {
      problems.push('figure without a caption: ' + (img.getAttribute('src') || img.tagName.toLowerCase()));
    }
  }
  // No page scrolls sideways at this width.
  const page = document.scrollingElement || document.documentElement;
  if (page.scrollWidth > window.innerWidth) {
    problems.push(`the page scrolls sideways (${page.scrollWidth} > ${window.innerWidth} px)`);
  }
  // M2: a display formula wider than its box, whether it scrolls or not (split it with aligned or \\).
  for (const c of article.querySelectorAll('mjx-container[display="true"]')) {
    const glyphs = c.querySelector('mjx-math');
    if (!glyphs || folded(c)) continue;
    const width = glyphs.getBoundingClientRect().width;
    if (width > c.clientWidth + 1) {
      problems.push(`display formula wider than its box (${Math.round(width)} > ${c.clientWidth} px; split it): `
                    + snippet(c.textContent));
    }
  }
  // M1: a result's title with its number buried in the name: "Lemma (Jacobian (Lemma C.2))", where the number
  // of the block's own kind opens a parenthesis or follows a comma ("of Theorem C.3" is a name, not a number).
  const kind = new RegExp('^(' + types.slice(0, 15).join('|') + ')\\s*\\((.*)\\)$');
  for (const t of article.querySelectorAll('div.proof p.admonition-title')) {
    const text = t.textContent.replace(/\s+/g, ' ').trim();
    const m = text.match(kind);
    const own = m && new RegExp('(^|[(,])\\s*(?:[A-Z][\\w\'’-]+(?: et al\\.)?,\\s*)?' + m[1]
                                + 's?\\s+(?:[A-Z]\\.?)?\\d').test(m[2]);
    if (own) problems.push(`result title buries its number (write "${m[1]} N (name)"): ` + snippet(text));
  }
  // S4: the Colab install cell shows as a one-line note, never as code.
  for (const el of article.querySelectorAll('div.cell_input, pre')) {
    if (el.textContent.includes("# Colab: installs this book's package")) {
      problems.push('the Colab install cell is shown as code (_ext/colab_cell.py shows a note instead)');
    }
  }
  const note = article.querySelector('p.colab-note');
  // S2, S3: the page's length and where its first figure starts, measured in the page (px from the top).
  const top = (el) => el.getBoundingClientRect().top + window.scrollY;
  const figures = [...article.querySelectorAll('img, div.cell_output svg, figure svg')].filter((el) =>
    !el.closest('mjx-container, summary, button, a.reference, .headerlink') && !folded(el)
    && el.getBoundingClientRect().width >= 100);
  const metrics = {height: document.documentElement.scrollHeight,
                   first_figure: figures.length ? Math.round(Math.min(...figures.map(top))) : null};
  // The reading text, block by block, for the checks of prose_problems(): prose, captions, table headers and
  // cells, result titles, and printed outputs apart. A formula becomes U+E000 and a code span U+E001 (neither
  // is read), a cross-reference's text is marked; code cells are left out.
  const reading = article.cloneNode(true);
  for (const el of reading.querySelectorAll('div.cell_input, script, style, a.headerlink, button')) el.remove();
  for (const el of reading.querySelectorAll('mjx-container')) el.replaceWith(' \uE000 ');
  // a cross-reference's text (not a citation's) between U+E002 and U+E003
  for (const a of reading.querySelectorAll('a.reference.internal:not([href*="references.html#"])')) {
    a.prepend('\uE002');
    a.append('\uE003');
  }
  const printed = [...reading.querySelectorAll('div.cell_output pre, div.output pre')].map((el) => el.textContent);
  for (const el of reading.querySelectorAll('pre')) el.remove();
  for (const el of reading.querySelectorAll('code')) el.replaceWith(' \uE001 ');
  const blocks = 'p, li, dt, dd, th, td, caption, figcaption, h1, h2, h3, h4, h5, h6, summary';
  const texts = [];
  for (const el of reading.querySelectorAll(blocks)) {
    if (el.querySelector(blocks)) continue;  // its innermost blocks are read instead
    const where = el.closest('th') ? 'header' : el.closest('td') ? 'cell' : el.closest('caption, figcaption')
      ? 'caption' : el.closest('.admonition-title') ? 'title' : 'prose';
    texts.push([where, el.textContent.replace(/\s+/g, ' ').trim()]);
  }
  texts.push(...printed.map((text) => ['output', text]));
  const links = [...document.querySelectorAll('a[href]')].map((a) => a.href);
  const images = [...article.querySelectorAll('img')].map((img) => img.src);
  return JSON.stringify({problems, links, images, metrics, texts, note: note ? note.textContent.trim() : null});
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
    metrics: dict = field(default_factory=dict)
    texts: list[tuple[str, str]] = field(default_factory=list)
    note: str | None = None


def _visit(cdp: CDP, url: str, origin: str) -> Visit:
    cdp.events.clear()
    deadline = time.monotonic() + PAGE_TIMEOUT_S
    cdp.send("Page.navigate", url=url)
    cdp.wait_for("Page.loadEventFired", deadline)
    cdp.evaluate("window.MathJax && MathJax.startup ? MathJax.startup.promise.then(() => true) : false")
    report = json.loads(cdp.evaluate(CHECK_PAGE_JS))
    visit = Visit(problems=report["problems"], links=report["links"], images=report["images"],
                  metrics=report["metrics"], texts=[tuple(t) for t in report["texts"]], note=report["note"])
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


def _screenshot(cdp: CDP, page: str) -> None:
    """The whole page at 1280 px, top to bottom, in ``_build/screens/<page path with '-'>.png``: the window is
    made as tall as the page for the shot, then set back."""
    SCREENS.mkdir(parents=True, exist_ok=True)
    height = min(int(cdp.evaluate("document.documentElement.scrollHeight")), SCREENSHOT_MAX_PX)
    cdp.send("Emulation.setDeviceMetricsOverride", width=1280, height=height, deviceScaleFactor=1, mobile=False)
    try:
        shot = cdp.send("Page.captureScreenshot", format="png")
    finally:
        cdp.send("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
    (SCREENS / f"{page.replace('/', '-')}.png").write_bytes(base64.b64decode(shot["data"]))


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
    _screenshot(browser, page)
    problems = visit.problems + _broken_links(visit.links, server, site) + _repeated_figures(visit.images, server, site)
    problems += reading_problems(page, visit)
    assert not problems, f"{page}.html: {len(problems)} problem(s):\n  " + "\n  ".join(problems)


def reading_problems(page: str, visit: Visit) -> list[str]:
    """What ``tests/book/reading_checks.py`` finds in a visited page's text and measures."""
    chapter = (ROOT / page).with_suffix(".ipynb").exists()
    return (prose_problems(visit.texts, CHAPTER_NUMBERS)
            + layout_problems(visit.metrics, visit.note, chapter, long_ok=page in LONG_BY_NATURE))


# A page with one planted defect of each kind the page check finds in the layout (Chromium renders it).
PLANTED = """<html><body><article style="width: 600px">
<div class="cell_output"><div class="output"><pre>{table}</pre></div></div>
<div><table class="table"><tr><td>{word}</td><td>verdict</td></tr></table></div>
<div style="overflow: hidden; width: 300px"><span style="white-space: nowrap">{sentence}</span></div>
<p>{markdown}</p>
<p>Of the paper's <span class="pasted-inline"><code class="docutils literal notranslate">'17'</code></span> numbers.</p>
<p>The tenfold the issue asked.</p>
<p>Fixed in #32.</p>
<div class="cell_output"><div class="output"><pre>{checks}</pre></div></div>
<div class="cell_output"><img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=" alt=""></div>
<div style="width: 1500px">a line wider than the window</div>
<p style="width: 200px; font: 16px monospace">aaaaaaaaaaaaaaa {open}(<span class="math"><mjx-container
  style="display: inline-block; width: 150px">x</mjx-container></span>{close}</p>
<p style="width: 200px; font: 16px monospace">{open}<span class="math"><mjx-container
  style="display: inline-block; width: 200px">x</mjx-container></span>.{close} end</p>
<p style="width: 200px; font: 16px monospace">{open}<span class="math"><mjx-container
  style="display: inline-block; width: 190px">n</mjx-container></span> = <span class="pasted-text">8</span>{close}
  end</p>
</article></body></html>"""


def _planted_problems(browser: CDP, page: str) -> list[str]:
    html = base64.b64encode(page.encode()).decode()
    return _visit(browser, f"data:text/html;base64,{html}", "data:").problems


def test_the_page_check_finds_each_planted_defect(browser: CDP) -> None:
    """Each defect a reader would see is reported: a text table wider than its column, a table whose last
    column is off-screen, content cut by a box that hides its overflow, a Markdown table left as text, a
    glued value as a quoted literal, the work tracker named, five check lines in a row, a figure without a
    caption, a page that scrolls sideways at 1280 px, a line broken between a formula and its bracket or
    full stop."""
    table = "\n".join("   ".join(f"{c}{r:>12}" for c in "abcdefghijkl") for r in range(4))
    checks = "\n".join(f"holds: claim {i} | {i} ≤ 10 | margin 0.{i}" for i in range(1, 6))
    page = PLANTED.format(table=table, word="x" * 200, sentence="a sentence cut at the edge " * 10,
                          markdown="| claim | verdict | |---|---| | a | holds |", checks=checks, open="", close="")
    problems = _planted_problems(browser, page)
    for kind in ("text table wider than its column", "table wider than its column", "content clipped by div",
                 "Markdown table left as text", "glued value printed as a quoted literal: '17'",
                 "names the work tracker: The tenfold the issue asked", "names the work tracker: Fixed in #32",
                 "5 check lines printed in a row", "figure without a caption: data:image/gif",
                 "the page scrolls sideways", 'a line breaks between "(" and its formula',
                 'a line breaks between a formula and the "." after it',
                 'a line breaks inside "formula = value"'):
        assert any(p.startswith(kind) for p in problems), f"{kind!r} not reported; got {problems}"
    clean = PLANTED.format(table="a  b", word="x", sentence="short", markdown="",
                           checks="holds: one | 1 ≤ 2 | margin 0.5", open='<span style="white-space: nowrap">',
                           close="</span>")
    clean = re.sub(r"<p>(Of the|The tenfold|Fixed in).*?</p>|<div class=\"cell_output\"><img.*?</div>|"
                   r"<div style=\"width: 1500px\">.*?</div>", "", clean, flags=re.S)
    assert _planted_problems(browser, clean) == []


# A page with one planted defect of each kind of STYLE.md's machine-checkable rules (reading_checks.py): in the
# prose, a table, a caption, a printed output, a formula, a result's title, the Colab cell, the length and the first
# figure. Its good twin writes each the way the rules ask (math, a citation, a URL, an interval: nothing found).
READING_PLANTED = """<html><body><article style="width: 672px">
<h1>A chapter</h1>
<p>{prose}</p>
<table class="table"><tr><th>{header}</th><th>verdict</th></tr><tr><td>{cell}</td><td>yes</td></tr></table>
<div style="height: {gap}px"></div>
<figure><img src="data:image/svg+xml;base64,{svg}" width="300" height="100"><figcaption>{caption}</figcaption></figure>
<div class="cell_output"><div class="output"><pre>{output}</pre></div></div>
<div class="math"><mjx-container display="true" style="display: block; overflow-x: auto"><mjx-math
  style="display: inline-block; width: {formula}px">x</mjx-math></mjx-container></div>
<div class="proof lemma admonition"><p class="admonition-title"><span class="caption-number">Lemma </span>{title}</p>
</div>
{colab}
<div style="height: {tail}px"></div>
</article></body></html>"""
SVG = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg" width="300" height="100"><rect width="300" '
                       b'height="100" fill="teal"/></svg>').decode()
BAD_PROSE = ("The corrected Theorem 4.4, corrected, holds for the the tokens: set prof.per_length to {'a': 1} and "
             "kind=\"head\" (commit 23b0ba5+dirty). Of the nine runs, 0 pass and 1 hold trivially; the value(s) "
             "grow by a factor e^x with x = 2006, 4.8 x faster, as chapters 72/73 and chapter 3 show. Our LayerNorm "
             "version <a class=\"reference internal\" href=\"#x\">our LayerNorm absorption</a> holds at the lengths of "
             "<a class=\"reference internal\" href=\"#y\">The bound on real text</a>.")
GOOD_PROSE = ("The corrected bound of Theorem 4.4 holds for the tokens <mjx-container>x_i</mjx-container> of "
              "<a class=\"reference internal\" href=\"#x\">the first chapter</a> in the interval [0.29, 0.32] "
              "(F(3, 45) = 2.5, 0 = 0 exactly): no runs pass, one holds trivially and layer 0 holds, 4.8 times "
              "faster, <code>prof.per_length</code> as <a class=\"reference internal\" href=\"references.html#id1\">"
              "Kim et al. [2021]</a> and https://github.com/lipnb/x_y.git show; the values 0.5 and 0.7.")
COLAB_CELL = ("<div class=\"cell_input\"><pre># Colab: installs this book's package there (nothing happens elsewhere)."
              "</pre></div>")
COLAB_NOTE = ("<p class=\"colab-note\">Run it on Colab (the rocket button at the top): the first cell installs the "
              "package; its last recorded run took about 45 s on a CPU with 2 cores.</p>")


def _reading_problems_of(browser: CDP, page: str) -> list[str]:
    """Every problem the browser test reports for planted ``page`` as a chapter's page."""
    html = base64.b64encode(page.encode()).decode()
    visit = _visit(browser, f"data:text/html;base64,{html}", "data:")
    return visit.problems + prose_problems(visit.texts, CHAPTER_NUMBERS) + layout_problems(visit.metrics,
                                                                                             visit.note, True)


def test_the_reading_checks_find_each_planted_defect(browser: CDP) -> None:
    """Every kind of reading_checks.KINDS fires on the planted page, with the Colab cell shown as code; its good
    twin shows none (formulas, code spans, citations, URLs, intervals and indices are not read as defects)."""
    bad = READING_PLANTED.format(
        prose=BAD_PROSE, header="lof_p", cell="True", gap=2600, svg=SVG,
        caption="the values (0.5, 0.7) of gpt2-random, within 3e-07",
        output="{'minilm': 3}", formula=900, title=" (Jacobian of self-attention (Lemma C.2))", tail=8000,
        colab=COLAB_CELL,
    )
    problems = _reading_problems_of(browser, bad)
    found = {kind_of(p) for p in problems} - {None}
    missing = [k for k in KINDS if k not in found and k != "no Colab note"]
    assert not missing, f"not reported: {missing}; got\n  " + "\n  ".join(problems)
    assert any(p.startswith("the Colab install cell is shown as code") for p in problems), problems
    assert any(p.startswith("no Colab note") for p in problems), problems
    assert any("chapters 72/73" in p and "file number" in p for p in problems), problems
    good = READING_PLANTED.format(
        prose=GOOD_PROSE, header="p-value", cell="yes", gap=0, svg=SVG,
        caption="a curve of random GPT-2, within 3 × 10⁻⁷", output="profile: quick",
        formula=300, title='<span class="proof-number">C.2</span> (Jacobian of self-attention)', tail=100,
        colab=COLAB_NOTE,
    )
    assert _reading_problems_of(browser, good) == []


def _sphinx_page(tmp_path: Path, extensions: list[str]) -> Path:
    """A one-page Sphinx site with three sphinx-proof blocks and references to them, built with ``extensions``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "conf.py").write_text(f"import sys\nsys.path.insert(0, {str(ROOT / '_ext')!r})\n"
                                      f"extensions = {['myst_parser', 'sphinx_proof', *extensions]!r}\n")
    (tmp_path / "index.md").write_text(
        "# A page\n\n```{prf:lemma} Jacobian of self-attention (Lemma C.2)\n:nonumber:\n:label: lemma-c2\n\n"
        "The differential.\n```\n\n```{prf:proposition} masked lower bound (this book)\n:nonumber:\n"
        ":label: prop-masked\n\nA bound.\n```\n\n```{prf:theorem} Dot-product attention is not Lipschitz "
        "(Kim et al., Theorem 3.1)\n:nonumber:\n:label: thm-kim\n\nNo bound.\n```\n\n"
        "See {prf:ref}`lemma-c2`, {prf:ref}`the proposition <prop-masked>` and {prf:ref}`thm-kim`.\n")
    sphinx = Path(sys.executable).with_name("sphinx-build")
    done = subprocess.run([str(sphinx) if sphinx.exists() else "sphinx-build", "-q", "-b", "html", str(tmp_path),
                           str(tmp_path / "_out")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return tmp_path / "_out" / "index.html"


def test_result_titles_put_the_paper_number_first(browser: CDP, tmp_path: Path) -> None:
    """sphinx-proof alone buries the paper's number ("Lemma (Jacobian of self-attention (Lemma C.2))") and prints
    a bare "Lemma" for a reference without text: the page check reports both. With _ext/proof_titles.py the
    titles read "Lemma C.2 (Jacobian of self-attention)", "Proposition (masked lower bound, this book)",
    "Theorem 3.1 of Kim et al. (Dot-product attention is not Lipschitz)", and the reference "Lemma C.2"."""
    buried = _visit(browser, _sphinx_page(tmp_path / "plain", []).as_uri(), "file://").problems
    assert any(p.startswith("result title buries its number") and "(Lemma C.2))" in p for p in buried), buried
    assert any(p.startswith('cross-reference prints a bare "Lemma"') for p in buried), buried
    page = _sphinx_page(tmp_path / "retitled", ["proof_titles"])
    assert _visit(browser, page.as_uri(), "file://").problems == []
    titles = [" ".join(unescape(re.sub(r"<[^>]+>", "", t)).split())
              for t in re.findall(r'<p class="admonition-title"[^>]*>(.*?)</p>', page.read_text())]
    assert titles == ["Lemma C.2 (Jacobian of self-attention)", "Proposition (masked lower bound, this book)",
                      "Theorem 3.1 of Kim et al. (Dot-product attention is not Lipschitz)"]
    assert '<a class="reference internal" href="#lemma-c2">Lemma C.2</a>' in page.read_text()


def test_the_page_check_finds_a_directive_shown_as_text(browser: CDP) -> None:
    """Chapter 15's lemma before the fix: a backtick fence whose title holds a role is no fence, so the page
    shows "```{prf:lemma}" as text and the proof as a block of LaTeX source. Rendered by MyST here."""
    from docutils.core import publish_string
    from myst_parser.parsers.docutils_ import Parser

    source = ("```{prf:lemma} The maximum of {eq}`eq-lambert` is at equal distances\n"
              ":label: lemma-lambert-equal\n\nOn $[0, \\infty)$ the supremum is attained.\n```\n\n"
              "```{prf:proof}\nBy induction on $N$.\n```\n")
    html = publish_string(source, parser=Parser(), writer_name="html5", settings_overrides={
        "myst_enable_extensions": ["colon_fence", "dollarmath"], "report_level": 5, "output_encoding": "unicode"})
    body = html[html.index("<body>") + 6:html.index("</body>")]
    problems = _planted_problems(browser, f"<html><body><article>{body}</article></body></html>")
    shown = [p for p in problems if p.startswith("directive shown as text")]
    assert any("```{prf:lemma} The maximum of" in p for p in shown), problems
    assert any("```{prf:proof}" in p for p in shown), problems
    fixed = source.replace("```{prf:lemma}", ":::{prf:lemma}").replace("attained.\n```", "attained.\n:::")
    assert "```{prf:lemma}" not in fixed and fixed.count(":::") == 2


def _make_targets(makefile: str) -> set[str]:
    phony = re.findall(r"^\.PHONY:(.*)$", makefile, re.M)
    return set(" ".join(phony).split()) | set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", makefile, re.M))


_UNITS_S = {"s": 1, "sec": 1, "second": 1, "seconds": 1, "min": 60, "minute": 60, "minutes": 60, "h": 3600,
            "hour": 3600, "hours": 3600}
_TIMING = re.compile(r"`make ([\w-]+)` (?:takes|runs in|needs|lasts) about (\d+|a|an|one) ?([a-z]+)\b")


def prose_disagreements(makefile: str, prose: dict[str, str], root: Path) -> list[str]:
    """What ``prose`` (file name -> text) says about the build that the Makefile or the repository denies:
    a `make` target it does not define, two durations for one target (prose and the Makefile's comments),
    a pinned version other than the Makefile's, a path that does not exist (nor is made by the build)."""
    targets, found = _make_targets(makefile), []
    durations: dict[str, set[tuple[float, str]]] = {}
    comments = "\n".join(line for line in makefile.splitlines() if line.lstrip().startswith("#"))
    pins = dict(re.findall(r"([A-Za-z][\w.-]*)==([\w.]*\w)", makefile))
    for name, text in {**prose, "Makefile": comments}.items():
        for m in re.finditer(r"(?:`|^)make ((?:[a-z][\w-]*)(?: [a-z][\w-]*)*)", text, re.M):
            found += [f"{name}: `make {t}`: no such target in the Makefile" for t in m[1].split() if t not in targets]
        for target, amount, unit in _TIMING.findall(text):
            if unit in _UNITS_S:
                seconds = (1 if amount in ("a", "an", "one") else float(amount)) * _UNITS_S[unit]
                durations.setdefault(target, set()).add((seconds, f"{name}: about {amount} {unit}"))
        for package, version in re.findall(r"([A-Za-z][\w.-]*)==([\w.]*\w)", text):
            if name != "Makefile" and package in pins and pins[package] != version:
                found.append(f"{name}: {package}=={version}, the Makefile installs {package}=={pins[package]}")
        for path in re.findall(r"`(\.{0,2}/?[\w.-]+/[^`\s]*)`", text):
            if name == "Makefile" or "://" in path:
                continue
            if path.startswith("../") or path.startswith("_build/"):
                head = "/".join(path.split("/")[:2])
                if head not in makefile and head != str(SCREENS.relative_to(ROOT)):
                    found.append(f"{name}: `{path}`: made by no Makefile rule (nor by this test)")
            elif not list(root.glob(re.sub(r"<[^>]+>|NN_name|NN|\*", "*", path).rstrip("/") or ".")):
                found.append(f"{name}: `{path}`: no such path in the repository")
    for target, claims in sorted(durations.items()):
        if len({seconds for seconds, _ in claims}) > 1:
            found.append(f"`make {target}` takes different times: " + "; ".join(sorted(c for _, c in claims)))
    return found


def test_prose_agrees_with_the_makefile() -> None:
    """README and the introduction name only real make targets, paths and pins, and one duration per target."""
    prose = {name: (ROOT / name).read_text() for name in PROSE_ABOUT_THE_BUILD}
    found = prose_disagreements((ROOT / "Makefile").read_text(), prose, ROOT)
    assert not found, "prose disagrees with the Makefile:\n  " + "\n  ".join(found)


def test_the_readme_says_how_long_each_step_takes() -> None:
    """The first install, the book and both test runs each have one measured duration in README.md."""
    stated = {target for target, _, unit in _TIMING.findall((ROOT / "README.md").read_text()) if unit in _UNITS_S}
    missing = {"install", "book", "test", "test-portable"} - stated
    assert not missing, f"README.md gives no duration for: {sorted(missing)} (write `make X` takes about N s)"


def test_the_makefile_check_finds_planted_disagreements() -> None:
    makefile = (ROOT / "Makefile").read_text()
    planted = {"README.md": "`make book` takes about 15 s; `make docs` builds it. Install torch==2.0.0.\n"
                            "Outputs land in `_build/pdf/book.pdf`; the code is in `lipnb/nowhere.py`.",
               "book/intro.md": "`make book` takes about a minute."}
    found = "\n".join(prose_disagreements(makefile + "\n# `make book` takes about 15 s\n", planted, ROOT))
    for expected in ("`make docs`: no such target", "torch==2.0.0, the Makefile installs torch==2.13.0",
                     "`_build/pdf/book.pdf`: made by no Makefile rule", "`lipnb/nowhere.py`: no such path",
                     "`make book` takes different times"):
        assert expected in found, f"{expected!r} not reported:\n{found}"


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
