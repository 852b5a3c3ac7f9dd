"""One conventions box, identical in every exercise (issue 23): written by release from one source,
and what it says about each exercise's weight layout is what that exercise's solution does."""

from __future__ import annotations

import re

import nbformat
from grading_helpers import EXERCISES, ROOT, SOLUTIONS

from mha_course.authoring import conventions, release


def test_every_exercise_has_the_same_conventions_box():
    books = sorted(EXERCISES.glob("ex*.ipynb"))
    assert books
    for path in books:
        cells = nbformat.read(path, as_version=4).cells
        boxes = [c for c in cells if c.get("id") == conventions.CONVENTIONS_ID]
        assert len(boxes) == 1 and cells[1] is boxes[0], path.name
        assert boxes[0].cell_type == "markdown" and boxes[
            0
        ].source == conventions.CONVENTIONS.rstrip("\n"), path.name


def test_the_weight_layouts_are_the_solutions():
    rows = re.findall(
        r"^\| (ex[\d, ex]+) \| [^|]+ \| `x @ (W(?:\.T)?)` \|$",
        conventions.CONVENTIONS,
        re.MULTILINE,
    )
    assert len(rows) == 3
    for names, proj in rows:
        for name in re.findall(r"ex\d\d", names):
            (sol,) = SOLUTIONS.glob(f"{name}_*.ipynb")
            text = "\n".join(
                c.source for c in nbformat.read(sol, as_version=4).cells if c.cell_type == "code"
            )
            transposed = re.search(r"@ W_?[A-Z]*\.T\b", text) is not None
            plain = re.search(r"@ W_?[A-Z]*\b(?!\.T)(?!\w)", text.replace(".T", ".T ")) is not None
            if proj == "W.T":
                assert transposed, f"{name}: the box says x @ W.T"
            else:
                assert plain and not transposed, f"{name}: the box says x @ W"


def _markdown(path) -> str:
    return "\n".join(
        c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"
    )


def test_a_memory_limit_is_stated_in_its_task():
    from mha_course.grading import all_items

    for it in all_items():
        if it.memory_mb:
            assert f"{it.memory_mb} MiB" in _markdown(EXERCISES / f"{it.notebook}.ipynb"), it.id


def test_the_check_cell_says_which_inputs_it_uses():
    for path in sorted(EXERCISES.glob("ex*.ipynb")):
        text = _markdown(path)
        assert "fresh inputs" not in text and "public self-check inputs (seed 12345" in text, (
            path.name
        )


def test_the_readme_links_the_generated_list_of_named_mistakes():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "[named mistakes](docs/mistakes.md)" in readme
    assert (ROOT / release.MISTAKES_FILE).read_text(encoding="utf-8") == release.mistakes_page()
    assert "normalised over the whole array" in release.mistakes_page()
