"""Each item's dtype rule is stated (its graded test cell), the same in the visible self-check and
the grader, and named in the feedback when the dtype is the cause (issue 23, "Dtype traps")."""

from __future__ import annotations

import nbformat
import pytest
import torch
from grading_helpers import solution

import mha_course
from mha_course.authoring import test_cells
from mha_course.grading import all_items
from mha_grader.compare import dtype_rule, reference_dtypes
from mha_grader.inprocess import grade_namespace

ALIBI = """
def alibi(num_heads, L, S):
    H = num_heads
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)
    q_pos = torch.arange(S - L, S, dtype=torch.float64)
    k_pos = torch.arange(S, dtype=torch.float64)
    return (-slopes[:, None, None] * (q_pos[:, None] - k_pos[None, :]).abs()).to(DTYPE)
"""
SINUSOIDAL = """
def sinusoidal(num_positions, embed_dim):  # the last hint's code, in DTYPE
    p = torch.arange(num_positions, dtype=DTYPE)
    angles = p[:, None] / 10000 ** (torch.arange(0, embed_dim, 2, dtype=DTYPE) / embed_dim)
    pe = torch.empty(num_positions, embed_dim, dtype=DTYPE)
    pe[:, 0::2], pe[:, 1::2] = angles.sin(), angles.cos()
    return pe
"""


def _self_check(stem: str, grade_id: str) -> str:
    """The source of the self-check cell right after ``grade_id``'s solution cell."""
    cells = nbformat.read(solution(stem), as_version=4).cells
    k = next(
        i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )
    assert "self-check" in cells[k + 1].metadata.get("tags", [])
    return cells[k + 1].source


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("item_id,source", [("ex12_alibi", ALIBI), ("ex12_sinusoidal", SINUSOIDAL)])
def test_self_check_and_grader_agree_on_the_dtype(item_id, source, dtype, capsys):
    ns = {"torch": torch, "mha_course": mha_course, "DTYPE": dtype}
    exec(source, ns)
    item = next(it for it in all_items() if it.id == item_id)
    (r,) = grade_namespace(ns, [item], 12345)
    exec(_self_check("ex12", item_id), ns)  # raises if the visible self-check disagrees
    assert r.passed, f"{item_id} in {dtype}: {r.status}: {r.message}"


def test_every_test_cell_states_its_dtype_rule():
    for it in all_items():
        dtypes = reference_dtypes(it) if it.dtype_must_match else None
        assert f"# dtype rule: {dtype_rule(it, dtypes)}." in test_cells.test_cell_source(it)


def test_bool_and_int_items_state_no_float_rule():
    """A mask (bool) or positions (int) item's graded cell stated "the output keeps the input's floating
    dtype" (issue 32): the rule now says what the reference returns."""
    wrong = []
    for it in all_items():
        if not it.dtype_must_match:
            continue
        kinds = {d.kind for d in reference_dtypes(it)}
        rule = test_cells.test_cell_source(it).split("# dtype rule: ")[1].split("\n")[0]
        if "f" not in kinds and ("float32" in rule or "floating" in rule):
            wrong.append((it.id, rule))
    assert not wrong, wrong
    rules = {
        it.id: dtype_rule(it, reference_dtypes(it))
        for it in all_items()
        if it.id in ("ex02_causal_mask", "ex16_block_lookup", "ex02_attention")
    }
    assert rules["ex02_causal_mask"].startswith("a bool output"), rules
    assert rules["ex16_block_lookup"].startswith("an integer output (int64"), rules
    assert "floating dtype" in rules["ex02_attention"], rules


def test_a_float_mask_is_told_the_bool_rule():
    items = [it for it in all_items() if it.id == "ex02_causal_mask"]
    ns = {"torch": torch}
    exec("def make_causal_mask(L, S):\n    return torch.ones(L, S).tril()\n", ns)  # 0./1. floats
    (r,) = grade_namespace(ns, items, 12345)
    assert r.status == "wrong dtype" and "dtype rule: a bool output" in r.message, r.message


def test_a_dtype_message_names_the_rule_and_does_not_hide_a_real_bug():
    ex02 = [it for it in all_items() if it.id == "ex02_attention"]
    ns = {"torch": torch}
    exec(
        "def attention(query, key, value, attn_mask=None):\n"
        "    w = torch.softmax(query.double() @ key.double().transpose(-2, -1), dim=-1)\n"  # unscaled
        "    return w @ value.double(), w\n",
        ns,
    )
    (r,) = grade_namespace(ns, ex02, 12345)
    assert (
        r.status == "wrong dtype"
        and "dtype rule: the output keeps the input's floating dtype" in r.message
    )
    assert "the values are wrong too: " in r.message, r.message
    exec(
        "def attention(query, key, value, attn_mask=None):\n"
        "    s = (query @ key.transpose(-2, -1)) * query.shape[-1] ** -0.5\n"
        "    if attn_mask is not None:\n"
        "        s = s.masked_fill(~attn_mask, float('-inf')) if attn_mask.dtype == torch.bool else s + attn_mask\n"
        "    return (torch.softmax(s, dim=-1) @ value).double(), torch.softmax(s, dim=-1)\n",
        ns,
    )
    (r,) = grade_namespace(ns, ex02, 12345)
    assert (
        r.status == "wrong dtype"
        and "; the values are right apart from the dtype [case" in r.message
    ), r.message
