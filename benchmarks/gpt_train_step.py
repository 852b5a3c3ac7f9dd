"""Chapter 13 benchmark: one training step of the course's GPT vs the same model on torch's parts.

    .venv/bin/python benchmarks/gpt_train_step.py                 # shipped config, 1 thread
    .venv/bin/python benchmarks/gpt_train_step.py --n-kv-head 1 --threads 2

One step = forward + backward + AdamW step at the shipped config (B=12, T=64, E=128, 4 layers,
4 heads). "course" is :class:`mha_course.gpt.GPT` (``MultiHeadAttention``, ``impl="sdpa"``);
"torch" is the same model, same weights, with attention written as four ``nn.Linear`` and
``F.scaled_dot_product_attention`` (:func:`mha_course.gpt.reference.torch_reference`). The two
take turns round by round; the medians and their ratio are printed. Issue 12's target: the
course model <= 1.10x. Not a test: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os

import torch

from mha_course.benchmark.timing import round_ratios, time_interleaved
from mha_course.gpt import GPT, GPTConfig, TrainConfig, lm_loss
from mha_course.gpt.reference import torch_reference
from mha_course.gpt.train import make_optimizer

BASELINE = "torch (nn.Linear + SDPA)"  # the row every ratio is taken against


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-kv-head", type=int, default=None, help="G (default H: MHA)")
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    course = GPT(GPTConfig(n_kv_head=args.n_kv_head)).train()
    ref = torch_reference(course).train()
    T, V = course.config.context_length, course.config.vocab_size
    x = torch.randint(0, V, (args.batch_size, T))
    y = torch.randint(0, V, (args.batch_size, T))
    with torch.no_grad():  # never time a wrong answer
        torch.testing.assert_close(ref(x), course(x))

    def stepper(model):
        opt = make_optimizer(model, TrainConfig())

        def step():
            loss = lm_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        return step

    fns = {"course (MultiHeadAttention, sdpa)": stepper(course), BASELINE: stepper(ref)}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"GPT train step: B={args.batch_size} T={T} E={course.config.n_embd} "
        f"L={course.config.n_layer} H={course.config.n_head} G={course.config.kv_heads} fp32, "
        f"{args.threads} thread(s), {args.rounds} interleaved rounds, load average {load:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    results = time_interleaved(fns, "cpu", rounds=args.rounds, threads=args.threads)
    for name, r in results.items():
        rr = round_ratios(r, results[BASELINE])  # per round, then the median
        print(
            f"{name:>34}: median {r['ms_median']:8.2f} ms  IQR {r['ms_iqr']:6.2f} ms  "
            f"ratio {rr['median']:5.3f} (per-round median; quartiles {rr['q1']:.3f}-{rr['q3']:.3f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
