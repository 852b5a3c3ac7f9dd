"""Chapter 12's extrapolation experiment: the model's position schemes, a few training steps
through the same code path as the committed results, and the committed results file itself."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from mha_course.experiments.extrapolation import (
    DEFAULT_OUT,
    Config,
    load_results,
    main,
    previous_token_batch,
    run,
)
from mha_course.models.position_lm import POSITION_SCHEMES, PositionalTransformer


def test_previous_token_targets():
    tokens, targets = previous_token_batch(3, 6, 5, torch.Generator().manual_seed(0))
    assert (targets[:, 0] == -100).all() and torch.equal(targets[:, 1:], tokens[:, :-1])


@pytest.mark.parametrize("positions", POSITION_SCHEMES)
def test_only_no_positions_is_permutation_equivariant(positions):
    torch.manual_seed(0)
    m = PositionalTransformer(8, positions, max_len=16, causal=False).double().eval()
    tokens = torch.randint(0, 8, (2, 10))
    perm = torch.randperm(10)
    with torch.no_grad():
        equal = torch.allclose(m(tokens[:, perm]), m(tokens)[:, perm], rtol=1e-10, atol=1e-10)
    assert equal == (positions == "none")


def test_bad_scheme():
    with pytest.raises(ValueError, match="positions:"):
        PositionalTransformer(8, "absolute")


def test_a_few_steps_through_the_command(tmp_path):
    out = tmp_path / "r.json"
    main(["--steps", "2", "--seeds", "0", "--schemes", "none", "rope", "--out", str(out)])
    data = load_results(out)
    assert set(data["results"]) == {"none", "rope"}
    r = data["results"]["rope"]
    assert len(r["accuracy_by_position"][0]) == 4 * Config.train_len - 1
    assert all(0.0 <= a <= 1.0 for a in r["accuracy_at"]["2"])
    assert all(0.0 <= a <= 1.0 for a in r["attention_beyond_training"][0])


def test_training_is_deterministic():
    cfg = Config(steps=3, seeds=(0,), eval_batch=16)
    a, b = (run(cfg, ("learned",), log=lambda s: None)["results"]["learned"] for _ in range(2))
    assert_close(torch.tensor(a["accuracy_by_position"]), torch.tensor(b["accuracy_by_position"]))


def test_committed_results_match_the_code():
    data = load_results(DEFAULT_OUT)
    assert set(data["results"]) == set(POSITION_SCHEMES)
    assert data["config"] == json.loads(json.dumps(asdict(Config())))  # made with today's defaults
    for r in data["results"].values():
        assert len(r["accuracy_by_position"]) == len(Config.seeds)
        assert np.array(r["attention_beyond_training"]).shape == (
            len(Config.seeds),
            Config.num_layers,
        )
    for key in ("torch", "cpu_model", "threads", "date_utc"):
        assert key in data["stamp"]


def test_load_results_rejects_other_files(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"schema": "something-else"}))
    with pytest.raises(ValueError, match="path:"):
        load_results(bad)
