"""Chapter 13: an induction head forming — the loss's phase change and the head score, together.

Chapter 13's GPT has no induction head (§7). This experiment grows one, in the setting where
Olsson et al. (2022) describe them: a small **attention-only** causal model (chapter 5's
:class:`~mha_course.models.tiny_lm.TinyCausalLM`: token + position embeddings, ``num_layers`` blocks
``h + MultiHeadAttention(LayerNorm(h))``, a read-out) trained on ``r r`` — ``period`` uniformly
random tokens, then the same tokens again (:func:`~mha_course.gpt.heads.repeated_random_tokens`).
The first copy cannot be predicted (its loss stays near ln V); the second can, by exactly the
induction rule "find the earlier occurrence of the current token, copy the token after it".

Recorded every ``eval_every`` steps, on a fixed evaluation batch, for each seed:

* the **behavioural test**: mean next-token loss on the first copy (targets 1 … n−1) and on the
  second copy (targets n+1 … 2n−1, the ones an induction rule predicts);
* every head's **induction score** (:func:`~mha_course.gpt.heads.induction_score`) and
  **previous-token score** (:func:`~mha_course.gpt.heads.previous_token_score`): the two halves
  of the circuit (a previous-token head in layer 0, an induction head in layer 1).

After training, the **ablation** (:func:`head_ablation_losses`): each head switched off in turn
(its output zeroed), the second copy's loss per evaluation sequence — the score's correlation
turned into a causal test.

Run ``python -m mha_course.experiments.induction_formation`` (about 30 CPU-seconds per seed on one
thread); it writes ``results/ch13_induction.json``, stamped with its config, versions, hardware
and wall time, which notebook 13 loads.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from mha_course.benchmark.stamp import environment_stamp
from mha_course.experiments.results_file import read_results
from mha_course.gpt.heads import induction_score, previous_token_score, repeated_random_tokens
from mha_course.models.tiny_lm import TinyCausalLM

SCHEMA = "mha-course-induction-formation/2"  # 2: each curve has its "ablation"
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "results" / "ch13_induction.json"


@dataclass
class Config:
    vocab_size: int = 64  # V
    period: int = 24  # n: the evaluation sequences are r r, 2n tokens
    min_period: int = 8  # training periods are drawn from min_period … period, one per batch
    embed_dim: int = 64  # E
    num_heads: int = 4  # H
    num_layers: int = 2
    steps: int = 1200
    batch_size: int = 32
    lr: float = 3e-3
    eval_every: int = 10
    eval_batch: int = 128
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)


def attention_weights(model: TinyCausalLM, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's logits and every layer's attention weights, from one ordinary forward.

    Hooks ask each :class:`~mha_course.MultiHeadAttention` for its weights
    (``need_weights=True``) and record them, so the forward itself is the model's own.

    Shape:
        ids: (B, T). Returns logits (B, T, V) and weights (num_layers, B, H, T, T).
    """
    captured: list[torch.Tensor] = []

    def ask(module, args, kwargs):
        return args, {**kwargs, "need_weights": True}

    def record(module, args, kwargs, output):
        captured.append(output[1])  # output: (out, weights); returned unchanged

    handles = []
    for attn in model.attns:
        handles.append(attn.register_forward_pre_hook(ask, with_kwargs=True))
        handles.append(attn.register_forward_hook(record, with_kwargs=True))
    try:
        logits = model(ids)
    finally:
        for h in handles:
            h.remove()
    return logits, torch.stack(captured)  # num_layers x (B, H, T, T) -> (num_layers, B, H, T, T)


def copy_losses(
    logits: torch.Tensor, ids: torch.Tensor, period: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sequence mean next-token loss on the first copy and on the second copy of ``r r``.

    First copy: queries t = 0 … n−2 predict tokens 1 … n−1 (unpredictable, random). Second copy:
    queries t = n … 2n−2 predict tokens n+1 … 2n−1, each the token after the earlier occurrence of
    the query's token. (Query n−1 predicts r_0, which no earlier occurrence announces: left out.)

    Shape:
        logits: (B, 2n, V); ids: (B, 2n). Returns two (B,) float64 tensors, in nats.
    """
    n = period
    if ids.shape[1] != 2 * n:
        raise ValueError(
            f"ids: expected (B, 2n) = (B, {2 * n}) for period n = {n}, got {tuple(ids.shape)}"
        )
    loss = F.cross_entropy(
        logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none"
    ).double()  # (B, V, 2n-1) vs (B, 2n-1) -> (B, 2n-1)
    return loss[:, : n - 1].mean(-1), loss[:, n:].mean(-1)


@torch.no_grad()
def measure(model: TinyCausalLM, ids: torch.Tensor, period: int) -> dict:
    """Both copies' losses and every head's induction and previous-token scores on ``ids``."""
    model.eval()
    logits, weights = attention_weights(model, ids)
    first, second = copy_losses(logits, ids, period)
    model.train()
    ind = torch.stack([induction_score(w, period) for w in weights])  # (num_layers, H)
    prev = torch.stack([previous_token_score(w) for w in weights])  # (num_layers, H)
    # 5 decimals: far below the seed-to-seed spread, and a results file of ~100 kB, not ~350
    return {
        "loss_first": round(first.mean().item(), 5),
        "loss_second": round(second.mean().item(), 5),
        "induction": ind.double().round(decimals=5).tolist(),
        "previous": prev.double().round(decimals=5).tolist(),
    }


@torch.no_grad()
def head_ablation_losses(model: TinyCausalLM, ids: torch.Tensor, period: int) -> dict:
    """Per-sequence second-copy loss with every head on (``"none"``), then with each head
    switched off alone (``"L0H1"``: layer 0, head 1; its output zeroed by ``head_mask``).

    Shape:
        ids: (B, 2n). Returns {name: B losses in nats, rounded to 4 decimals}.
    """
    model.eval()
    H = model.attns[0].num_heads
    out = {"none": copy_losses(model(ids), ids, period)[1]}
    for layer, attn in enumerate(model.attns):
        for head in range(H):
            mask = torch.ones(H)
            mask[head] = 0.0

            def switch_off(module, args, kwargs, mask=mask):
                return args, {**kwargs, "head_mask": mask}

            handle = attn.register_forward_pre_hook(switch_off, with_kwargs=True)
            try:
                out[f"L{layer}H{head}"] = copy_losses(model(ids), ids, period)[1]
            finally:
                handle.remove()
    model.train()
    return {k: v.round(decimals=4).tolist() for k, v in out.items()}  # (B,) each


def train_one(cfg: Config, seed: int, log=print) -> dict:
    """Train one seeded model, measuring every ``eval_every`` steps (step 0 included)."""
    torch.manual_seed(seed)
    n = cfg.period
    model = TinyCausalLM(
        cfg.vocab_size, cfg.embed_dim, cfg.num_heads, cfg.num_layers, max_len=2 * n
    )
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    data = torch.Generator().manual_seed(10_000 + seed)  # training batches
    eval_ids = repeated_random_tokens(
        cfg.eval_batch, n, cfg.vocab_size, torch.Generator().manual_seed(20_000 + seed)
    )
    curve: dict[str, list] = {
        "step": [],
        "loss_first": [],
        "loss_second": [],
        "induction": [],
        "previous": [],
    }
    for step in range(cfg.steps + 1):
        if step % cfg.eval_every == 0:
            m = measure(model, eval_ids, n)
            curve["step"].append(step)
            for key, value in m.items():
                curve[key].append(value)
        if step == cfg.steps:
            break
        # a new period every batch: the copy sits at no fixed offset, so a head that attends
        # "n - 1 positions back" by position alone cannot solve the task; finding the token does
        n_step = int(torch.randint(cfg.min_period, n + 1, (1,), generator=data))
        ids = repeated_random_tokens(cfg.batch_size, n_step, cfg.vocab_size, data)
        logits = model(ids)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    curve["ablation"] = head_ablation_losses(model, eval_ids, n)
    last = {k: curve[k][-1] for k in ("loss_first", "loss_second")}
    log(
        f"seed {seed}: first copy {last['loss_first']:.3f}, second copy {last['loss_second']:.3f} "
        f"nats; best induction score {max(max(r) for r in curve['induction'][-1]):.3f}"
    )
    return curve


def run(cfg: Config, log=print) -> dict:
    start, cpu_start = time.perf_counter(), time.process_time()
    curves = {str(seed): train_one(cfg, seed, log) for seed in cfg.seeds}
    n, T = cfg.period, 2 * cfg.period
    uniform = sum(1 / (t + 1) for t in range(n, T)) / (T - n)  # a uniform head's induction score
    return {
        "schema": SCHEMA,
        "config": asdict(cfg),
        "stamp": environment_stamp("cpu"),
        "wall_seconds": round(time.perf_counter() - start, 1),
        "cpu_seconds": round(
            time.process_time() - cpu_start, 1
        ),  # wall is longer on a busy machine
        "curves": curves,
        "ln_vocab": math.log(cfg.vocab_size),
        "uniform_induction": uniform,
        "task": "r r: period random tokens, then the same tokens; attention-only TinyCausalLM",
        "command": "python -m mha_course.experiments.induction_formation",
    }


def crossing_step(
    steps: list[int], values: list[float], rising: bool, fraction: float = 0.5
) -> int:
    """The first step at which ``values`` has gone ``fraction`` of the way from its first value
    to its last (half-way by default): at or above that level when ``rising``, at or below it
    otherwise."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction: expected a number in (0, 1), got {fraction}")
    level = values[0] + fraction * (values[-1] - values[0])
    for step, v in zip(steps, values):
        if (v >= level) if rising else (v <= level):
            return step
    raise ValueError("values: no crossing (the curve never reaches that level)")


def phase_change(curve: dict) -> dict:
    """Where one seed's second-copy loss falls, and where its heads' scores rise, half-way.

    ``induction_head`` is the head with the highest final induction score ("L1H2"), and
    ``previous_head`` the layer-0 head with the highest final previous-token score; each score
    is that head's curve. Returns the three crossing steps and the heads' names.
    """
    steps = curve["step"]
    final_ind = torch.tensor(curve["induction"][-1])  # (num_layers, H)
    li, hi = divmod(int(final_ind.argmax()), final_ind.shape[1])
    hp = int(torch.tensor(curve["previous"][-1][0]).argmax())
    return {
        "loss_step": crossing_step(steps, curve["loss_second"], rising=False),
        "induction_step": crossing_step(steps, [r[li][hi] for r in curve["induction"]], True),
        "previous_step": crossing_step(steps, [r[0][hp] for r in curve["previous"]], True),
        "induction_head": f"L{li}H{hi}",
        "previous_head": f"L0H{hp}",
    }


def load_results(path: Path = DEFAULT_OUT) -> dict:
    return read_results(path, SCHEMA)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=Config.steps)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(Config.seeds))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small tensors: one thread, and the sums keep one order
    data = run(Config(steps=args.steps, seeds=tuple(args.seeds)))
    args.out.write_text(json.dumps(data) + "\n")  # one line: the curves are ~30,000 numbers
    print(f"wrote {args.out} ({data['wall_seconds']:.0f} s)")


if __name__ == "__main__":
    main()
