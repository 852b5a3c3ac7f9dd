"""Chapter 12: length extrapolation — train at length L, evaluate at L, 2L and 4L.

One small task for every position scheme of :class:`~mha_course.models.position_lm.PositionalTransformer`
(none, learned, sinusoidal, ALiBi, RoPE): a causal model reads random tokens and must output, at
every position t >= 1, the token at t - 1 (the "previous-token" lookup that induction heads build
on). The rule is the same at every length, so a scheme that really encodes *relative* position
has no reason to fail beyond L; one that memorised absolute positions does.

Run ``python -m mha_course.experiments.extrapolation`` (about 5 minutes on one CPU thread); it
writes ``results/ch12_extrapolation.json``, stamped with its config, versions, hardware and wall
time, which notebook 12 loads.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from mha_course.benchmark.stamp import environment_stamp
from mha_course.models.position_lm import POSITION_SCHEMES, PositionalTransformer

SCHEMA = "mha-course-extrapolation/1"
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "results" / "ch12_extrapolation.json"


@dataclass
class Config:
    vocab_size: int = 16
    train_len: int = 32  # L
    eval_factors: tuple[int, ...] = (1, 2, 4)  # evaluate at L, 2L, 4L
    steps: int = 400
    batch_size: int = 32
    lr: float = 3e-3
    embed_dim: int = 32
    num_heads: int = 4
    num_layers: int = 2
    eval_batch: int = 256
    seeds: tuple[int, ...] = (0, 1, 2)


def previous_token_batch(
    batch_size: int, seq_len: int, vocab_size: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens and their targets: ``targets[:, t] = tokens[:, t - 1]``, ``-100`` (ignored
    by ``cross_entropy``) at t = 0.

    Shape:
        Returns tokens (B, T) and targets (B, T), int64.
    """
    tokens = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)
    targets = torch.full_like(tokens, -100)
    targets[:, 1:] = tokens[:, :-1]
    return tokens, targets


def train_one(positions: str, cfg: Config, seed: int = 0) -> PositionalTransformer:
    """Train one model at length ``cfg.train_len`` (seeded, deterministic on one thread)."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    max_len = cfg.train_len * max(cfg.eval_factors)  # learned rows past L are never trained
    model = PositionalTransformer(
        cfg.vocab_size,
        positions,
        max_len=max_len,
        embed_dim=cfg.embed_dim,
        num_heads=cfg.num_heads,
        num_layers=cfg.num_layers,
        causal=True,
    )
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for _ in range(cfg.steps):
        tokens, targets = previous_token_batch(cfg.batch_size, cfg.train_len, cfg.vocab_size, g)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())  # (B*T, V), (B*T,)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@torch.no_grad()
def accuracy_by_position(
    model: PositionalTransformer, seq_len: int, cfg: Config, seed: int = 1234
) -> torch.Tensor:
    """Fraction of correct predictions at each position 1..T-1 on fresh sequences.

    Shape:
        Returns (T - 1,) float64.
    """
    g = torch.Generator().manual_seed(seed)
    tokens, targets = previous_token_batch(cfg.eval_batch, seq_len, cfg.vocab_size, g)
    correct = model(tokens).argmax(-1) == targets  # (B, T)
    return correct[:, 1:].double().mean(0)


@torch.no_grad()
def attention_beyond_training(
    model: PositionalTransformer, cfg: Config, seed: int = 4321
) -> list[float]:
    """Per layer: the mean attention weight that queries at positions >= 2L put on keys farther
    away than any distance seen in training (distance >= L), on sequences of length 4L.

    Each block's input is captured with a forward pre-hook and its attention re-run with
    ``need_weights=True``; the model's own forward is unchanged.

    Shape:
        Returns a list of ``num_layers`` floats.
    """
    L, T = cfg.train_len, cfg.train_len * max(cfg.eval_factors)
    inputs: list[torch.Tensor] = []
    hooks = [
        b.register_forward_pre_hook(lambda mod, args: inputs.append(args[0])) for b in model.blocks
    ]
    tokens, _ = previous_token_batch(
        cfg.eval_batch // 4, T, cfg.vocab_size, torch.Generator().manual_seed(seed)
    )
    model(tokens)
    for h in hooks:
        h.remove()
    t = torch.arange(T)
    far = (t[:, None] - t[None, :]) >= L  # (T, T): key j at distance >= L from query i
    shares = []
    for block, x in zip(model.blocks, inputs):
        w = block.attn(block.norm1(x), is_causal=True, need_weights=True)[1]  # (B, H, T, T)
        share = (w * far).sum(-1)  # (B, H, T): weight on far keys per query
        shares.append(round(float(share[..., 2 * L :].mean()), 4))
    return shares


def run(cfg: Config, schemes: tuple[str, ...] = POSITION_SCHEMES, log=print) -> dict:
    """Train every scheme once per seed and evaluate it; returns the results dictionary.

    ``results[scheme]["accuracy_at"][f]`` lists one mean accuracy per seed on sequences of
    length ``f * L``; ``accuracy_by_position`` one curve per seed over positions 1 .. 4L - 1;
    ``attention_beyond_training`` per seed, per layer, see :func:`attention_beyond_training`.
    """
    torch.set_num_threads(1)
    results, start = {}, time.perf_counter()
    longest = cfg.train_len * max(cfg.eval_factors)
    for name in schemes:
        t0 = time.perf_counter()
        at: dict[str, list[float]] = {str(f): [] for f in cfg.eval_factors}
        curves, far = [], []
        for seed in cfg.seeds:
            model = train_one(name, cfg, seed)
            far.append(attention_beyond_training(model, cfg))
            curves.append([round(a, 4) for a in accuracy_by_position(model, longest, cfg).tolist()])
            for f in cfg.eval_factors:
                at[str(f)].append(float(accuracy_by_position(model, cfg.train_len * f, cfg).mean()))
        train_s = time.perf_counter() - t0
        results[name] = {
            "accuracy_at": at,
            "accuracy_by_position": curves,
            "attention_beyond_training": far,
            "seconds": round(train_s, 1),
        }
        log(
            f"{name:>10}: mean accuracy at "
            + ", ".join(f"{f}L {sum(a) / len(a):.3f}" for f, a in at.items())
            + f"  ({train_s:.0f} s)"
        )
    return {
        "schema": SCHEMA,
        "config": asdict(cfg),
        "stamp": environment_stamp("cpu"),
        "wall_seconds": round(time.perf_counter() - start, 1),
        "results": results,
        "task": "previous token: target[t] = token[t - 1], random tokens, causal model",
        "command": "python -m mha_course.experiments.extrapolation",
    }


def load_results(path: str | Path = DEFAULT_OUT) -> dict:
    """Read a results file and check it is one this module wrote."""
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(
            f"path: expected a {SCHEMA!r} results file, got schema {data.get('schema')!r}"
        )
    missing = [k for k in ("config", "stamp", "wall_seconds", "results") if k not in data]
    if missing:
        raise ValueError(f"path: results file lacks {missing}")
    return data


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=Config.steps)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(Config.seeds))
    parser.add_argument(
        "--schemes", nargs="+", default=list(POSITION_SCHEMES), choices=POSITION_SCHEMES
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    data = run(Config(steps=args.steps, seeds=tuple(args.seeds)), tuple(args.schemes))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out} ({data['wall_seconds']:.0f} s)")


if __name__ == "__main__":
    main()
