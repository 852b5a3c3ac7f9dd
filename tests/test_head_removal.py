"""Chapter 13-14 experiments (issue 24): per-window losses, single-head removal, the greedy order,
the renumbered-sink decode and the matched-distance sink score, on tiny random GPTs, and the
committed results file that notebook 13 reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import TOL64

from mha_course.caches.sink import RenumberedSinkCache
from mha_course.caches.window import SlidingWindowCache
from mha_course.experiments import gpt_head_removal as hr
from mha_course.experiments import sink_distance as sd
from mha_course.gpt import GPT, GPTConfig, evaluate
from mha_course.gpt.data import validation_windows

ROOT = Path(__file__).resolve().parents[1]
V, T = 11, 8


def tiny(positions: str = "learned") -> GPT:
    torch.manual_seed(0)
    return (
        GPT(
            GPTConfig(
                vocab_size=V, context_length=T, n_layer=2, n_head=2, n_embd=16, positions=positions
            )
        )
        .double()
        .eval()
    )


def ids(n: int) -> torch.Tensor:
    return torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(1))


def test_token_losses_average_to_evaluate():
    model, data = tiny(), ids(10 * T + 1)
    x, y = validation_windows(data, T)
    assert abs(hr.token_losses(model, x, y).mean().item() - evaluate(model, data, T)) < 1e-12


def test_spread_windows_cover_the_text():
    data = torch.arange(1000)
    x, y = hr.spread_windows(data, T, 5)
    assert (
        x[0, 0] == 0 and y[-1, -1] == 1000 - 2 and torch.equal(y, x + 1)
    )  # last target: 2nd-last id


def test_greedy_order_removes_the_cheapest_head_first():
    model, data = tiny(), ids(6 * T + 1)
    x, y = validation_windows(data, T)
    order, losses = hr.greedy_order(model, x, y, 2, 2)
    assert sorted(order) == [(i, j) for i in range(2) for j in range(2)] and len(losses) == 3
    single = []
    for layer in range(2):
        for h in range(2):
            m = torch.ones(2, 2)
            m[layer, h] = 0
            single.append((hr.token_losses(model, x, y, m).mean().item(), layer, h))
    assert order[0] == min(single)[1:] and abs(losses[0] - min(single)[0]) < 1e-5


def test_paired_interval_contains_the_mean():
    g = torch.Generator().manual_seed(2)
    a, noise = torch.randn(2, 50, T, dtype=torch.float64, generator=g)
    d = hr.paired(a + 0.5 + noise, a)
    want = (0.5 + noise.mean(1)).mean().item()  # the mean over windows of the per-window gap
    assert abs(d["mean"] - want) < 1e-5 and d["ci95"][0] < d["mean"] < d["ci95"][1] and d["se"] > 0


def test_stretch_decode_with_a_cache_that_keeps_everything_equals_the_forward():
    model, data = tiny("rope"), ids(3 * 2 * T + 1)
    x, y = data[:-1].view(3, 2 * T), data[1:].view(3, 2 * T)
    full = torch.nn.functional.cross_entropy(model(x).transpose(1, 2), y, reduction="none")
    attn = model.blocks[0].attn
    for make in (
        lambda: SlidingWindowCache(2 * T),
        lambda: RenumberedSinkCache(2 * T - 2, 2, rope=attn.rope, rope_base=attn.rope_base),
    ):
        torch.testing.assert_close(sd.stretch_losses(model, x, y, make), full, **TOL64)


def test_sink_excess_zero_for_uniform_positive_for_a_sink(monkeypatch):
    """Uniform causal weights score 0 (every key gets its query's 1/(q+1) share); moving weight
    onto key 0 scores above 0."""
    B = 3
    uniform = torch.tril(torch.ones(T, T, dtype=torch.float64))
    uniform = uniform / uniform.sum(-1, keepdim=True)  # (T, T): row q is 1/(q+1) on keys 0..q
    sink = uniform.clone()
    sink[1:, 0] += 0.5
    sink = sink / sink.sum(-1, keepdim=True)
    x = torch.zeros(B, T, dtype=torch.long)
    for w, check in ((uniform, lambda e: e.abs().max() < 1e-12), (sink, lambda e: (e > 0.1).all())):
        monkeypatch.setattr(
            sd, "attention_weights", lambda m, xb, w=w: w.expand(1, len(xb), 1, T, T)
        )
        e = sd.sink_excess(None, x)
        assert e.shape == (B, 1, 1) and check(e)


def test_sink_excess_raw_and_relative_bracket_a_local_head(monkeypatch):
    """A head that attends only to itself and the previous key depends on distance alone: the raw
    weights score 0 on it; relative to the uniform share they score below 0 (queries later in the
    window have more keys); uniform weights score above 0 raw. The two variants bracket."""
    local = 0.5 * (
        torch.eye(T, dtype=torch.float64) + torch.diag(torch.ones(T - 1, dtype=torch.float64), -1)
    )
    local[0, 0] = 1.0
    uniform = torch.tril(torch.ones(T, T, dtype=torch.float64))
    uniform = uniform / uniform.sum(-1, keepdim=True)
    x = torch.zeros(2, T, dtype=torch.long)
    for w, relative, check in (
        (local, False, lambda e: e.abs().max() < 1e-12),
        (local, True, lambda e: (e < -0.1).all()),
        (uniform, False, lambda e: (e > 0).all()),
    ):
        monkeypatch.setattr(
            sd, "attention_weights", lambda m, xb, w=w: w.expand(1, len(xb), 1, T, T)
        )
        assert check(sd.sink_excess(None, x, relative=relative))


def test_committed_results_match_the_table():
    res = json.loads((ROOT / "results" / "ch13_head_removal.json").read_text())
    assert res["val_windows"] == 593 and len(res["single_removal_train"]) == 16
    for curve in res["curves"].values():
        assert curve[0] == pytest.approx(res["val_loss"]["MHA"], abs=1e-5) and len(curve) == 16
    assert sorted(map(tuple, res["orders"]["greedy"])) == [
        (i, j) for i in range(4) for j in range(4)
    ]
