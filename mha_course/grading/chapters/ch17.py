"""Chapter 17's graded items: the backward's D term, one tile of dQ, the log-sum-exp merge, the
Triton forward kernel, and (optional, its own 3 points) the Triton dQ kernel."""

from __future__ import annotations

import numpy as np
import torch

from mha_course.grading import mistakes as common
from mha_course.grading.forbidden import ATTENTION
from mha_course.grading.oracles import triton_dq_kernel as dqk
from mha_course.grading.oracles import triton_forward as fwd
from mha_course.kernels.flash_backward import backward_d_term
from mha_course.kernels.triton_flash import INSTALL_HINT
from mha_grader.items import DefsOnly, DriverItem, Item, Mistake

NOTEBOOK = "ex17_flash_attention_triton"
# Reviewed: the package's backward passes answer dQ of a tile (pick ``out`` so that rowsum(dO * O)
# is the given D), the online-softmax update merges two partials (one key of score lse_b, value
# out_b); the forward kernel: the course's own kernel, its launches, any attention (the
# interpreter runs Python, so torch's SDPA too); ``launch_forward`` stays, the driver needs it;
# the dQ kernel: the course's ``_bwd_dq_kernel`` and the backward passes (``launch_dq`` stays).
# One list for the notebook, so its items share one unit in the sandbox.
_FORBID = (
    "mha_course.kernels.flash_backward.backward_d_term",
    "mha_course.kernels.flash_backward.flash_attention_backward",
    "mha_course.kernels.flash_backward._tile_weights",  # a tile's P from the log-sum-exp
    "mha_course.kernels.triton_flash.triton_backward",
    "mha_course.kernels.triton_kernels._bwd_dq_kernel",
    *ATTENTION,  # the course's Triton forward and its kernel among them (forbidden.py)
)
# The Triton items' unit runs the notebook's @triton.jit definitions (and the constants and triton
# imports they need) only, never a cell, and each kernel must compile for a GPU before its values
# are graded under the interpreter: a body that is Python (torch reaching the interpreter's
# frames) is not Triton (issue #30, route 3; mha_grader/sandbox/defs_only.py).
_TRITON_ONLY = DefsOnly(
    decorators=("triton.jit",),
    modules=("triton",),
    check="mha_course.grading.child.triton_compile:check_compiles",
    setup=("mha_course.kernels.triton_setup",),
)
_D_NO_OUTPUT = "D summed dO alone: D_i = rowsum(dO_i * O_i), the product with the output O"
_D_WRONG_AXIS = "summed over the query rows (dim -2): D has one number per row, sum over dim -1"
_DQ_NO_D = "dS = P * dP without subtracting D: the softmax backward is dS = P * (dP - D)"
_DQ_NO_SCALE = "dQ not multiplied by scale: s = scale * Q K^T, so dQ = scale * dS K"
_DQ_LOCAL_SOFTMAX = (
    "P recomputed with a softmax over the tile: each tile's P sums to 1 on its own, "
    "not over the whole row"
)
_MERGE_NO_MAX = (
    "exp of a log-sum-exp taken without the larger one subtracted first: exp(100) is inf in "
    "float32, and an inf in the merged lse or in the weights' sums leaves inf, 0 or NaN"
)
_MERGE_AVERAGE = (
    "outputs averaged: the two partial outputs got equal weight, not each one its share "
    "of the total softmax mass"
)
_MERGE_LSE_MAX = "lse = max(lse_a, lse_b): the merged log-sum-exp is logaddexp(lse_a, lse_b)"


def _d_cases(rng: np.random.Generator) -> list[dict]:
    return [
        {
            "out": rng.normal(size=(2, 3, 5, 4)).astype(np.float32),
            "d_out": rng.normal(size=(2, 3, 5, 4)).astype(np.float32),
        },
        {"out": rng.normal(size=(7, 3)), "d_out": rng.normal(size=(7, 3))},
        {"out": rng.normal(size=(2, 6, 6)), "d_out": rng.normal(size=(2, 6, 6)) + 1.0},
    ]


def _tile(rng, lead, Bq, Bk, D, dtype):
    q, k, v = (rng.normal(size=(*lead, n, D)).astype(dtype) for n in (Bq, Bk, Bk))
    d_out = rng.normal(size=(*lead, Bq, D)).astype(dtype)
    # lse of the whole row: this tile's keys plus more keys elsewhere (so it exceeds the tile's).
    lse = (rng.normal(size=(*lead, Bq)) + np.log(Bk) + 2.0).astype(dtype)
    d_term = rng.normal(size=(*lead, Bq)).astype(dtype)
    return {
        "q": q,
        "k": k,
        "v": v,
        "d_out": d_out,
        "lse": lse,
        "d_term": d_term,
        "scale": float(1 / np.sqrt(D)),
    }


def _dq_cases(rng: np.random.Generator) -> list[dict]:
    return [
        _tile(rng, (2,), 4, 3, 8, np.float32),
        _tile(rng, (), 5, 6, 4, np.float64),
        _tile(rng, (2, 2), 3, 4, 4, np.float32),
    ]


def _dq_ref(q, k, v, d_out, lse, d_term, scale, use_d=True, use_scale=True, local=False):
    s = scale * (q @ k.transpose(-2, -1))  # (..., Bq, D) @ (..., D, Bk) -> (..., Bq, Bk)
    p = torch.softmax(s, -1) if local else torch.exp(s - lse.unsqueeze(-1))
    dp = d_out @ v.transpose(-2, -1)  # (..., Bq, D) @ (..., D, Bk)
    ds = p * (dp - d_term.unsqueeze(-1)) if use_d else p * dp
    return (scale if use_scale else 1.0) * (ds @ k)


def _merge_cases(rng: np.random.Generator) -> list[dict]:
    cases = []
    for lead, L, Dv, dtype, spread in [
        ((2,), 4, 3, np.float32, 1.0),
        ((), 5, 2, np.float64, 8.0),
        ((2, 2), 3, 4, np.float64, 30.0),
    ]:
        cases.append(
            {
                "out_a": rng.normal(size=(*lead, L, Dv)).astype(dtype),
                "lse_a": (rng.normal(size=(*lead, L)) * spread).astype(dtype),
                "out_b": rng.normal(size=(*lead, L, Dv)).astype(dtype),
                "lse_b": (rng.normal(size=(*lead, L)) * spread).astype(dtype),
            }
        )
    # float32 log-sum-exps of 90..300 (long rows of large scores): exp(lse) overflows float32
    cases.append(
        {
            "out_a": rng.normal(size=(3, 2)).astype(np.float32),
            "lse_a": rng.uniform(90, 300, size=3).astype(np.float32),
            "out_b": rng.normal(size=(3, 2)).astype(np.float32),
            "lse_b": rng.uniform(90, 300, size=3).astype(np.float32),
        }
    )
    return cases


def _merge_ref(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)  # (..., L)
    out = (
        torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b
    )
    return out, lse


ITEMS = [
    Item(
        id="ex17_d_term",
        notebook=NOTEBOOK,
        function="d_term",
        points=1,
        task="D = rowsum(dO * O): the softmax backward's row term from the output",
        make_cases=_d_cases,
        shape="(..., L)",
        reference=lambda out, d_out: backward_d_term(out, d_out),
        mistakes=(
            Mistake("dO alone", _D_NO_OUTPUT, variant=lambda out, d_out: d_out.sum(-1)),
            Mistake("wrong axis", _D_WRONG_AXIS, variant=lambda out, d_out: (out * d_out).sum(-2)),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex17_dq_tile",
        notebook=NOTEBOOK,
        function="dq_tile",
        points=2,
        task="one (Bq, Bk) tile's contribution to dQ: P from lse, dS = P * (dP - D), scale * dS K",
        make_cases=_dq_cases,
        shape="(..., Bq, D)",
        reference=_dq_ref,
        mistakes=(
            Mistake("no D", _DQ_NO_D, variant=lambda *a: _dq_ref(*a, use_d=False)),
            Mistake("no scale", _DQ_NO_SCALE, variant=lambda *a: _dq_ref(*a, use_scale=False)),
            Mistake(
                "softmax over the tile",
                _DQ_LOCAL_SOFTMAX,
                variant=lambda *a: _dq_ref(*a, local=True),
            ),
        ),
        forbidden=_FORBID,
    ),
    Item(
        id="ex17_lse_merge",
        notebook=NOTEBOOK,
        function="merge_partials",
        points=2,
        task="merge two partial attention results over disjoint keys by their log-sum-exps",
        make_cases=_merge_cases,
        shape="(..., L, Dv), (..., L)",
        reference=_merge_ref,
        mistakes=(
            Mistake(
                "no max",
                _MERGE_NO_MAX,
                # on the large-lse case only: lse inf (or NaN), and out 0 (each weight exp(lse_a -
                # inf)) or NaN
                matches=lambda got, case: (
                    float(np.min(case["lse_a"])) > 50
                    and got.dtype.kind == "f"
                    and (not np.isfinite(got).all() or not np.abs(got).any())
                ),
            ),
            Mistake(
                "averaged",
                _MERGE_AVERAGE,
                variant=lambda oa, la, ob, lb: ((oa + ob) / 2, torch.logaddexp(la, lb)),
            ),
            Mistake(
                "lse max",
                _MERGE_LSE_MAX,
                variant=lambda oa, la, ob, lb: (
                    _merge_ref(oa, la, ob, lb)[0],
                    torch.maximum(la, lb),
                ),
            ),
        ),
        forbidden=_FORBID,
    ),
    DriverItem(
        id="ex17_triton_forward",
        notebook=NOTEBOOK,
        function="flash_fwd_kernel",
        points=5,
        task="the FlashAttention-2 forward kernel in Triton: online softmax over key blocks, "
        "O and the log-sum-exp, causal block skipping, GQA",
        make_cases=fwd.make_cases,
        shape="(B, H, L, D), (B, H, L)",
        reference=fwd.reference,
        driver="mha_course.grading.child.drivers:drive_forward_kernel",
        requires=(("triton", INSTALL_HINT),),
        defs_only=_TRITON_ONLY,
        mistakes=(
            Mistake(
                "accumulator not rescaled", fwd.NO_RESCALE, variant=fwd.variant(rescale_acc=False)
            ),
            Mistake(
                "row sum not rescaled", fwd.SUM_NO_RESCALE, variant=fwd.variant(rescale_sum=False)
            ),
            Mistake("lse without the max", fwd.LSE_NO_MAX, variant=fwd.variant(lse_max=False)),
            # Before "not causal" (it loads the NaN keys too, but is named on a finite case first).
            Mistake(
                "no causal block skipping",
                fwd.NO_SKIP,
                variant=fwd.variant(stop="never"),
                status="non-finite",
            ),
            Mistake("not causal", fwd.NOT_CAUSAL, variant=fwd.variant(mask="none", stop="never")),
            Mistake("no causal mask", fwd.CAUSAL_NO_MASK, variant=fwd.variant(mask="none")),
            Mistake("off by one", common.CAUSAL_OFF_BY_ONE, variant=fwd.variant(mask="strict")),
            Mistake(
                "bottom-right",
                fwd.CAUSAL_BOTTOM_RIGHT,
                variant=fwd.variant(mask="bottom_right", stop="bottom_right"),
            ),
            Mistake(
                "diagonal block skipped", fwd.SKIP_DIAGONAL, variant=fwd.variant(stop="diagonal")
            ),
            Mistake("stop by BLOCK_N", fwd.SKIP_BY_BLOCK_N, variant=fwd.variant(stop="block_k")),
            Mistake(
                "skipped when not causal", fwd.SKIP_NOT_CAUSAL, variant=fwd.variant(stop="always")
            ),
            Mistake(
                "kv heads interleaved",
                common.REPEAT_NOT_INTERLEAVE,
                variant=fwd.variant(kv="interleaved"),
            ),
            Mistake("kv of batch 0", fwd.KV_NO_BATCH, variant=fwd.variant(kv="batch0")),
            Mistake("ragged keys kept", fwd.RAGGED_KEYS, variant=fwd.variant(ragged="zeros")),
        ),
        forbidden=_FORBID,
    ),
    DriverItem(
        id="ex17_triton_dq",
        notebook=NOTEBOOK,
        function="flash_dq_kernel",
        points=3,
        task="(optional) the FlashAttention-2 dQ kernel in Triton: P recomputed from the lse, "
        "dS = P * (dP - D), dQ = scale * dS K over the key blocks a query block sees, GQA",
        make_cases=dqk.make_cases,
        shape="(B, H, L, D)",
        reference=dqk.reference,
        driver="mha_course.grading.child.drivers:drive_dq_kernel",
        requires=(("triton", INSTALL_HINT),),
        defs_only=_TRITON_ONLY,
        mistakes=(
            Mistake("P without the scale", dqk.P_NO_SCALE, variant=dqk.variant(scale_p=False)),
            Mistake("dQ not scaled", dqk.DQ_NO_SCALE, variant=dqk.variant(scale_dq=False)),
            Mistake("P without the lse", dqk.P_NO_LSE, variant=dqk.variant(use_lse=False)),
            Mistake("no D", dqk.NO_D, variant=dqk.variant(d_term="none")),
            Mistake("dS sign", dqk.D_SIGN, variant=dqk.variant(d_term="reversed")),
            Mistake("not causal", dqk.NOT_CAUSAL, variant=dqk.variant(mask="none", stop="never")),
            Mistake("no causal mask", dqk.NO_CAUSAL_MASK, variant=dqk.variant(mask="none")),
            Mistake("off by one", common.CAUSAL_OFF_BY_ONE, variant=dqk.variant(mask="strict")),
            Mistake(
                "diagonal block skipped", dqk.SKIP_DIAGONAL, variant=dqk.variant(stop="diagonal")
            ),
            Mistake(
                "kv heads interleaved",
                common.REPEAT_NOT_INTERLEAVE,
                variant=dqk.variant(kv="interleaved"),
            ),
            Mistake("kv of batch 0", dqk.KV_NO_BATCH, variant=dqk.variant(kv="batch0")),
            Mistake(
                "masked loads without other",
                dqk.UNDEFINED_LANES,
                matches=dqk.has_nan,
                status="non-finite",
            ),
        ),
        forbidden=_FORBID,
    ),
]
