"""The built site as a reader sees it: each page rendered in headless Chromium (tools/check_site.py).

The site is served from 127.0.0.1 by a throwaway HTTP server; every request to any other address
is blocked (and reported), so a page that still needs a CDN fails here exactly as it would offline.
After the page has loaded, MathJax has finished and the widgets have been drawn, the page's visible
text is read (``innerText``, so what a reader sees, line by line) with code, program output and
typeset maths taken out, and searched for what should have been rendered and was not.

Chromium is the operating system's package (``apt-get install chromium``), or a Chrome already on
the machine; Playwright only drives it, nothing downloads a browser. The launch flags are the
browser test's (tests/browser/lab.py).
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

# The OS's Chromium; else a Chrome already installed (as on GitHub's runners); $CHROMIUM wins.
KNOWN_BROWSERS = (
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
    r"C:\Program Files\Google\Chrome\Application\chrome.exe",
)
CHROMIUM = (
    os.environ.get("CHROMIUM")
    or shutil.which("chromium")
    or shutil.which("chromium-browser")
    or shutil.which("google-chrome")
    or next((b for b in KNOWN_BROWSERS if Path(b).is_file()), "/usr/bin/chromium")
)
CHROMIUM_ARGS = [  # without the networking flags Chromium keeps calling home
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
PAGE_TIMEOUT_MS = 60_000
WIDGET_TIMEOUT_MS = 30_000

# What to look for in the visible text once code, outputs and typeset maths are removed.
RAW_MATHS = [
    (re.compile(r"(?<![\\$\w])\$(?=[^\s$])[^$\n]*?(?<=[^\s\\$])\$(?!\w)"), "$...$"),
    (re.compile(r"\$\$"), "$$"),
    (re.compile(r"\\[()\[\]]"), r"\( \) \[ \]"),
    (re.compile(r"\\[A-Za-z]{2,}"), "a TeX command"),
]
RAW_MARKDOWN = [
    (re.compile(r"^\s*#{1,6}\s+\S", re.M), "a '#' heading"),
    (re.compile(r"^\s*\|.*\|\s*$|\|\s*:?-{3,}:?\s*\|", re.M), "a table row in pipes"),
    (re.compile(r"\*\*(?=\S)|(?<=\S)\*\*"), "'**' emphasis"),
    (re.compile(r"(?<!\w)__(?=\S)"), "'__' emphasis"),
    (re.compile(r"`[^`\n]+`"), "backtick code"),
    (re.compile(r"\[[^\]\n]+\]\([^)\s]+\)"), "a [text](link)"),
    (re.compile(r"^\s*(?:[-*+]|\d+\.)\s+\S", re.M), "a list marker"),
]

# Wait for MathJax's first typeset and for every saved widget view to be drawn (or a timeout).
SETTLE_JS = """async (timeout) => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  const views = () => [...document.querySelectorAll(
      'script[type="application/vnd.jupyter.widget-view+json"]')];
  const drawn = (v) => { const p = v.previousElementSibling;
      return p && p.classList.contains('widget-subarea') && p.querySelector('.jupyter-widgets'); };
  const end = Date.now() + timeout;
  while (views().some(v => !drawn(v)) && Date.now() < end) await new Promise(r => setTimeout(r, 200));
  await Promise.all([...document.images].map(i => i.complete ? null
      : new Promise(r => { i.onload = i.onerror = r; })));
  return [views().length, views().filter(v => !drawn(v)).length];
}"""
# What is left to read once code, program output and typeset maths are taken out (destructive:
# runs after the screenshot).
READ_JS = """() => {
  const merrors = [...document.querySelectorAll('mjx-merror')].map(
      e => e.getAttribute('data-mjx-error') || e.textContent);
  const maths = document.querySelectorAll('mjx-container').length;
  const brokenImages = [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).length;
  document.querySelectorAll('script, style, pre, code, kbd, samp, textarea, svg, math, '
      + 'mjx-container, .jp-InputArea-editor, .jp-InputPrompt, .jp-OutputPrompt, .jp-RenderedText'
      ).forEach(e => e.remove());  // markdown cells are .jp-InputArea too: only the editor goes
  const text = document.body ? document.body.innerText : '';
  // Headings may start with a number ("1. Where the memory goes"): no list marker is sought there.
  document.querySelectorAll('h1, h2, h3, h4, h5, h6, .course-side, .course-nav').forEach(
      e => e.remove());
  return {merrors, maths, brokenImages, text, prose: document.body ? document.body.innerText : ''};
}"""


# Widget labels, toggle buttons and drop-down choices whose text does not fit: the browser cuts
# them (an ellipsis) and a reader sees "layer 2 (random, se…". A <select> never overflows, so
# each of its choices is measured in its own font against the width inside its padding.
CUT_JS = """() => {
  const shown = (e) => e.offsetParent !== null;
  const cut = [...document.querySelectorAll('.widget-label, .widget-toggle-button')]
      .filter(e => shown(e) && e.scrollWidth > e.clientWidth + 1).map(e => e.textContent.trim());
  const ctx = document.createElement('canvas').getContext('2d');
  for (const s of document.querySelectorAll('.widget-dropdown select')) {
    if (!shown(s)) continue;
    const st = getComputedStyle(s);
    ctx.font = `${st.fontStyle} ${st.fontWeight} ${st.fontSize} ${st.fontFamily}`;
    const room = s.clientWidth - parseFloat(st.paddingLeft) - parseFloat(st.paddingRight);
    for (const o of s.options) if (ctx.measureText(o.text).width > room) cut.push(o.text);
  }
  return cut;
}"""


def browser_missing() -> str | None:
    """Why pages cannot be rendered here (None when Chromium and Playwright are both present)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the Python package playwright is not installed"
    if not Path(CHROMIUM).is_file():
        return f"no Chromium at {CHROMIUM}"
    return None


def raw_text_problems(text: str, prose: str | None = None) -> list[str]:
    """What in ``text`` (a page's visible text, code removed) is maths or markdown left raw;
    list markers are looked for in ``prose`` (the same text without headings) when given."""
    found = []
    for kind, patterns in (
        ("maths left unrendered", RAW_MATHS),
        ("markdown that did not render", RAW_MARKDOWN),
    ):
        for pattern, what in patterns:
            where = prose if prose is not None and what == "a list marker" else text
            match = pattern.search(where)
            if match:
                line_start = where.rfind("\n", 0, match.start()) + 1
                line_end = where.find("\n", match.end())
                line = where[line_start : line_end if line_end >= 0 else None].strip()
                found.append(f"{kind} ({what}): {line[:120]!r}")
    return found


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no line per request
        pass


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def check_page(
    context,
    origin: str,
    name: str,
    screenshot: Path | None,
    widget_timeout_ms: int = WIDGET_TIMEOUT_MS,
    stats: dict | None = None,
) -> list[str]:
    """Every problem of one page, as rendered; ``stats`` counts what was seen."""
    problems, blocked = [], []
    page = context.new_page()
    page.on(
        "console",
        lambda m: m.type == "error" and problems.append(f"{name}: console error: {m.text[:200]}"),
    )
    page.on("pageerror", lambda e: problems.append(f"{name}: script error: {str(e)[:200]}"))
    page.on(
        "response",
        lambda r: (
            r.status >= 400
            and problems.append(f"{name}: {r.status} for {r.url.removeprefix(origin)}")
        ),
    )
    page.on(
        "requestfailed",
        lambda r: (
            r.url.startswith(origin)
            and problems.append(f"{name}: failed to load {r.url.removeprefix(origin)}")
        ),
    )
    page.route(
        "**/*",
        lambda route: (
            route.continue_()
            if route.request.url.startswith(origin + "/")
            else (blocked.append(route.request.url), route.abort("blockedbyclient"))
        ),
    )
    try:
        page.goto(f"{origin}/{name}", wait_until="load", timeout=PAGE_TIMEOUT_MS)
        views, undrawn = page.evaluate(SETTLE_JS, widget_timeout_ms)
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(screenshot), full_page=True)
        cut = page.evaluate(CUT_JS)
        seen = page.evaluate(READ_JS)
    except Exception as error:  # a page that does not load or settle is itself the problem
        return problems + [f"{name}: did not render: {str(error).splitlines()[0][:200]}"]
    finally:
        page.close()
    problems = [
        p
        for p in problems
        if "blockedbyclient" not in p.lower() and "ERR_BLOCKED_BY_CLIENT" not in p
    ]  # reported once below, by address
    problems += [f"{name}: requested {url[:120]} (outside the site; blocked)" for url in blocked]
    if stats is not None:
        for key, value in (("pages", 1), ("maths", seen["maths"]), ("widgets", views - undrawn)):
            stats[key] = stats.get(key, 0) + value
    if undrawn:
        problems.append(f"{name}: {undrawn} widget(s) not drawn")
    problems += [f"{name}: widget text cut off: {text[:80]!r}" for text in cut]
    if seen["brokenImages"]:
        problems.append(f"{name}: {seen['brokenImages']} image(s) did not load")
    problems += [f"{name}: maths error: {e[:120]!r}" for e in seen["merrors"]]
    problems += [f"{name}: {p}" for p in raw_text_problems(seen["text"], seen["prose"])]
    return problems


def check_rendered(
    site: Path,
    names: list[str] | None = None,
    screenshots: Path | None = None,
    widget_timeout_ms: int = WIDGET_TIMEOUT_MS,
    stats: dict | None = None,
) -> list[str]:
    """Render each page of ``site`` (every .html, or ``names``) in Chromium; list the problems.
    ``stats`` (if given) gets the pages rendered, formulas typeset and widgets drawn."""
    from playwright.sync_api import sync_playwright

    site = site.resolve()
    names = names or sorted(
        p.relative_to(site).as_posix()
        for p in site.rglob("*.html")
        if "_static" not in p.relative_to(site).parts
    )
    server, origin = serve(site)
    problems = []
    try:
        with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
            context = playwright.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": 1280, "height": 900},
                service_workers="block",
            )
            try:
                for name in names:
                    shot = screenshots / (name.replace("/", "__") + ".png") if screenshots else None
                    problems += check_page(context, origin, name, shot, widget_timeout_ms, stats)
            finally:
                context.close()
    finally:
        server.shutdown()
        server.server_close()
    return problems
