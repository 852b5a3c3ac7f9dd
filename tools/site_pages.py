"""The static site's own HTML around the rendered notebooks (tools/build_site.py builds the site):
the styles, the MathJax configuration, a page's title (its first heading), the previous / contents
/ next bar, the sidebar of a page's headings with its download link, and the two pages that are
not notebooks, the table of contents and the exercise list.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import site_assets  # tools/ is not a package: build_site.py puts it on the path
import site_search

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
