"""Exercise 17's optional dQ kernel item (task 5): its float64 oracle (autograd) and block-level
mistake simulation, the launcher's NaN for undefined masked lanes, and its cases.

The kernel itself is graded in the sandbox by the gallery (``gallery/ex17_dq_kernel_*.py``: each
wrong kernel named) and by ``test_solutions``/``test_stubs`` (solution full marks, stub 0).
"""

from __future__ import annotations

import pytest
import torch

from mha_course.grading import items_for
from mha_course.grading.oracles import triton_dq_kernel as dqk
from mha_course.kernels.triton_flash import triton_available
from mha_grader.compare import _close, as_arrays, to_framework

ITEM = next(it for it in items_for("ex17") if it.id == "ex17_triton_dq")
SEEDS = (12345, 7, 3)


def _out(fn, case):
    return as_arrays(fn(*to_framework(ITEM, case)))[0]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_block_loop_with_no_mistake_is_autograd_of_the_dense_reference(seed):
    """The loop the mistakes switch is right: equal to float64 autograd's dQ on every case."""
    for case in ITEM.cases(seed):
        assert _close(ITEM, _out(dqk.blockwise, case), _out(ITEM.reference, case))


def test_the_reference_is_the_gradient_of_the_course_attention():
    """An independent check of the oracle: dQ of ``mha_course.tiled_attention`` (no GQA, so the
    kv heads need no repeat) by autograd in float64."""
    import mha_course

    case = ITEM.cases(12345)[3]  # causal L = S, H = G
    q, k, v, out, lse, do, causal, *_ = to_framework(ITEM, case)
    q64 = q.double().requires_grad_()
    o = mha_course.tiled_attention(q64, k.double(), v.double(), is_causal=causal)
    (want,) = torch.autograd.grad(o, q64, do.double())
    torch.testing.assert_close(_out(ITEM.reference, case), want.float().numpy())


@pytest.mark.parametrize("seed", SEEDS)
def test_every_mistake_shows_on_some_case(seed):
    """Each simulated mistake changes dQ on at least one case of every seed (a student's secret
    inputs included), so it can be told from a right kernel and named."""
    cases = ITEM.cases(seed)
    for m in ITEM.mistakes:
        if m.variant is None:
            continue
        assert any(not _close(ITEM, _out(m.variant, c), _out(ITEM.reference, c)) for c in cases), (
            f"{m.name}: equals the reference on every case of seed {seed}"
        )


def test_the_cases_are_ragged_causal_with_l_not_s_gqa_and_narrow_heads():
    shapes = [
        (c["query"].shape, c["key"].shape, c["is_causal"], c["block_q"], c["block_k"])
        for c in ITEM.cases(12345)
    ]
    assert all(q[2] % bq and k[2] % bk for q, k, _, bq, bk in shapes)  # ragged L and S
    causal = [(q[2], k[2]) for q, k, c, _, _ in shapes if c]
    assert any(L < S for L, S in causal) and any(L > S for L, S in causal)
    assert any(L == S for L, S in causal)
    assert any(q[1] > k[1] > 1 for q, k, *_ in shapes) and any(
        k[1] == 1 < q[1] for q, k, *_ in shapes
    )
    assert any(q[3] < 16 for q, *_ in shapes)  # D < BLOCK_D: the head columns are masked too
    assert any(bq > bk for *_, bq, bk in shapes) and any(bq < bk for *_, bq, bk in shapes)


def test_the_lse_and_out_of_a_case_are_the_forwards():
    from mha_course.grading.oracles import triton_forward as fwd

    for case in ITEM.cases(7):
        q, k, v, out, lse, *_ = to_framework(ITEM, case)
        want_out, want_lse = fwd.reference(q, k, v, case["is_causal"], 16, 16)
        assert torch.equal(out, want_out) and torch.equal(lse, want_lse)


@pytest.mark.skipif(
    not triton_available(), reason='Triton is not installed: pip install -e ".[triton]"'
)
def test_under_the_interpreter_a_masked_load_without_other_reads_nan():
    """What lets the gallery's missing ``other=0.0`` show on the CPU: inside the launch a masked
    float load leaves NaN (the interpreter's zeros hide it); outside, the interpreter is back."""
    import triton
    import triton.language as tl

    from mha_course.kernels.triton_dq import undefined_lanes_are_nan
    from mha_course.kernels.triton_flash import interpreted

    if not interpreted():
        pytest.skip("compiled Triton: the lanes are undefined, not NaN")

    @triton.jit
    def copy(X, Y, N, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(Y + i, tl.load(X + i, mask=i < N) + tl.load(X + i, mask=i < N, other=0.0) * 0)

    x, y = torch.arange(8.0), torch.zeros(8)
    with undefined_lanes_are_nan():
        copy[(1,)](x, y, 5, BLOCK=8)
    assert torch.equal(y[:5], x[:5]) and torch.isnan(y[5:]).all()
    copy[(1,)](x, y, 5, BLOCK=8)
    assert torch.equal(y, torch.tensor([0.0, 1, 2, 3, 4, 0, 0, 0]))
