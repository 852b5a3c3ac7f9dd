"""Chapter 13 §5's held-out slice: the replayed batches are training's own, the target and
stretch bookkeeping, the scoring, and the committed results file."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from mha_course.experiments.gpt_unseen_text import (
    DEFAULT_OUT,
    last_position_losses,
    load_results,
    runs,
    trained_targets,
    training_starts,
)
from mha_course.gpt import GPT, GPTConfig
from mha_course.gpt.data import training_batch, windows


def test_replayed_starts_are_the_training_batches():
    data = torch.arange(500) % 37
    starts = training_starts(len(data), 8, 6, seed=3, steps=range(5))
    for step in range(5):
        x, y = training_batch(data, 8, 6, seed=3, step=step)
        wx, wy = windows(data, starts[step], 8)
        assert torch.equal(x, wx) and torch.equal(y, wy)


def test_trained_targets_are_the_shifted_window():
    t = trained_targets(20, torch.tensor([2, 10]), context_length=3)  # targets 3..5 and 11..13
    assert t.nonzero().flatten().tolist() == [3, 4, 5, 11, 12, 13]


def test_runs():
    assert runs(torch.tensor([3, 4, 5, 9, 11, 12])).tolist() == [0, 0, 0, 1, 2, 2]


def test_last_position_losses():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, context_length=6, n_layer=1, n_head=2, n_embd=8)).eval()
    data = torch.randint(0, 11, (40,))
    targets = torch.tensor([6, 17, 39])
    got = last_position_losses(model, data, targets, 6)
    with torch.no_grad():
        want = [
            F.cross_entropy(model(data[j - 6 : j][None])[0, -1], data[j]).item() for j in targets
        ]
    assert_close(torch.tensor(got), torch.tensor(want, dtype=torch.float64), rtol=1e-6, atol=1e-6)


def test_the_committed_results():
    r = load_results(DEFAULT_OUT)
    assert r["never_trained_targets"] > 1000 and r["never_trained_stretches"] > 100
    assert np.isclose(r["training_windows_drawn"], 2000 * 12)
    never, gap = r["never_minus_trained"], r["validation_minus_never"]
    assert never["ci95"][0] < never["mean"] < never["ci95"][1]
    assert gap["ci95"][0] > 0  # the validation modules are harder than unseen training text


def test_load_results_checks_the_schema(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "other"}')
    with pytest.raises(ValueError, match="path: expected a results file"):
        load_results(bad)
