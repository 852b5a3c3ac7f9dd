"""Exercise 17's Triton forward kernel item (task 4): its float64 oracle and block-level mistake
simulation, the message when Triton is missing, and the staging of the course's own kernel.

The kernel itself is graded in the sandbox by the gallery (``gallery/ex17_kernel_*.py``: each
wrong kernel named) and by ``test_solutions``/``test_stubs`` (solution full marks, stub 0).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from mha_course.grading import items_for
from mha_course.grading.oracles import triton_forward as fwd
from mha_course.kernels.triton_flash import INSTALL_HINT, triton_available, triton_forward
from mha_grader import stage
from mha_grader.compare import _close, as_arrays, to_framework
from mha_grader.inprocess import grade_namespace

ITEM = next(it for it in items_for("ex17") if it.id == "ex17_triton_forward")
SEEDS = (12345, 7, 3)
NEEDS_TRITON = pytest.mark.skipif(
    not triton_available(), reason='Triton is not installed: pip install -e ".[triton]"'
)


def _outputs(fn, case):
    return as_arrays(fn(*to_framework(ITEM, case)))


@pytest.mark.parametrize("seed", SEEDS)
def test_the_block_loop_with_no_mistake_is_the_dense_reference(seed):
    """The simulation the mistakes switch is the right algorithm: equal to the dense float64
    softmax and logsumexp on every case (ragged, causal L < S, L > S, L = S, GQA, MQA)."""
    for case in ITEM.cases(seed):
        for got, want in zip(_outputs(fwd.blockwise, case), _outputs(ITEM.reference, case)):
            assert _close(ITEM, got, want)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_mistake_shows_on_some_case(seed):
    """Each named mistake changes O or the lse on at least one case of every seed (a student's
    secret inputs included), so it can be told from a right kernel and named."""
    cases = ITEM.cases(seed)
    for m in ITEM.mistakes:
        differs = any(
            not _close(ITEM, v, r)
            for case in cases
            for v, r in zip(_outputs(m.variant, case), _outputs(ITEM.reference, case))
        )
        assert differs, f"{m.name}: equals the reference on every case of seed {seed}"


def test_the_cases_are_ragged_causal_with_l_not_s_and_gqa():
    cases = ITEM.cases(12345)
    shapes = [
        (c["query"].shape, c["key"].shape, c["is_causal"], c["block_q"], c["block_k"])
        for c in cases
    ]
    assert all(q[2] % bq and k[2] % bk for q, k, _, bq, bk in shapes)  # ragged L and S
    causal = [(q[2], k[2]) for q, k, c, _, _ in shapes if c]
    assert any(L < S for L, S in causal) and any(L > S for L, S in causal)
    assert any(q[1] > k[1] > 1 for q, k, *_ in shapes)  # GQA (and MQA: G = 1)
    assert any(k[1] == 1 < q[1] for q, k, *_ in shapes)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_last_case_hides_nan_in_the_key_blocks_a_skipping_kernel_never_loads(seed):
    """Causal block skipping is graded: the last case (causal, L < S) holds NaN in its keys and
    values from ``unread_from`` on, and only there; a loop over every key block that only masks
    (the mistake's simulation) gets NaN, the right loop does not."""
    *finite, last = ITEM.cases(seed)
    assert not any(np.isnan(c[name]).any() for c in finite for name in ("key", "value"))
    L, S = last["query"].shape[2], last["key"].shape[2]
    first = fwd.unread_from(L, S, last["block_q"], last["block_k"])
    assert last["is_causal"] and L <= first < S
    for name in ("key", "value"):
        assert (
            np.isnan(last[name][:, :, first:]).all()
            and not np.isnan(last[name][:, :, :first]).any()
        )
    no_skip = next(m for m in ITEM.mistakes if m.name == "no causal block skipping")
    assert np.isnan(_outputs(no_skip.variant, last)[0]).all()
    assert all(np.isfinite(a).all() for a in _outputs(fwd.blockwise, last))


@NEEDS_TRITON
@pytest.mark.parametrize("seed", SEEDS)
def test_the_course_kernel_never_loads_the_nan_keys(seed):
    """``unread_from`` is where the course's own kernel (``_fwd_kernel`` through the same
    ``launch_forward``) stops loading: it gives the reference on every case, the NaN one too."""
    for case in ITEM.cases(seed):
        q, k, v, causal, bq, bk = to_framework(ITEM, case)
        got = as_arrays(triton_forward(q, k, v, causal, block_q=bq, block_k=bk))
        for g, r in zip(got, _outputs(ITEM.reference, case)):
            assert _close(ITEM, g, r)


def test_without_triton_the_item_says_how_to_install_it(monkeypatch):
    """Where the extra is missing, the kernel cell fails (``import triton``) and the function is
    missing: the feedback leads with the install command, not "no flash_fwd_kernel defined"."""
    [plain] = grade_namespace({}, [ITEM], 12345)
    assert plain.status == "missing function" and "pip install" not in plain.message
    monkeypatch.setitem(sys.modules, "triton", None)  # what `import triton` fails on
    [r] = grade_namespace({}, [ITEM], 12345)
    assert r.status == "missing function" and r.points == 0
    assert r.message.startswith(INSTALL_HINT), r.message
    assert 'pip install -e ".[triton]"' in r.message


def test_the_course_kernel_under_if_triton_is_staged_out(tmp_path):
    """``_fwd_kernel`` is defined under ``if triton is not None:``; staging finds and stubs it
    (before, only top-level defs could be forbidden)."""
    stage.check_forbidden(ITEM.forbidden)
    file, node = stage.locate("mha_course.kernels.triton_kernels._fwd_kernel")
    copy = tmp_path / "triton_kernels.py"
    copy.write_text(file.read_text(encoding="utf-8"), encoding="utf-8")
    stage._strip(copy, [("mha_course.kernels.triton_kernels._fwd_kernel", ["_fwd_kernel"])])
    text = copy.read_text(encoding="utf-8")
    assert "ForbiddenCall('mha_course.kernels.triton_kernels._fwd_kernel')" in text
    assert "m_new = tl.maximum(m, tl.max(scores, 1))" not in text  # the forward's body is gone
    assert "_bwd_dq_kernel" in text  # the rest untouched
    compile(text, str(copy), "exec")
