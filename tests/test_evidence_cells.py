"""Evidence cells (issue #32): the idea leads, the checks are one click away.

A lecture's evidence cell is a code cell that only asserts, measures or prints intervals. It is
announced by a markdown lead that starts with ``**Evidence**`` (what is measured, against what, with
which interval) and its input opens collapsed: in JupyterLab by the cell's own flag
(``metadata.jupyter.source_hidden``), on the site by a ``<details>`` fold (tools/build_site.py),
its output shown in both. A collapsed cell without a lead would hide teaching code; a lead whose
cell is open would promise a fold that is not there.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))  # the tools import each other (site_assets, site_search)

import build_site  # noqa: E402

LECTURES = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
LEAD = "**Evidence**"
# Chapters from 2 on carry evidence cells (04 and 10 too, since #32).
WITHOUT_YET: set[str] = set()


def _collapsed(cell) -> bool:
    return cell.cell_type == "code" and cell.metadata.get("jupyter", {}).get("source_hidden", False)


def _is_lead(cell) -> bool:
    return cell.cell_type == "markdown" and cell.source.lstrip().startswith(LEAD)


def evidence_problems(nb) -> list[str]:
    """Each lead is followed by a collapsed code cell, each collapsed cell follows a lead."""
    problems = []
    for i, cell in enumerate(nb.cells):
        after = nb.cells[i + 1] if i + 1 < len(nb.cells) else None
        before = nb.cells[i - 1] if i else None
        if _is_lead(cell) and not (after is not None and _collapsed(after)):
            problems.append(
                f"cell {i}: an {LEAD} lead whose next cell is not a collapsed code cell"
            )
        if _collapsed(cell) and not (before is not None and _is_lead(before)):
            problems.append(f"cell {i}: code collapsed without an {LEAD} lead before it")
    return problems


@pytest.mark.parametrize("path", LECTURES, ids=lambda p: p.stem)
def test_evidence_cells_are_led_and_collapsed(path):
    assert evidence_problems(nbformat.read(path, as_version=4)) == []


@pytest.mark.parametrize(
    "path",
    [p for p in LECTURES if p.name[:2] >= "02" and p.name[:2] not in WITHOUT_YET],
    ids=lambda p: p.stem,
)
def test_every_chapter_from_2_on_has_evidence_cells(path):
    nb = nbformat.read(path, as_version=4)
    assert any(_collapsed(c) for c in nb.cells), f"{path.name}: no collapsed Evidence cell"


def _notebook(hidden: bool):
    lead = nbformat.v4.new_markdown_cell(f"{LEAD} (code collapsed): one check.")
    check = nbformat.v4.new_code_cell("assert 1 + 1 == 2\nprint('checked', 'output')")
    check.outputs = [nbformat.v4.new_output("stream", name="stdout", text="checked output\n")]
    if hidden:
        check.metadata["jupyter"] = {"source_hidden": True}
    teach = nbformat.v4.new_code_cell("taught = 'teaching-code'")
    return nbformat.v4.new_notebook(cells=[lead, check, teach])


def test_the_check_passes_a_led_fold_and_catches_a_lead_without_one():
    assert evidence_problems(_notebook(hidden=True)) == []
    problems = evidence_problems(_notebook(hidden=False))
    assert problems == ["cell 0: an **Evidence** lead whose next cell is not a collapsed code cell"]


def test_the_check_catches_collapsed_teaching_code():
    nb = _notebook(hidden=True)
    nb.cells[2].metadata["jupyter"] = {"source_hidden": True}  # teaching code hidden, no lead
    assert evidence_problems(nb) == [
        "cell 2: code collapsed without an **Evidence** lead before it"
    ]


def _details(page: str) -> list[str]:
    return re.findall(r'<details class="course-evidence">(.*?)</details>', page, re.S)


def test_the_site_folds_a_collapsed_cell_and_shows_its_output(tmp_path):
    """The evidence cell's code sits in a closed <details>; its output and the teaching cell don't."""
    path = tmp_path / "zz_demo.ipynb"
    nbformat.write(_notebook(hidden=True), path)
    page = build_site.render_notebook(path, "../")
    folds = _details(page)
    assert len(folds) == 1 and "checked" in folds[0] and "teaching" not in folds[0]
    assert "checked output" not in folds[0] and "checked output" in page  # output stays visible
    assert '<details class="course-evidence" open' not in page  # closed until the reader opens it
    nbformat.write(_notebook(hidden=False), path)
    assert _details(build_site.render_notebook(path, "../")) == []  # an open cell is not folded


@pytest.mark.slow
def test_a_real_chapter_folds_every_evidence_cell():
    path = ROOT / "notebooks" / "14_sliding_window_sinks.ipynb"
    hidden = [c for c in nbformat.read(path, as_version=4).cells if _collapsed(c)]
    assert len(_details(build_site.render_notebook(path, "../"))) == len(hidden) > 0
