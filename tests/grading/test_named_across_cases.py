"""A known mistake is named only when the other failing cases do not outvote it.

The first failing case alone can mislead: ring_source's rank r receives from (r - s) % P at step s;
a learner's (s - r) % P agrees with the "wrong direction" mistake, (r + s) % P, on the first case
(r = 0) but not on a ring of P >= 3 with r > 0, so that name would send them after a bug they do
not have. Judged in the parent, on outputs made here from the wrong formula (no sandbox).
"""

from __future__ import annotations

import numpy as np
import pytest

from mha_course.grading import all_items
from mha_grader.compare import judge, to_framework
from mha_grader.items import Item, Mistake
from mha_grader.verdicts import WRONG_VALUES

ITEMS = {it.id: it for it in all_items()}


def _judge_formula(item_id: str, formula, seed: int = 12345):
    item = ITEMS[item_id]
    cases = item.cases(seed)
    outs = [[np.asarray(formula(*to_framework(item, c)), dtype=np.int64)] for c in cases]
    return judge(item, cases, {"status": "ok", "outputs": outs}, public=False)


NAMED = "wrong direction"


@pytest.mark.parametrize(
    "formula, named",
    [
        (lambda r, s, P: (r + s) % P, True),  # the mistake itself: named on every case
        (lambda r, s, P: (s - r) % P, False),  # agrees with it on case 1 only
        (lambda r, s, P: (r - s + 1) % P, False),  # off by one step: not that mistake
    ],
    ids=["wrong direction", "mirrored", "off by one"],
)
def test_a_mistake_is_named_only_if_the_failing_cases_do_not_outvote_it(formula, named):
    r = _judge_formula("ex19_ring_source", formula)
    assert r.status == WRONG_VALUES and r.points == 0.0, r.message
    assert (NAMED in r.message) == named, r.message


def test_the_first_case_alone_would_have_named_it():
    """The case this file is about: (s - r) % P equals the mistake's output on the first case."""
    item = ITEMS["ex19_ring_source"]
    first = item.cases(12345)[0]
    r, s, P = first["rank"], first["step"], first["world_size"]
    assert (s - r) % P == (r + s) % P != (r - s) % P


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_mistake_itself_is_named_on_other_seeds(seed):
    r = _judge_formula("ex19_ring_source", lambda r, s, P: (r + s) % P, seed)
    assert NAMED in r.message, r.message


def _toy(mistake: Mistake) -> Item:
    """Output: x + 1 on four cases; case k's x is k (numpy, exact)."""
    return Item(
        id="toy_plus_one",
        notebook="toy",
        function="plus_one",
        points=1,
        task="x + 1",
        make_cases=lambda rng: [{"x": np.array([float(k)])} for k in range(4)],
        reference=lambda x: x + 1,
        framework="numpy",
        dtype_must_match=False,
        rtol=0.0,
        atol=1e-9,
        mistakes=(mistake,),
    )


@pytest.mark.parametrize(
    "mistake, got, named",
    [
        # a predicate votes on no other case: its False may only mean "another kind of case"
        (Mistake("first case only", "fb", matches=lambda g, c: c["x"][0] == 0), "x + 2", True),
        # where a variant gives the right answer (x = 1) it cannot tell: no vote, so one case for
        # (x = 0), one against (x = 2), one right (x = 3): a tie, named
        (
            Mistake("x * 2", "fb", variant=lambda x: x * 2),
            "x * 2 + (x == 1) + (x == 2) * 5 - (x == 3) * 2",
            True,
        ),
        # a variant contradicted by most failing cases is not named
        (Mistake("x + 2", "fb", variant=lambda x: x + 2), "x + 2 + (x > 0)", False),
        # a tie (two failing cases each way) keeps the name
        (Mistake("x + 2", "fb", variant=lambda x: x + 2), "x + 2 + (x == 3) - (x == 1) * 2", True),
    ],
    ids=["predicate", "cannot tell", "outvoted", "tie"],
)
def test_who_votes(mistake, got, named):
    item = _toy(mistake)
    cases = item.cases(0)
    outs = [[eval(got, {"x": c["x"]})] for c in cases]  # noqa: S307 - the table's own formulas
    r = judge(item, cases, {"status": "ok", "outputs": outs})
    assert r.points == 0.0, r.message
    assert (mistake.name in r.message) == named, r.message


@pytest.mark.parametrize("got", ["x + 2", "x + 2 + (x > 0)", "x * 0 + 7"])
def test_the_vote_costs_each_case_one_variant_at_most(got):
    """What a submission can make the parent compute is bounded by the item, not by the
    submission: each of its cases' variant once (a hostile output cannot buy more)."""
    calls = []
    item = _toy(Mistake("x + 2", "fb", variant=lambda x: calls.append(1) or x + 2))
    cases = item.cases(0)
    outs = [[eval(got, {"x": c["x"]})] for c in cases]  # noqa: S307 - the table's own formulas
    r = judge(item, cases, {"status": "ok", "outputs": outs})
    assert r.points == 0.0
    assert 1 <= len(calls) <= len(cases), len(calls)
