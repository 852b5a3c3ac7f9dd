"""Chapter 13's induction experiment: the hooked weights are the model's own, the copy losses
score the right positions, the crossing rule, a few steps through the command, and the
committed results file."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from mha_course.experiments.induction_formation import (
    DEFAULT_OUT,
    Config,
    attention_weights,
    copy_losses,
    crossing_step,
    head_ablation_losses,
    load_results,
    main,
    phase_change,
    train_one,
)
from mha_course.gpt.heads import repeated_random_tokens
from mha_course.models.tiny_lm import TinyCausalLM


def test_hooked_weights_are_the_models_own():
    torch.manual_seed(0)
    model = TinyCausalLM(16, 16, 2, 2, max_len=12).double().eval()
    ids = torch.randint(0, 16, (3, 12))
    logits, weights = attention_weights(model, ids)
    assert_close(logits, model(ids), rtol=0, atol=0)  # the hooks change nothing
    assert weights.shape == (2, 3, 2, 12, 12)
    assert not model.attns[0]._forward_hooks and not model.attns[0]._forward_pre_hooks
    # layer 0's weights by hand: softmax(q k^T / sqrt(D)) of the embedded, normed input
    h = model.norms[0](model.tok(ids) + model.pos(torch.arange(12)))
    _, w0 = model.attns[0](h, is_causal=True, need_weights=True)
    assert_close(weights[0], w0, rtol=1e-12, atol=1e-12)
    assert_close(weights.sum(-1), torch.ones(2, 3, 2, 12, dtype=torch.float64))


def test_copy_losses_score_each_half():
    n, V = 5, 7
    ids = repeated_random_tokens(2, n, V, torch.Generator().manual_seed(1))
    logits = torch.randn(2, 2 * n, V, dtype=torch.float64)
    first, second = copy_losses(logits, ids, n)
    per_pos = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    assert_close(first, per_pos[:, 0 : n - 1].mean(-1))  # targets 1 .. n-1
    assert_close(second, per_pos[:, n : 2 * n - 1].mean(-1))  # targets n+1 .. 2n-1
    # a perfect copier (the token after the earlier occurrence) has ~0 loss on the second copy only
    copier = torch.full((2, 2 * n, V), -30.0, dtype=torch.float64)
    for t in range(n, 2 * n - 1):
        copier[torch.arange(2), t, ids[:, t - n + 1]] = 30.0
    first, second = copy_losses(copier, ids, n)
    assert (second < 1e-12).all()
    assert_close(first, torch.full((2,), math.log(V), dtype=torch.float64))  # flat logits there
    with pytest.raises(ValueError, match=r"ids: expected \(B, 2n\)"):
        copy_losses(logits[:, :-1], ids[:, :-1], n)


def test_head_ablation_zeroes_one_heads_output():
    torch.manual_seed(0)
    n = 6
    model = TinyCausalLM(16, 16, 2, 2, max_len=2 * n).double()
    ids = repeated_random_tokens(3, n, 16, torch.Generator().manual_seed(1))
    out = head_ablation_losses(model, ids, n)
    assert set(out) == {"none", "L0H0", "L0H1", "L1H0", "L1H1"}
    assert not model.attns[0]._forward_pre_hooks and model.training  # hooks gone, mode restored
    assert_close(
        torch.tensor(out["none"], dtype=torch.float64),
        copy_losses(model(ids), ids, n)[1].round(decimals=4),
    )
    # head 1 of layer 0 off == its value rows (and bias) zeroed: its output is then zero
    D = 16 // 2
    with torch.no_grad():
        model.attns[0].v_proj.weight[D:] = 0.0
        model.attns[0].v_proj.bias[D:] = 0.0
        by_hand = copy_losses(model(ids), ids, n)[1].round(decimals=4)
    assert_close(torch.tensor(out["L0H1"], dtype=torch.float64), by_hand)
    assert out["L0H1"] != out["none"]  # the switch did something


def test_crossing_step():
    steps = [0, 10, 20, 30]
    assert crossing_step(steps, [4.0, 3.9, 1.0, 0.5], rising=False) == 20  # mid-point 2.25
    assert crossing_step(steps, [0.0, 0.1, 0.2, 0.9], rising=True) == 30  # mid-point 0.45
    assert crossing_step(steps, [0.0, 0.1, 0.2, 0.9], rising=True, fraction=0.2) == 20  # 0.18
    with pytest.raises(ValueError, match="fraction:"):
        crossing_step(steps, [0.0, 1.0, 1.0, 1.0], rising=True, fraction=1.0)
    with pytest.raises(ValueError, match="values: no crossing"):
        crossing_step(steps, [float("nan")] * 4, rising=True)


def test_a_few_steps_through_the_command(tmp_path):
    out = tmp_path / "r.json"
    main(["--steps", "4", "--seeds", "0", "1", "--out", str(out)])
    data = load_results(out)
    assert set(data["curves"]) == {"0", "1"} and data["config"]["steps"] == 4
    assert {"torch", "cpu_model"} <= set(data["stamp"])
    c = data["curves"]["0"]
    assert c["step"] == [0]  # eval_every 10 > 4 steps: step 0 only
    assert len(c["induction"][0]) == Config.num_layers
    assert abs(data["ln_vocab"] - math.log(Config.vocab_size)) < 1e-12


def test_training_is_deterministic():
    cfg = Config(steps=6, eval_every=3, eval_batch=8, seeds=(0,))
    a, b = (train_one(cfg, 0, log=lambda s: None) for _ in range(2))
    assert a == b and a["step"] == [0, 3, 6]


def test_the_committed_results_show_the_phase_change():
    data = load_results(DEFAULT_OUT)
    ln_v = data["ln_vocab"]
    for seed, curve in data["curves"].items():
        p = phase_change(curve)
        assert p["induction_head"].startswith("L1"), seed  # layer 1 composes with layer 0
        assert abs(p["loss_step"] - p["induction_step"]) <= 4 * data["config"]["eval_every"], seed
        assert curve["loss_second"][-1] < 1.0 < ln_v - 0.5 < curve["loss_first"][-1], seed
        # the ablation: the layer-0 previous-token head off costs far more than the weakest one off
        on, prev = torch.tensor(curve["ablation"]["none"]), curve["previous"][-1][0]
        cost = [torch.tensor(curve["ablation"][f"L0H{h}"]).sub(on).mean() for h in range(len(prev))]
        assert cost[int(p["previous_head"][3:])] > 0.7, seed
        assert abs(cost[min(range(len(prev)), key=prev.__getitem__)]) < 0.15, seed


def test_load_results_checks_the_schema(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "other"}')
    with pytest.raises(ValueError, match="path: expected a results file"):
        load_results(bad)
