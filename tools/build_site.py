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
for its notebook and the page's contents (its headings).

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
import json
import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import site_assets  # noqa: E402  (tools/ is not a package)
import site_search  # noqa: E402

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
NAV_STYLE = """.course-nav{font-family:system-ui,sans-serif;padding:.5rem 1rem;background:#f3f3f3;
border-bottom:1px solid #ddd}.course-nav a{margin-right:1.5rem}
.course-side{font-family:system-ui,sans-serif;font-size:.9rem;line-height:1.4;padding:.5rem 1rem;
overflow-wrap:anywhere}
.course-side ul{list-style:none;padding-left:0;margin:.3rem 0}.course-side li.toc-3{padding-left:1rem}
.course-side a{text-decoration:none}.course-side h2{font-size:.95rem;margin:.8rem 0 .2rem}
.course-download{display:inline-block;margin:.3rem 0;padding:.2rem .5rem;border:1px solid #bbb;
border-radius:4px}
@media (min-width:70rem){.course-side{position:fixed;top:0;left:0;bottom:0;width:16rem;
overflow-y:auto;border-right:1px solid #ddd;background:#fafafa}
body.course-page>main,body.course-page>.course-nav,body.course-page>.course-body{margin-left:18rem}}
details.course-evidence>summary{cursor:pointer;padding-left:5.5rem;font:.9rem system-ui,sans-serif;color:#555}"""
# MathJax 3 with the settings nbconvert gives MathJax 2 ($...$ and \\(...\\) inline, AMS numbering).
# The widget manager typesets widget labels with MathJax 2's call, MathJax.Hub.Queue(["Typeset",
# MathJax.Hub, element]): the ready hook maps that one call onto MathJax 3's typesetPromise.
MATHJAX_CONFIG = r"""<script>window.MathJax = {
  tex: {inlineMath: [['$', '$'], ['\\(', '\\)']], displayMath: [['$$', '$$'], ['\\[', '\\]']],
        processEscapes: true, processEnvironments: true, tags: 'ams'},
  chtml: {displayAlign: 'center'},
  startup: {ready: () => {
    MathJax.startup.defaultReady();
    MathJax.Hub = {Queue: (job) => Array.isArray(job) && job[0] === 'Typeset'
      && MathJax.startup.promise.then(() => MathJax.typesetPromise(job[2] ? [job[2]] : undefined))};
  }}
};</script>"""
HEADING = re.compile(r'<h([1-3]) id="([^"]+)">(.*?)<a class="anchor-link"', re.S)
TAG = re.compile(r"<[^>]+>")
STYLE = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;
line-height:1.5}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3rem .6rem}"""


# No repository URL is recorded in the repository (pyproject.toml has no [project.urls]; the
# placeholder in classroom/autograde.yml is an example): the index links to the README, rendered
# as one of the guides, instead of inventing a URL.
REPOSITORY_LINK = "README.md"


def first_heading(markdown: str) -> str | None:
    """The first '#' heading of a markdown text, without the '#'s."""
    for line in markdown.splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return None


def title_of(path: Path) -> str:
    """The notebook's (or markdown guide's) first heading, without the '#'s (else the file name)."""
    if path.suffix == ".md":
        return first_heading(path.read_text(encoding="utf-8")) or path.stem
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "markdown" and (title := first_heading("".join(cell["source"]))):
            return title
    return path.stem


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


def nav_bar(index: int, files: list[Path]) -> str:
    """Previous / contents / next links, inserted at the top of each page."""
    here = files[index]
    links = ['<a href="../index.html">Contents</a>']
    for label, other in (("← previous", index - 1), ("next →", index + 1)):
        if 0 <= other < len(files) and files[other].parent == here.parent:
            links.append(
                f'<a href="{files[other].stem}.html">{label}: '
                f"{html.escape(title_of(files[other]))}</a>"
            )
    return f'<nav class="course-nav">{"".join(links)}{site_search.box()}</nav>'


def index_page(files: list[Path], guides: list[str]) -> str:
    """The table of contents: one row per chapter with its exercise, then the guides."""
    exercises = {p.name[2:4]: p for p in files if p.parent.name == "exercises"}
    repository = (
        f"<a class='course-repo' href='{Path(REPOSITORY_LINK).with_suffix('.html')}'>"
        f"the repository (its README)</a>"
        if REPOSITORY_LINK in guides
        else "the repository"
    )
    rows = []
    for p in (p for p in files if p.parent.name == "notebooks"):
        ex = exercises.get(p.name[:2])
        ex_cell = f'<a href="exercises/{ex.stem}.html">{ex.stem}</a>' if ex else ""
        rows.append(
            f'<tr><td>{p.name[:2]}</td><td><a href="notebooks/{p.stem}.html">'
            f"{html.escape(title_of(p))}</a></td><td>{ex_cell}</td></tr>"
        )
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>mha-course</title>"
        f"<style>{STYLE}</style>{site_search.head('')}</head><body><h1>mha-course: "
        f"multi-head attention, from one dot product to MQA/GQA</h1><p>The rendered course, "
        f"with the outputs as committed. To run it: clone {repository}, "
        f"<code>make lab</code>.</p>{site_search.box()}"
        f"<table><tr><th>ch</th><th>lecture</th><th>exercise</th></tr>{''.join(rows)}</table>"
        f"<p><a href='exercises/index.html'>All exercises</a></p><h2>Guides</h2><ul>"
        + "".join(
            f'<li><a href="{Path(g).with_suffix(".html").as_posix()}">{g}</a></li>' for g in guides
        )
        + "</ul></body></html>"
    )


def exercise_index(files: list[Path]) -> str:
    items = "".join(
        f'<li><a href="{p.stem}.html">{html.escape(title_of(p))}</a></li>'
        for p in files
        if p.parent.name == "exercises"
    )
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Exercises</title>"
        f"<style>{STYLE}</style>{site_search.head('../')}</head><body><p><a "
        f"href='../index.html'>Contents</a></p>{site_search.box()}"
        f"<h1>Exercises</h1><ul>{items}</ul><p>Each exercise runs in JupyterLab and checks "
        f"itself; see the lecture of the same number first.</p></body></html>"
    )


def head_scripts(depth: str) -> str:
    """The local MathJax (with its configuration), for pages not made by nbconvert."""
    return f'{MATHJAX_CONFIG}<script src="{depth}_static/{site_assets.MATHJAX}"></script>'


def page_contents(body: str) -> list[tuple[int, str, str]]:
    """(level, id, html) of the page's h2/h3 headings (h1 is the title), from nbconvert's HTML."""
    return [
        (int(level), anchor, TAG.sub("", inner).strip())
        for level, anchor, inner in HEADING.findall(body)
        if level != "1"
    ]


def sidebar(body: str, download: str | None, depth: str) -> str:
    """Contents link, the notebook's download link and the page's headings, as an <aside>."""
    items = "".join(
        f'<li class="toc-{level}"><a href="#{html.escape(anchor, quote=True)}">{text}</a></li>'
        for level, anchor, text in page_contents(body)
    )
    parts = [f'<a href="{depth}index.html">Course contents</a>']
    if download:
        parts.append(
            f'<br><a class="course-download" href="{html.escape(download, quote=True)}" '
            f"download>Download the notebook (.ipynb)</a>"
        )
    if items:
        parts.append(f"<h2>On this page</h2><ul>{items}</ul>")
    return f'<aside class="course-side" aria-label="Page contents">{"".join(parts)}</aside>'


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
