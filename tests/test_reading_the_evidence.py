"""docs/reading_the_evidence.md teaches the course's statistics with worked examples: each ```python
block is followed by a ```text block with what it prints. Run every example and compare, so the primer
can never show a number its code does not give (and the lectures' links to it point at anchors that exist).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
PRIMER = ROOT / "docs" / "reading_the_evidence.md"
EXAMPLE = re.compile(r"```python\n(.*?)```\n\n```text\n(.*?)```", re.S)


def examples() -> list[tuple[str, str]]:
    return EXAMPLE.findall(PRIMER.read_text(encoding="utf-8"))


def test_primer_has_an_example_per_idea():
    assert len(examples()) == 7


@pytest.mark.parametrize("index", range(7))
def test_primer_example_prints_what_it_shows(index):
    code, shown = examples()[index]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"{PRIMER.name} example {index + 1}", "exec"), {})
    assert out.getvalue() == shown


def _anchors() -> set[str]:
    """The primer's explicit anchors (``<a id="...">``, the same on GitHub, the site and a local copy)."""
    return set(re.findall(r'<a id="([^"]+)"></a>', PRIMER.read_text(encoding="utf-8")))


def test_primer_table_links_resolve():
    text = PRIMER.read_text(encoding="utf-8")
    assert set(re.findall(r"\]\(#([^)]+)\)", text)) <= _anchors()


def test_lecture_links_to_the_primer_resolve():
    anchors, links = _anchors(), 0
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            for anchor in re.findall(
                r"docs/reading_the_evidence\.md(?:#([^)\s]*))?\)", cell.source
            ):
                links += 1
                assert not anchor or anchor in anchors, f"{path.name}: no heading for #{anchor}"
    assert links >= 8, "each chapter that uses an interval links the primer at its first use"
