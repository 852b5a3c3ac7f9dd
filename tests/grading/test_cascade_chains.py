"""A wrong earlier task costs only its own points, chain by chain (issue #31 item 5): every
later item of the course that calls an earlier task's function (``uses``, or one the task text
points at) is graded with the course's own when that one fails; its own mistake is still named;
the course's substitutes pass no task, in no exercise (see test_cascades for the engine)."""

from __future__ import annotations

import importlib
import runpy
from pathlib import Path

import pytest
from grading_helpers import build, grade_many, solution

from mha_course.grading import check, items_for


def _lost(results, ex: str) -> set[str]:
    return {it.id for it in items_for(ex) if not results[it.id].passed}


# Each chain's students, from the gallery: exercise -> (earlier item, a wrong earlier task, later
# item, a later task with a mistake of its own (gallery cases), and, where the SOLUTION's later
# function does not call the earlier one, a learner's that does: (right, with its own mistake))
CHAINS = {
    "ex07": ("ex07_repeat_kv", "ex07_repeat_not_interleave", "ex07_gqa_forward", "ex07_gqa_forward_scaled_by_e", None),
    # ex09's task 3 calls tasks 1 and 2: with both failing, it is graded with both of the course's
    "ex09": ("ex09_online_update", "ex09_update_no_rescale", "ex09_tile_step", "ex09_tile_no_scale", None),
    "ex12": ("ex12_rope", "ex12_rope_rotate_half_sign", "ex12_rope_decode_step", "ex12_step_positions_not_offset", None),
    "ex13": ("ex13_block", "ex13_block_post_norm", "ex13_gpt", "ex13_gpt_untied_readout", None),
    "ex14": ("ex14_ring_slots", "ex14_ring_not_wrapped", "ex14_ring_write", "ex14_positions_not_updated", None),
    "ex19": ("ex19_safe_merge", "ex19_merge_no_max", "ex19_ring_step", "ex19_step_local_offset", None),
    "ex03": ("ex03_project_qkv", "ex03_keys_transposed_shape", "ex03_head_forward", "ex03_scale_by_e", (
        "def self_attention_head(x, W_Q, W_K, W_V):\n"
        "    q, k, v = project_qkv(x, W_Q, W_K, W_V)\n"
        "    weights = (q @ k.transpose(-2, -1) / math.sqrt({d})).softmax(dim=-1)\n"
        "    return weights @ v, weights\n"
    )),
    "ex05": ("ex05_offset_mask", "ex05_causal_off_by_one", "ex05_decode_step", "ex05_step_mask_inverted", (
        "def decode_step(q_new, k_new, v_new, k_cache, v_cache):\n"
        "    k_all = torch.cat([k_cache, k_new], dim=-2)\n"
        "    v_all = torch.cat([v_cache, v_new], dim=-2)\n"
        "    allowed = offset_causal_mask(q_new.shape[-2], k_cache.shape[-2])\n"
        "    scores = q_new @ k_all.transpose(-2, -1) / q_new.shape[-1] ** 0.5\n"
        "    scores = scores.masked_fill({blocked}, float('-inf'))\n"
        "    return torch.softmax(scores, dim=-1) @ v_all, k_all, v_all\n"
    )),
}  # fmt: skip
# the learner's own later task, right and with the own-mistake case's mistake
CALLS = {
    "ex03": ({"d": "q.shape[-1]"}, {"d": "x.shape[-1]"}),  # scaled by sqrt(E)
    "ex05": ({"blocked": "~allowed"}, {"blocked": "allowed"}),  # the mask inverted
}


def _gallery(case: str) -> dict:
    return runpy.run_path(str(Path(__file__).parent / "gallery" / f"{case}.py"))


def _items(ex: str, earlier: str, later: str):
    by_id = {it.id: it for it in items_for(ex)}
    return by_id[earlier], by_id[later]


def _chain_code(ex: str) -> dict[str, dict[str, str]]:
    """The three students of a chain: its earlier task wrong; both wrong; the earlier task
    "solved" by importing the course's substitute (a name the grader does not skip cells for)."""
    earlier, wrong, later, own, calls = CHAINS[ex]
    first, _ = _items(ex, earlier, later)
    module = next(  # the course's module that holds it (not read from the declaration)
        m
        for m in (
            "mha_course.grading.child.substitutes",
            "mha_course.grading.child.substitutes_torch",
        )
        if hasattr(importlib.import_module(m), first.function)
    )
    head, tail = module.split("grading", 1)
    borrowed = (
        f"import importlib\n{first.function} = importlib.import_module("
        f'"{head}grad" + "ing{tail}").{first.function}\n'
    )
    right, own_code = (
        ({}, {later: _gallery(own)["REPLACE"][later]})
        if calls is None
        else tuple({later: calls.format(**fill)} for fill in CALLS[ex])
    )
    wrong_first = {earlier: _gallery(wrong)["REPLACE"][earlier]}  # only that task
    return {
        "wrong": {**wrong_first, **right},
        "two": {**wrong_first, **own_code},
        "borrowed": {earlier: borrowed, **right},
    }


@pytest.fixture(scope="module")
def chains(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chains")
    return grade_many(
        {
            (ex, kind): (build(ex, tmp / ex / kind / "sub.ipynb", replace=rep), ex)
            for ex in CHAINS
            for kind, rep in _chain_code(ex).items()
        }
    )


@pytest.mark.parametrize("ex", list(CHAINS))
def test_each_chain_costs_the_earlier_task_only_its_own_points(chains, ex):
    earlier, wrong, later, own, _ = CHAINS[ex]
    name = _items(ex, earlier, later)[0].function
    results, _ = chains[(ex, "wrong")]
    status, text = _gallery(wrong)["EXPECT"][earlier]
    assert (results[earlier].status, text in results[earlier].message) == (status, True)
    assert _lost(results, ex) == {earlier}, {i: results[i].message for i in _lost(results, ex)}
    r = results[later]
    assert r.points == r.max_points, r.message
    assert r.message.startswith(f"graded with the course's `{name}`") and earlier in r.message

    results, _ = chains[(ex, "two")]  # the later task's own mistake is named, and costs it
    assert _lost(results, ex) == {earlier, later}, {i: results[i].message for i in results}
    r = results[later]
    assert r.points == 0 and "this item's own mistake" in r.message, r.message
    assert _gallery(own)["EXPECT"][later][1] in r.message, r.message
    assert "inherits" not in r.message


@pytest.mark.parametrize("ex", list(CHAINS))
def test_no_chain_substitute_can_pass_the_earlier_task(chains, ex):
    earlier, _, later, _, _ = CHAINS[ex]
    results, _ = chains[(ex, "borrowed")]
    assert results[earlier].status == "forbidden API", results[earlier]
    assert results[later].passed, results[later].message  # graded with the course's own
    assert _lost(results, ex) == {earlier}, {i: results[i].message for i in _lost(results, ex)}


def test_a_parameter_named_like_an_earlier_task_is_not_a_call():
    """ex17's ``dq_tile(..., d_term, scale)`` reads its argument ``d_term``, not task 1's
    function: a wrong task 1 is not blamed for task 2's own mistake (the scanner read every
    loaded name as a call, and said task 2 "inherits the failure of task 1")."""
    from mha_grader.causes import call_graph, explain, reached
    from mha_grader.compare import ItemResult
    from mha_grader.notebook import code_cells

    items = items_for("ex17")
    graph = call_graph(code_cells(solution("ex17")))
    assert "d_term" not in reached(graph, "dq_tile")
    assert (
        "Block"
        in call_graph([{"index": 0, "source": "class SmallGPT(Block):\n    pass"}])["SmallGPT"]
    )  # what the class statement itself reads counts
    results = [ItemResult(it.id, it.function, 0.0, it.points, "passed") for it in items]
    results[0] = ItemResult(items[0].id, "d_term", 0.0, 1, "wrong values", "dO alone")
    results[1] = ItemResult(items[1].id, "dq_tile", 0.0, 2, "wrong values", "no D: ...")
    out, _ = explain(results, [], items, graph=graph)
    assert out[1].message == "no D: ...", out[1].message


def test_the_in_kernel_check_grades_a_torch_chain_alone_too():
    """ex09's blockwise pass over a wrong update: the in-kernel check swaps in both of the
    course's earlier functions (substitutes_torch), as grading does."""
    import torch

    ns: dict = {"torch": torch, "math": __import__("math")}
    for item in ("ex09_online_update", "ex09_tile_step", "ex09_tiled_attention"):
        code = (
            _gallery("ex09_update_no_rescale")["REPLACE"][item]
            if item == "ex09_online_update"
            else _solution_code("ex09", item)
        )
        exec(code, ns)
    res = {r.id: r for r in check("ex09", namespace=ns, quiet=True)}
    assert not res["ex09_online_update"].passed
    for item in ("ex09_tile_step", "ex09_tiled_attention"):
        assert res[item].passed and "graded with the course's" in res[item].message, res[item]


def _solution_code(ex: str, grade_id: str) -> str:
    """The solution's cell of one graded item (its code, the solution markers kept as comments)."""
    import json

    cells = json.loads(solution(ex).read_text())["cells"]
    cell = next(c for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)
    return "".join(cell["source"])


# (item, earlier function) chains decided NOT to be graded with the course's own: the feedback
# says which failure the item inherits (causes.INHERITS). None at present: every chain of the
# course has its substitute (docs/grading.md lists them).
INHERITED: frozenset[tuple[str, str]] = frozenset()


def test_every_chain_of_the_course_is_decided():
    """A later item that calls an earlier task's function (``uses``, kept equal to the solution's
    calls by test_causes) declares the course's own for it, or is listed in INHERITED: a new
    chain cannot silently cost the earlier task's points twice."""
    from mha_grader.registry import all_items

    undecided = [
        (it.id, fn)
        for it in all_items()
        for fn in it.uses
        if fn not in dict(it.substitutes) and (it.id, fn) not in INHERITED
    ]
    assert not undecided, undecided


def test_a_substitute_that_answers_another_exercise_is_stubbed_there_too(tmp_path):
    """ex19's ``merge_safe`` computes ex17's ``merge_partials`` (and ex09's ``online_update``
    merges two partials too), yet no ex17 item declares a substitute: ex17 graded ALONE must not
    find them (the engine stubs every substitute module of the course, not only those that the
    graded exercises declare)."""
    borrowed = (
        "import importlib\nmerge_partials = importlib.import_module("
        '"mha_course.grad" + "ing.child.substitutes_torch").merge_safe\n'
    )
    path = build(
        "ex17",
        tmp_path / "sub.ipynb",
        replace={"ex17_lse_merge": borrowed},
        drop=("ex17_triton_forward", "ex17_triton_dq"),  # not needed here: the kernels are slow
    )
    results, _ = grade_many({"ex17": (path, "ex17")})["ex17"]
    assert results["ex17_lse_merge"].status == "forbidden API", results["ex17_lse_merge"]
    assert results["ex17_d_term"].passed and results["ex17_dq_tile"].passed
