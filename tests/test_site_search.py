"""The static site (tools/build_site.py): offline full-text search (Pagefind), page titles from
each notebook's first heading, and the index's link to the repository's README."""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))  # the tools import each other (site_assets, site_search)

import build_site  # noqa: E402
import site_render  # noqa: E402
import site_search  # noqa: E402

TERM = "RoFormer"  # in chapter 12's prose (RoPE's paper) and in no other lecture or guide
CHAPTER = "12_positions"
BUILT = ["03_self_attention", "06_cross_attention", CHAPTER]  # a few chapters: the test stays quick


def _need(*what: str) -> None:
    """Skip where Chromium/Playwright or Pagefind is absent; on CI (CI=true) fail instead."""
    missing = [
        m
        for m in (
            site_render.browser_missing() if "chromium" in what else None,
            site_search.missing() if "pagefind" in what else None,
        )
        if m
    ]
    if missing:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"required on CI: {'; '.join(missing)}")
        pytest.skip("; ".join(missing))


def _title(page: str) -> str:
    return html.unescape(re.search(r"<title>(.*?)</title>", page).group(1))


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8").lower()


def test_the_term_is_in_exactly_one_lecture_or_guide():
    """The search test's premise, checked on the sources (outputs included)."""
    sources = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + [
        ROOT / g for g in build_site.GUIDES
    ]
    assert [p.stem for p in sources if TERM.lower() in _text(p)] == [CHAPTER]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    _need("pagefind")
    out = tmp_path_factory.mktemp("site")
    build_site.build(out, files=[ROOT / "notebooks" / f"{n}.ipynb" for n in BUILT])
    return out


def test_titles_are_first_headings_and_pages_are_marked_for_search(site):
    for name in BUILT:
        page = (site / "notebooks" / f"{name}.html").read_text(encoding="utf-8")
        want = build_site.title_of(ROOT / "notebooks" / f"{name}.ipynb")
        assert want != name and _title(page) == want
        assert "<main data-pagefind-body>" in page and 'id="course-search"' in page
    assert (site / "pagefind" / "pagefind-ui.js").is_file()


def test_guide_titles_and_the_index_links_the_readme(tmp_path):
    """A guide's <title> is its first heading; the full index links the README (no URL of the
    repository is recorded, so none is invented), and a partial build without it links nothing."""
    pages: set[Path] = set()
    guide = build_site.render_guide(ROOT / "docs" / "grading.md", tmp_path, pages)
    title = _title(guide.read_text(encoding="utf-8"))
    assert (
        title == build_site.first_heading((ROOT / "docs" / "grading.md").read_text()) != "grading"
    )
    full = build_site.index_page([], list(build_site.GUIDES))
    assert "<a class='course-repo' href='README.html'>the repository (its README)</a>" in full
    assert "course-repo" not in build_site.index_page([], [])


@contextlib.contextmanager
def _search_page(site: Path):
    """The site's index page in headless Chromium, every request to another host aborted (the
    aborted URLs are checked to be none on the way out)."""
    _need("chromium")
    from playwright.sync_api import sync_playwright

    server, origin = site_render.serve(site)
    outside = []

    def only_local(route):
        if urlparse(route.request.url).hostname in ("127.0.0.1", "localhost"):
            return route.continue_()
        outside.append(route.request.url)
        return route.abort()

    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=site_render.CHROMIUM, headless=True, args=site_render.CHROMIUM_ARGS
            )
            try:
                page = browser.new_page()
                page.route("**/*", only_local)
                page.goto(f"{origin}/index.html")
                yield page
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()
    assert outside == []


def _results(page, term: str):
    """Type ``term`` in the box; the result list once Pagefind has answered (one item per page)."""
    page.fill("#course-search input", term)
    page.locator(".pagefind-ui__message").first.wait_for(
        timeout=20_000
    )  # "N results" / "No results"
    page.wait_for_timeout(500)  # Pagefind shows results as they load
    return page.locator("li.pagefind-ui__result")


@pytest.mark.chromium
def test_search_finds_the_one_chapter_offline(site):
    """Typing a term that appears in one chapter shows that chapter alone, and its result opens
    the chapter's page; the term's first letters find it too (search as you type)."""
    with _search_page(site) as page:
        assert _results(page, TERM[:-2]).count() == 1  # "RoForm": a prefix still finds it
        results = _results(page, TERM)
        assert results.count() == 1, results.all_inner_texts()
        links = results.first.locator(".pagefind-ui__result-link")
        assert links.first.inner_text() == build_site.title_of(
            ROOT / "notebooks" / f"{CHAPTER}.ipynb"
        )
        assert "¶" not in "".join(links.all_inner_texts())  # headings' anchors: not indexed
        links.first.click()
        page.wait_for_url(f"**/notebooks/{CHAPTER}.html*", wait_until="commit")
    assert json.loads((site / "pagefind" / "pagefind-entry.json").read_text())["version"]


# Words in no lecture or guide (checked below): Pagefind cut each back to a prefix it had indexed
# ("x", "sn", "as"), or matched it in a figure's base64 data, and listed unrelated chapters.
NONSENSE = ["xyzzy", "snorkelwax", "asdfgh", "blorfing", "frobnicate", "qwertyuiop"]


def test_the_nonsense_words_are_in_no_page():
    sources = [
        *(ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"),
        *(ROOT / g for g in build_site.GUIDES),
    ]
    assert [w for p in sources for w in NONSENSE if w in _text(p)] == []


@pytest.mark.chromium
def test_a_nonsense_word_finds_no_page(site):
    with _search_page(site) as page:
        for word in NONSENSE:
            assert _results(page, word).count() == 0, (word, _results(page, word).all_inner_texts())


def test_figures_are_left_out_of_the_index(site):
    """Pagefind would store a page's first image, a data: URI, as searchable metadata."""
    for name in BUILT:
        page = (site / "notebooks" / f"{name}.html").read_text(encoding="utf-8")
        images = re.findall(r"<img [^>]*>", page)
        assert images and all('data-pagefind-ignore="all"' in img for img in images)
