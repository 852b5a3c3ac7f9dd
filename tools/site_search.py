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
        "resetStyles: false}));</script>"
    )


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
