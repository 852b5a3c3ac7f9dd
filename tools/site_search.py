"""Full-text search for the static site (tools/build_site.py), offline: Pagefind.

Pagefind (https://pagefind.app, from PyPI: ``pip install 'pagefind[extended]'``, in the ``dev``
and ``site`` extras) reads the built HTML and writes a static index plus its own search UI into
``_site/pagefind/``: JavaScript, CSS, a WebAssembly module and index fragments. The pages load
them from there, so searching needs no hosted service and no network, only an HTTP server
(browsers refuse ``fetch`` from ``file://``): ``python -m http.server -d _site``.

What is indexed: the lectures (each page's ``<main>``) and the guides (their body), marked
``data-pagefind-body``; pages without the mark (exercises, the contents pages) and the sidebar
and navigation bar (they repeat other chapters' titles) are left out, as are the headings' "¶"
anchor links. A result's title is the
page's first heading, its link the page (Pagefind finds the site's root from where its script
was loaded, so the links also work when the site sits in a sub-folder, as on GitHub Pages).

A word in no page finds no page. Two Pagefind defaults made a nonsense word list unrelated
chapters: (1) Pagefind stores a page's first image as searchable metadata, and a notebook's
images are ``data:`` URIs, so the index held tens of thousands of base64 "words" (the figures
are marked ``data-pagefind-ignore="all"``, which leaves them out, metadata too); (2) a word not in
the index is cut back to its longest indexed prefix ("xyzzy" finds "x"; Pagefind has no option
to turn that off, Pagefind/pagefind#780). A quoted term is searched exactly, with no cutting
back (a prefix still finds its longer words: "RoForm" finds "RoFormer"), so the box quotes a
one-word query (``processTerm``); a query of several words is searched as Pagefind does.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

BUNDLE = "pagefind"  # _site/pagefind/
BODY = "data-pagefind-body"
STYLE = """.course-search{max-width:40rem;margin:.4rem 0}
.course-search .pagefind-ui__drawer{background:#fff}"""


def head(depth: str) -> str:
    """The search UI's style sheet and script, for a page ``depth`` ("../") below the root."""
    return (
        f'<link href="{depth}{BUNDLE}/pagefind-ui.css" rel="stylesheet">'
        f'<script src="{depth}{BUNDLE}/pagefind-ui.js"></script><style>{STYLE}</style>'
    )


def box() -> str:
    """The search box (Pagefind's default UI fills the div once the page has loaded)."""
    return (
        '<div id="course-search" class="course-search" role="search"></div>'
        "<script>window.addEventListener('DOMContentLoaded', () => new PagefindUI("
        "{element: '#course-search', showSubResults: true, showImages: false, "
        f"resetStyles: false, processTerm: {PROCESS_TERM}}}));</script>"
    )


# One word (no space, no quote) -> the same word quoted: Pagefind's exact search, no cutting back.
PROCESS_TERM = r"""(t) => /^\s*[^\s"]+\s*$/.test(t) ? '"' + t.trim() + '"' : t"""


def ignore_images(page: str) -> str:
    """Leave a page's figures out of the index (their data: URIs would become searchable)."""
    return page.replace("<img ", '<img data-pagefind-ignore="all" ')


def missing() -> str | None:
    """Why the index cannot be built here (None when Pagefind is installed)."""
    if importlib.util.find_spec("pagefind") is None:
        return (
            "the Python package pagefind is not installed: pip install -e '.[site]' "
            "(or '.[dev]'; it is pagefind[extended] from PyPI)"
        )
    return None


def index(site: Path) -> str:
    """Run Pagefind over ``site``; returns its summary ("Indexed N pages ...")."""
    why = missing()
    if why:
        raise SystemExit(f"build_site: cannot build the search index: {why}")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pagefind",
            "--site",
            str(site),
            "--output-subdir",
            BUNDLE,
            "--exclude-selectors",
            ".anchor-link",
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(
            f"build_site: pagefind failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    lines = [
        line.strip() for line in done.stdout.splitlines() if line.strip().startswith("Indexed")
    ]
    return ", ".join(lines)
