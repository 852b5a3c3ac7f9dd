"""Build the course as a static website in _site/ from the committed notebooks (nothing re-executed).

    python tools/build_site.py [--out _site]        # or: make site (builds, then tools/check_site.py)

    _site/index.html                  table of contents (chapters, exercises, guides)
    _site/notebooks/NN_<topic>.html   each lecture with its committed outputs
    _site/exercises/exNN_<topic>.html each exercise (student copy: tasks and stubs, no solutions)
    _site/exercises/index.html        the exercise list (lectures link to ../exercises/)
    _site/*/NN_<topic>.ipynb          each page's notebook, for its "Download the notebook" link
    _site/_static/                    MathJax, require.js, the widget manager (tools/site_assets.py)

The site needs no network to be read: the maths renderer and the widget manager are copied into
_site/_static/ from pinned npm packages (see tools/site_assets.py), and the pages load them from
there, not from a CDN. Each notebook page has a sidebar: the course contents link, a download link
for its notebook and the page's contents (its headings). That HTML around the notebooks (styles,
titles, the navigation bar, the sidebar, the contents and exercise pages) is tools/site_pages.py's.

Links between notebooks (``.ipynb``) become links between pages (``.html``); other files a notebook
links to (``.md``, ``.py``, data) are copied as they are, so every internal link works offline.

Why nbconvert and not Jupyter Book / MyST: nbconvert comes with JupyterLab, which the course
already installs, so rendering needs no new dependency (search adds Pagefind, one package); it
renders the committed outputs exactly as nbval checked them. Jupyter Book would add a large
dependency tree (Sphinx, myst-nb, a theme) for features (cross-references, PDF) this course does
not use yet.

Search: every page has a search box over the lectures and guides (Pagefind, offline: the index
and its script are written into _site/pagefind/; see tools/site_search.py). Each page's <title>
is its notebook's (or guide's) first heading.

Left out on purpose (Jupyter Book / d2l features): "launch in Binder/Colab" buttons (they
need an outside service and this course runs in its own environment, `make lab`), a PDF book
(needs LaTeX), cross-reference numbering of equations and figures (the chapters do not cite them),
and a framework-wide tab/theme switcher (one light theme, the one JupyterLab shows).
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import site_assets  # noqa: E402  (tools/ is not a package)
import site_search  # noqa: E402
from site_pages import (  # noqa: E402, F401 - names of build_site.py before its split
    HEADING,
    MATHJAX_CONFIG,
    NAV_STYLE,
    REPOSITORY_LINK,
    STYLE,
    TAG,
    exercise_index,
    first_heading,
    head_scripts,
    index_page,
    nav_bar,
    page_contents,
    sidebar,
    title_of,
)

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("notebooks", "exercises")  # rendered; solutions/ (the instructor sources) are not
GUIDES = (
    "README.md",
    "docs/instructor_guide.md",
    "docs/grading.md",
    "docs/reading_the_evidence.md",
    "classroom/README.md",
    "CONTRIBUTING.md",
)
HREF = re.compile(r'(href|src)="([^"]*)"')
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//|#)", re.I)  # http:, data:, mailto:, //, #anchor


def course_files() -> list[Path]:
    """The notebooks that become pages: notebooks/NN_*.ipynb and exercises/exNN_*.ipynb."""
    return sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted(
        (ROOT / "exercises").glob("ex[0-9][0-9]_*.ipynb")
    )


def rewrite_links(page: str, source: Path, out: Path, pages: set[Path]) -> str:
    """Relative links of ``source`` (a repo file): rendered notebooks -> .html; other existing
    repo files are copied into ``out`` at the same relative place; folders -> their index.html."""

    def fix(match: re.Match) -> str:
        attr, link = match.groups()
        if not link or EXTERNAL.match(link):
            return match.group(0)
        path, _, anchor = link.partition("#")
        target = (source.parent / path).resolve()
        if target in pages:
            path = re.sub(r"\.(ipynb|md)$", ".html", path)
        elif target.is_dir() and target.relative_to(ROOT).as_posix() in SECTIONS:
            path = path.rstrip("/") + "/index.html"
        elif target.is_dir() and target / "README.md" in pages:  # a folder -> its README's page
            path = path.rstrip("/") + "/README.html"
        elif target.is_file() and ROOT in target.parents:
            destination = out / target.relative_to(ROOT)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(target, destination)
        return f'{attr}="{html.escape(path, quote=True)}{"#" + anchor if anchor else ""}"'

    return HREF.sub(fix, page)


def render_guide(path: Path, out: Path, pages: set[Path]) -> Path:
    """A markdown guide (instructor guide, CONTRIBUTING, ...) as a plain HTML page."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    body = rewrite_links(markdown2html_mistune(path.read_text(encoding="utf-8")), path, out, pages)
    depth = "../" * (len(path.relative_to(ROOT).parts) - 1)
    page = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title_of(path))}</title><style>{STYLE}{NAV_STYLE}</style>"
        f"{head_scripts(depth)}{site_search.head(depth)}</head>"
        f"<body class='course-page'>{sidebar(body, None, depth)}"
        f"<nav class='course-nav'><a href='{depth}index.html'>Contents</a>{site_search.box()}"
        f"</nav><div class='course-body' {site_search.BODY}>{body}</div></body></html>"
    )
    target = out / path.relative_to(ROOT).with_suffix(".html")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page, encoding="utf-8")
    return target


# nbconvert's lab template, with MathJax 3 from the site instead of MathJax 2 from a CDN, and a code
# cell whose input JupyterLab opens collapsed (jupyter.source_hidden: the chapters' Evidence cells)
# folded the same way: a <details> the reader opens, its output shown.
SITE_TEMPLATE = (
    """{%- extends 'index.html.j2' -%}
{%- block html_head_js_mathjax -%}"""
    + MATHJAX_CONFIG
    + """
<script src="{{ resources.site_static }}"""
    + site_assets.MATHJAX
    + """"></script>
{%- endblock html_head_js_mathjax -%}
{% block input_group -%}
{%- if cell.metadata.get("jupyter", {}).get("source_hidden", false) -%}
<details class="course-evidence"><summary>Show the evidence code</summary>
{{ super() }}
</details>
{%- else -%}
{{ super() }}
{%- endif -%}
{%- endblock input_group %}
"""
)


def exporter(static: str):
    """nbconvert's HTMLExporter (lab template) with every script taken from ``static``."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    return HTMLExporter(
        template_name="lab",
        template_file="site.html.j2",
        extra_loaders=[DictLoader({"site.html.j2": SITE_TEMPLATE})],
        require_js_url=static + site_assets.REQUIREJS,
        widget_renderer_url=static + site_assets.WIDGETS,
        mathjax_url=static + site_assets.MATHJAX,
    )


def render_notebook(path: Path, depth: str) -> str:
    """nbconvert's page for ``path``, its <title> the notebook's first heading (nbconvert's
    default is the file name)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nb.metadata["title"] = title_of(path)
    body, _ = exporter(depth + "_static/").from_notebook_node(
        nb,
        resources={
            "site_static": depth + "_static/",
            "metadata": {"name": path.stem, "path": str(path.parent)},
        },
    )
    return body


def build(out: Path, files: list[Path] | None = None) -> list[Path]:
    """Build the site into ``out`` (all course notebooks and guides, or only ``files``), then
    its search index (tools/site_search.py)."""
    if out.exists():
        shutil.rmtree(out)
    guides = [ROOT / g for g in GUIDES if (ROOT / g).is_file()] if files is None else []
    files = course_files() if files is None else files
    pages = {p.resolve() for p in files} | set(guides)  # links to these become .html links
    site_assets.install(out / "_static")
    written = []
    for i, path in enumerate(files):
        # a notebook from elsewhere (a test's) is placed as a lecture
        relative = path.relative_to(ROOT) if ROOT in path.parents else Path("notebooks", path.name)
        depth = "../" * (len(relative.parts) - 1)
        body = rewrite_links(render_notebook(path, depth), path, out, pages)
        target = out / relative.with_suffix(".html")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, out / relative)  # the download link's target
        top = nav_bar(i, files) + sidebar(body, path.name, depth)
        body = re.sub(
            r"<body([^>]*)>", lambda m, top=top: f"<body{m.group(1)}>" + top, body, count=1
        )
        body = body.replace('<body class="jp-Notebook"', '<body class="jp-Notebook course-page"', 1)
        body = body.replace(
            "</head>", f"<style>{NAV_STYLE}</style>{site_search.head(depth)}</head>", 1
        )
        if relative.parts[0] != "exercises":  # the lectures are searched, the exercises not
            body = site_search.ignore_images(
                body.replace("<main>", f"<main {site_search.BODY}>", 1)
            )
        target.write_text(body, encoding="utf-8")
        written.append(target)
    written += [render_guide(guide, out, pages) for guide in guides]
    guide_names = [g.relative_to(ROOT).as_posix() for g in guides]
    (out / "index.html").write_text(index_page(files, guide_names), encoding="utf-8")
    (out / "exercises").mkdir(parents=True, exist_ok=True)
    (out / "exercises" / "index.html").write_text(exercise_index(files), encoding="utf-8")
    (out / ".nojekyll").write_text("")  # GitHub Pages: serve the files as they are
    print(f"site: search index: {site_search.index(out)}")
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_site")
    args = parser.parse_args()
    written = build(args.out)
    print(f"site: {len(written)} pages + index in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
