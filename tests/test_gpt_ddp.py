"""Chapter 13: ``mha-course train`` under torchrun (2 CPU ranks, gloo, DistributedDataParallel)
takes the same steps as one process on the same global batch (float64, tight)."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from mha_course.gpt import GPTConfig, TrainConfig, train
from mha_course.gpt.checkpoint import resume_path

FLAGS = dict(
    context_length=16,
    n_layer=1,
    n_head=2,
    n_embd=16,
    batch_size=4,
    max_iters=3,
    eval_interval=3,
    eval_windows=4,
    final_eval_windows=4,
    warmup_iters=1,
    dtype="float64",
)


def test_two_gloo_ranks_equal_one_process(tmp_path):
    model_keys = ("context_length", "n_layer", "n_head", "n_embd")
    train(
        GPTConfig(**{k: FLAGS[k] for k in model_keys}),
        TrainConfig(**{k: v for k, v in FLAGS.items() if k not in model_keys}),
        tmp_path / "one.pt",
        progress=False,
    )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "mha_course.cli",
        "train",
        "--out",
        str(tmp_path / "ddp.pt"),
        "--device",
        "cpu",
        "--no-progress",
        "--threads",
        "1",
    ]
    for k, v in FLAGS.items():
        cmd += ["--" + k.replace("_", "-"), str(v)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "2 process(es)" in done.stdout
    one, ddp = (
        torch.load(resume_path(tmp_path / f"{n}.pt"), weights_only=True) for n in ("one", "ddp")
    )
    assert one["step"] == ddp["step"] == 3
    assert one["model"].keys() == ddp["model"].keys()
    for name, p in one["model"].items():
        assert p.dtype == torch.float64
        torch.testing.assert_close(ddp["model"][name], p, rtol=1e-12, atol=1e-12, msg=name)
    # and the runs really moved the weights (not a comparison of two initialisations)
    init = torch.load(resume_path(tmp_path / "one.pt"), weights_only=True)["optimizer"]
    assert init["state"], "the optimizer took no step"
