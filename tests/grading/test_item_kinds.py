"""The predict / debug / interpret items' references agree with what the package MEASURES, and their
per-student puzzles have one well-defined answer (issue 15: items that are not "implement X")."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import mha_course
import mha_course.kernels.tiled
from mha_course.grading import all_items
from mha_course.grading.chapters import ch02, ch04, ch07, ch09, ch10
from mha_grader.compare import to_framework
from mha_grader.keys import StudentInputs

ITEMS = {it.id: it for it in all_items()}
KINDS = {  # id -> kind; at least ten items that are not "implement function X"
    "ex01_fix_weights": "debug",
    "ex04_fix_packed_mha": "debug",
    "ex06_fix_padded_sdpa": "debug",
    "ex02_predict_flops": "predict",
    "ex07_predict_gqa_params": "predict",
    "ex09_predict_causal_tiles": "predict",
    "ex13_cache_ablation": "predict",
    "ex02_which_mask": "interpret",
    "ex04_previous_token_head": "interpret",
    "ex06_lengths_from_weights": "interpret",
    "ex07_smallest_cache": "interpret",
}
STUDENTS = [StudentInputs(bytes(range(32)), f"student{i}") for i in range(20)]


def _args(item_id: str, student):
    item = ITEMS[item_id]
    return [to_framework(item, case) for case in item.cases(student)]


def test_ten_items_of_other_kinds_and_the_answers_differ_per_student():
    assert len(KINDS) >= 10 and set(KINDS) <= set(ITEMS)
    for item_id in ("ex02_which_mask", "ex04_previous_token_head", "ex07_smallest_cache"):
        answers = {tuple(ITEMS[item_id].reference(*a) for a in _args(item_id, s)) for s in STUDENTS}
        assert len(answers) > 5, f"{item_id}: the right choices barely differ between students"


@pytest.mark.parametrize("sizes", [(1, 1, 3, 5, 4, 2), (2, 3, 10, 14, 8, 6), (1, 2, 7, 7, 16, 16)])
def test_flops_prediction_is_what_flop_counter_measures(sizes):
    B, H, L, S, D, Dv = sizes
    q, k, v = torch.randn(B, H, L, D), torch.randn(B, H, S, D), torch.randn(B, H, S, Dv)
    with FlopCounterMode(display=False) as counter:
        mha_course.scaled_dot_product_attention(q, k, v)
    assert ch02._flops(*sizes) == counter.get_total_flops()
    if D == Dv:
        assert ch02._flops(*sizes) == mha_course.benchmark.flops.attention_flops(B, H, L, S, D)


@pytest.mark.parametrize(
    "E, H, G, bias", [(48, 6, 2, True), (96, 8, 1, False), (64, 4, 4, True), (40, 10, 5, True)]
)
def test_gqa_parameter_prediction_is_the_module_count(E, H, G, bias):
    module = mha_course.MultiHeadAttention(E, H, num_kv_heads=G, bias=bias)
    assert ch07._gqa_params(E, H, G, bias) == sum(p.numel() for p in module.parameters())


def test_causal_tile_prediction_is_what_tiled_attention_computes():
    real, calls = mha_course.kernels.tiled.online_softmax_update, []

    def counting(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    for args in _args("ex09_predict_causal_tiles", STUDENTS[0]) + [(5, 9, 4, 4), (9, 5, 2, 3)]:
        calls.clear()
        with mock.patch.object(mha_course.kernels.tiled, "online_softmax_update", counting):
            L, S, bq, bk = args
            mha_course.tiled_attention(
                torch.randn(L, 1),
                torch.randn(S, 1),
                torch.randn(S, 1),
                is_causal=True,
                block_q=bq,
                block_k=bk,
            )
        assert ch09._causal_tiles(*args) == len(calls), args


def test_per_example_head_grads_match_gradient_importance():
    """The reference (one backward per example) averaged in absolute value is the package's
    gradient_importance (which accumulates in float32)."""
    for a in _args("ex10_head_mask_grads", STUDENTS[1]):
        grads = ch10._grads_ref(*a)  # (B, layers, H), float64
        model = ch10._grads_model(*a[:5], a[5].shape[1])
        expected = mha_course.gradient_importance(
            model, [(a[5].long(), a[6].long())], ch10._sequence_loss(), normalize=False
        )
        torch.testing.assert_close(grads.abs().mean(0).float(), expected)
        assert grads.abs().min() > 0  # every head's gradient is non-zero: the mistakes are visible


def test_each_mask_puzzle_has_exactly_one_answer():
    for s in STUDENTS:
        for weights, masks in _args("ex02_which_mask", s):
            visible = weights > 0
            assert sum(torch.equal(m, visible) for m in masks) == 1


def test_previous_token_head_is_clear_by_any_reasonable_rule():
    """Reading the plot by the mean weight below the diagonal or by counting the rows whose
    largest weight is there gives the same head: the noise never makes the puzzle ambiguous."""
    for s in STUDENTS:
        for (weights,) in _args("ex04_previous_token_head", s):
            T = weights.shape[-1]
            rows = torch.arange(1, T)
            votes = (weights[:, rows].argmax(-1) == rows - 1).sum(-1)  # (H,)
            assert int(votes.argmax()) == ch04._offset_head(weights, -1)


def test_lengths_puzzle_keeps_every_real_key_visible():
    for s in STUDENTS:
        for (weights,) in _args("ex06_lengths_from_weights", s):
            lengths = ITEMS["ex06_lengths_from_weights"].reference(weights)
            real = torch.arange(weights.shape[-1]) < lengths[:, None]  # (B, S)
            assert bool((weights > 0).all(dim=2).all(dim=1).eq(real).all())


def test_smallest_cache_matches_kv_cache_bytes():
    for s in STUDENTS[:5]:
        for (configs,) in _args("ex07_smallest_cache", s):
            per_token = [
                mha_course.kv_cache_bytes(
                    int(n), int(g), int(d), dtype=ch07._ELEMENT_DTYPES[int(b)]
                )
                for n, h, g, d, b in configs
            ]
            assert ITEMS["ex07_smallest_cache"].reference(configs) == int(np.argmin(per_token))


def test_ablation_reference_is_what_the_course_caches_hold():
    """ex13's ablation: the reference (the course's formula) equals the bytes the course's caches
    hold after a forward pass, for every student's models (MHA, GQA, MQA, more heads, MLA)."""
    from mha_course.grading.chapters.ch13_variants import measured

    item = ITEMS["ex13_cache_ablation"]
    kinds = set()
    for s in STUDENTS[:6]:
        for args in _args("ex13_cache_ablation", s):
            assert torch.equal(item.reference(*args), measured(*args))
            kinds |= {
                "mla" if g == 0 else "mha" if g == h else "gqa"
                for h, g in zip(args[1].tolist(), args[2].tolist())
            }
    assert kinds == {"mla", "mha", "gqa"}
