"""Check the built site (tools/build_site.py): links, images, and what a reader sees in a browser.

    python tools/check_site.py [_site]                 # exit 1 and list every problem
    python tools/check_site.py --static-only [_site]   # only the HTML checks (no Chromium)
    python tools/check_site.py --screenshots DIR       # also a full-page PNG of every page

For every page: each relative ``href``/``src`` must name an existing file (a folder needs an
index.html), each ``#anchor`` an ``id`` on the target page; each ``<img>`` must have a source (a
non-empty ``data:`` URI or an existing file); and each rendered notebook must show as many
images as its notebook has image outputs; no page may load a script or style sheet from outside
the site. External links (http:, mailto:) are not followed.

Then every page is opened in headless Chromium (the OS package, driven by Playwright, as in
tests/browser/), served from 127.0.0.1 with every request outside the site blocked and reported,
and checked as rendered (site_render.py): maths left as raw ``$...$`` / ``\\(...\\)`` or a MathJax
error, markdown that did not render (raw table pipes, ``**``, ``#`` headings, backticks, list
markers, ``[text](link)``), widgets not drawn or their text cut off, images not loaded, script errors, missing files.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))  # site_render.py, next to this file
IMAGE_MIME = ("image/png", "image/jpeg", "image/svg+xml")


class Page(HTMLParser):
    """The links, image sources and ids of one HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.images: list[str] = []
        self.ids: set[str] = set()
        self.outside: list[str] = []  # scripts and style sheets from another host

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if a.get("name") and tag == "a":
            self.ids.add(a["name"])
        if tag == "img":
            self.images.append(a.get("src") or "")
        elif tag in ("a", "link", "script", "iframe") and (a.get("href") or a.get("src")):
            self.links.append(a.get("href") or a.get("src"))
            loads = (
                a.get("src")
                if tag in ("script", "iframe")
                else (a.get("href") if tag == "link" and a.get("rel") != "canonical" else None)
            )
            if loads and loads.startswith(("http:", "https:", "//")):
                self.outside.append(loads)


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def image_outputs(notebook: Path) -> int:
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    return sum(
        1
        for c in nb["cells"]
        if c["cell_type"] == "code"
        for o in c.get("outputs", [])
        if any(m in o.get("data", {}) for m in IMAGE_MIME)
    )


def check(site: Path, stats: dict | None = None) -> list[str]:
    """The HTML checks (no browser): links, anchors, images, scripts from outside the site;
    ``stats`` (if given) gets the number of links and images checked."""
    problems = []
    pages = {p: parse(p) for p in sorted(site.rglob("*.html"))}
    if stats is not None:
        stats["links"] = sum(len(p.links) for p in pages.values())
        stats["images"] = sum(len(p.images) for p in pages.values())
    for path, page in pages.items():
        name = path.relative_to(site).as_posix()
        for link in page.links:
            if link.startswith(("http:", "https:", "mailto:", "data:", "javascript:", "//")):
                continue
            file, _, anchor = link.partition("#")
            target = (path.parent / unquote(file)).resolve() if file else path
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                problems.append(f"{name}: broken link {link!r}")
            elif anchor and target.suffix == ".html":
                ids = pages[target].ids if target in pages else parse(target).ids
                if anchor not in ids and unquote(anchor) not in ids:  # as browsers look it up
                    problems.append(f"{name}: no anchor #{anchor} in {target.name} ({link!r})")
        problems += [f"{name}: loads {url!r} from outside the site" for url in page.outside]
        for src in page.images:
            if src.startswith("data:"):
                payload = src.split(",", 1)[1] if "," in src else ""
                try:
                    ok = (
                        bool(base64.b64decode(payload, validate=False))
                        if ";base64" in src
                        else bool(payload)
                    )
                except ValueError:
                    ok = False
                if not ok:
                    problems.append(f"{name}: empty or undecodable data: image")
            elif src.startswith(("http:", "https:", "//")):
                continue
            elif not src or not (path.parent / unquote(src)).is_file():
                problems.append(f"{name}: missing image {src!r}")
        source = ROOT / Path(name).with_suffix(".ipynb")
        if source.is_file():
            want = image_outputs(source)
            shown = sum(1 for s in page.images if s.startswith("data:image"))
            if shown < want:
                problems.append(
                    f"{name}: {shown} images shown, {source.name} has {want} image outputs"
                )
    if not (site / "index.html").is_file():
        problems.append("index.html is missing")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", nargs="?", type=Path, default=ROOT / "_site")
    parser.add_argument(
        "--static-only",
        action="store_true",
        help="only the HTML checks; skip rendering the pages in Chromium",
    )
    parser.add_argument("--screenshots", type=Path, help="save a full-page PNG of each page here")
    args = parser.parse_args(argv)
    site = args.site
    if not site.is_dir():
        print(f"check_site: no site at {site} (build it: python tools/build_site.py)")
        return 2
    counts: dict[str, int] = {}
    problems = check(site, counts)
    pages = sum(1 for _ in site.rglob("*.html"))
    checks = f"{counts['links']} links and anchors, {counts['images']} images, outside scripts"
    if not args.static_only:
        import site_render

        missing = site_render.browser_missing()
        if missing:
            print(
                f"check_site: cannot render the pages: {missing}. Install it "
                f"(apt-get install chromium; pip install playwright) or pass --static-only"
            )
            return 2
        stats: dict[str, int] = {}
        problems += site_render.check_rendered(site, screenshots=args.screenshots, stats=stats)
        checks += (
            f"; {stats.get('pages', 0)} rendered in Chromium offline: "
            f"{stats.get('maths', 0)} formulas typeset, {stats.get('widgets', 0)} widgets drawn"
        )
    for problem in problems:
        print(f"check_site: {problem}")
    print(f"check_site: {pages} pages ({checks}), {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
