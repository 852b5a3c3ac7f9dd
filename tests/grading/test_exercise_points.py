"""An exercise's header states its points, and they are the sum of its graded items' points
(issue #32: ex13's header said 10, its items sum to 12). Each task heading's "(n points)" is an
item's weight too, so the headings sum to the same total. Checked on the solutions (the source)
and on the released exercises (what learners read)."""

from __future__ import annotations

import re

import nbformat
import pytest
from grading_helpers import EXERCISES, SOLUTIONS

from mha_grader.registry import notebooks

TOTAL = re.compile(r"Points: (\d+) in total\.")
# ex17: "Points: 10, and 3 more for the optional task 5."
WITH_OPTIONAL = re.compile(r"Points: (\d+), and (\d+) more for the optional task (\d+)\.")
TASK = re.compile(r"^## Task (\d+)\b[^\n]*\((\d+) points?", re.M)


def stated_points(header: str) -> int:
    """The total a header states; a header that states none (or two) is an error."""
    totals = [int(n) for n in TOTAL.findall(header)]
    totals += [int(a) + int(b) for a, b, _ in WITH_OPTIONAL.findall(header)]
    if len(totals) != 1:
        raise ValueError(
            f"header: expected one 'Points: N in total.' (or 'Points: N, and M more for the "
            f"optional task K.'), found {len(totals)} in {header[:80]!r}..."
        )
    return totals[0]


def _books() -> list:
    return sorted(SOLUTIONS.glob("ex*.ipynb")) + sorted(EXERCISES.glob("ex*.ipynb"))


@pytest.mark.parametrize("path", _books(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_header_states_the_items_sum(path):
    cells = nbformat.read(path, as_version=4).cells
    items = sum(item.points for item in notebooks()[path.stem])
    assert stated_points(cells[0].source) == items
    headings = [
        int(p) for c in cells if c.cell_type == "markdown" for _, p in TASK.findall(c.source)
    ]
    assert sum(headings) == items, f"{path.name}: task headings {headings}"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("... Points: 12 in total. Letters: B", 12),
        ("Points: 10, and 3 more for the optional task 5.", 13),
        ("no statement of points", ValueError),
        ("Points: 10 in total. Points: 12 in total.", ValueError),
    ],
)
def test_stated_points_reads_the_header(header, expected):
    if expected is ValueError:
        with pytest.raises(ValueError, match="header: expected one 'Points: N in total.'"):
            stated_points(header)
    else:
        assert stated_points(header) == expected
