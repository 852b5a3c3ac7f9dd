"""Check the built site (tools/build_site.py): no broken internal link, no missing image.

    python tools/check_site.py [_site]        # exit 1 and list every problem

For every page: each relative ``href``/``src`` must name an existing file (a folder needs an
index.html), each ``#anchor`` an ``id`` on the target page; each ``<img>`` must have a source (a
non-empty ``data:`` URI or an existing file); and each rendered notebook must show as many
images as its notebook has image outputs. External links (http:, mailto:) are not followed: the
check runs offline and in a second or two.
"""

from __future__ import annotations

import base64
import json
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
IMAGE_MIME = ("image/png", "image/jpeg", "image/svg+xml")


class Page(HTMLParser):
    """The links, image sources and ids of one HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.images: list[str] = []
        self.ids: set[str] = set()

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


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def image_outputs(notebook: Path) -> int:
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    return sum(1 for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
               if any(m in o.get("data", {}) for m in IMAGE_MIME))


def check(site: Path) -> list[str]:
    problems = []
    pages = {p: parse(p) for p in sorted(site.rglob("*.html"))}
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
        for src in page.images:
            if src.startswith("data:"):
                payload = src.split(",", 1)[1] if "," in src else ""
                try:
                    ok = bool(base64.b64decode(payload, validate=False)) if ";base64" in src else bool(payload)
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
                problems.append(f"{name}: {shown} images shown, {source.name} has {want} image outputs")
    if not (site / "index.html").is_file():
        problems.append("index.html is missing")
    return problems


def main() -> int:
    site = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "_site"
    if not site.is_dir():
        print(f"check_site: no site at {site} (build it: python tools/build_site.py)")
        return 2
    problems = check(site)
    pages = sum(1 for _ in site.rglob("*.html"))
    for problem in problems:
        print(f"check_site: {problem}")
    print(f"check_site: {pages} pages, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
