"""One student's grading: what is planned (notebooks, cells, units, cases) and what is settled.

``runner.grade_submission`` fills a :class:`Plan` (step 1), then runs children on what is left
to do (``todo``) until every item is settled. An item is settled ONCE, as soon as its report is
in: it is judged at once (``settle``) and only its verdict is kept, so the parent never holds
more than one item's arrays, and the student's byte budget (``budget``, ``Limits.result_mb``)
bounds what all of its reports may make the parent read back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mha_grader import causes, substitute
from mha_grader import compare as C
from mha_grader.items import Case, Item

Graded = tuple[list[C.ItemResult], list[str]]  # (results in item order, notes)


@dataclass
class Plan:
    notebooks: dict[str, Path]
    items: dict[str, list[Item]]
    cases: dict[str, list[Case]]
    deadline: float  # time.monotonic() by which the whole student is done (restarts included)
    budget: int  # bytes of results the parent may still read back for this student
    cells: dict[str, list[dict]] = field(default_factory=dict)  # notebook -> cells to run
    banned: dict[str, set[str]] = field(default_factory=dict)  # notebook -> forbidden names used
    units: dict[str, tuple[str, list[Item]]] = field(
        default_factory=dict
    )  # unit -> (notebook, items)
    courses: dict[str, str] = field(default_factory=dict)  # unit -> its staged course
    dirs: dict[str, str] = field(default_factory=dict)  # unit -> its results folder (u0, u1...)
    skip: set[tuple[str, int]] = field(default_factory=set)  # (notebook, cell) run no more
    notes: dict[str, list[str]] = field(default_factory=dict)
    verdicts: dict[str, C.ItemResult] = field(default_factory=dict)
    public: bool = False  # public self-check inputs: exact answers may show both values
    syntax: dict[str, dict[int, dict]] = field(default_factory=dict)  # notebook -> the scanner's
    graphs: dict[str, dict[str, set[str]]] = field(default_factory=dict)  # notebook -> call graph
    # a wrong earlier task costs only its own points (substitute.py): what each unit's course
    # lacks besides forbidden names; item -> {its earlier function: the course's own}, and the
    # first verdict of each item graded again with those
    stubbed: frozenset[str] = frozenset()
    swaps: dict[str, dict[str, str]] = field(default_factory=dict)
    first: dict[str, C.ItemResult] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.name_of = {it.id: name for name, its in self.items.items() for it in its}
        self.notes = {n: [] for n in self.notebooks}

    def lines(self, name: str) -> dict[int, int] | None:
        """Cell index -> its number of lines: a line the child reports must be one of them."""
        if name not in self.cells:
            return None
        return {c["index"]: c["source"].count("\n") + 1 for c in self.cells[name]}

    def note(self, name: str, text: str) -> None:
        got = self.notes.setdefault(name, [])
        if text and text not in got:
            got.append(text)

    def settle(self, it: Item, report: dict) -> None:
        """Judge ``it`` on ``report`` now (once); its arrays are released with the report."""
        if it.id not in self.verdicts:
            self.verdicts[it.id] = C.judge(
                it, self.cases[it.id], report, self.lines(self.name_of[it.id]), public=self.public
            )

    def settle_all(self, todo: dict[str, list[Item]], status: str, message: str) -> None:
        for its in todo.values():
            for it in its:
                self.settle(it, {"status": status, "parent_message": message})

    def todo(self, one_unit: bool) -> dict[str, list[Item]]:
        """Unit -> its items not settled yet (only the first such unit if ``one_unit``)."""
        left = {
            u: [it for it in its if it.id not in self.verdicts]
            for u, (_, its) in self.units.items()
        }
        left = {u: its for u, its in left.items() if its}
        return dict(list(left.items())[:1]) if one_unit else left

    def max_runs(self) -> int:
        """Each run settles an item or skips a cell, or stops: this many runs at most."""
        return sum(len(self.cells[n]) + len(its) + 1 for n, its in self.units.values()) + 1

    def retry(self) -> bool:
        """Unsettle each failed item that an earlier item's failure may have caused and that may
        be graded with the course's own earlier function (``substitute.retries``): a unit of its
        own each. False if there is none."""
        for name, its in self.items.items():
            if name not in self.cells:
                continue
            swaps = substitute.retries(its, self.verdicts, self.graphs.get(name))
            for it in its:
                if it.id in swaps:
                    self.swaps[it.id] = swaps[it.id]
                    self.first[it.id] = self.verdicts.pop(it.id)
                    self.units = {  # out of its first unit: graded in one of its own
                        u: (n, [i for i in them if i.id != it.id])
                        for u, (n, them) in self.units.items()
                    }
                    unit = f"{name}~s{len(self.swaps)}"  # short: a stage's name is bounded
                    self.units[unit] = (name, [it])
                    self.dirs[unit] = f"u{len(self.dirs)}"
        return bool(self.swaps)

    def graded(self) -> dict[str, Graded]:
        out = {}
        for name in self.notebooks:
            for it in self.items[name]:
                self.settle(it, {"status": C.CRASHED, "parent_message": "no result"})
            results = [
                substitute.combine(
                    it, self.first[it.id], self.verdicts[it.id], self.swaps[it.id], self.items[name]
                )
                if it.id in self.first
                else self.verdicts[it.id]
                for it in self.items[name]
            ]
            # the root cause first: a cell that does not compile, an earlier task that fails
            out[name] = causes.explain(
                results,
                self.notes.get(name, []),
                self.items[name],
                cells=self.cells.get(name, []),
                graph=self.graphs.get(name),
                syntax=self.syntax.get(name, {}),
                alone=set(self.first),
            )
        return out
