"""The Part III trained-model experiment: the float cache reproduces ``evaluate``, a window as long
as the context changes nothing, and the committed results file has every cache kind."""

from __future__ import annotations

import json
from pathlib import Path

from torch.testing import assert_close

from mha_course.experiments.kv_cache_losses import DEFAULT_OUT, ROOT, SCHEMA, cache_kinds, loss_with
from mha_course.gpt.checkpoint import load_checkpoint
from mha_course.gpt.data import validation_windows
from mha_course.gpt.evaluate import evaluate
from mha_course.kv_cache import KVCache
from mha_course.window import SlidingWindowCache


def test_float_cache_equals_evaluate_and_full_window_changes_nothing():
    ckpt = load_checkpoint(ROOT / "checkpoints" / "ch13_gqa.pt")
    T = ckpt.config.block_size
    _, val = ckpt.data()
    x, y = validation_windows(val, T, 4)
    ref = evaluate(ckpt.model, val, T, max_windows=4)
    assert_close(loss_with(ckpt.model, x, y, KVCache), ref, rtol=1e-5, atol=1e-6)
    assert_close(loss_with(ckpt.model, x, y, lambda: SlidingWindowCache(T)), ref, rtol=1e-5, atol=1e-6)
    assert loss_with(ckpt.model, x, y, lambda: SlidingWindowCache(4)) > ref


def test_committed_results_have_every_cache_kind():
    res = json.loads(Path(DEFAULT_OUT).read_text())
    assert res["schema"] == SCHEMA and "date_utc" in res["stamp"]
    for m in res["models"].values():
        assert set(m["losses"]) == set(cache_kinds())
        assert abs(m["losses"]["float"] - m["evaluate"]) < 1e-4
