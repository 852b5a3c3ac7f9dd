"""``mha-course train``: train chapter 13's small GPT on the standard library's source.

Examples::

    mha-course train --config configs/ch13/mha.json          # the shipped MHA checkpoint
    mha-course train --n-kv-head 2 --out my_gqa.pt            # flags override the config
    mha-course train --config configs/ch13/mha.json --resume  # continue an interrupted run
    torchrun --nproc_per_node 2 -m mha_course.cli train ...   # DistributedDataParallel
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path

HELP = "train chapter 13's small GPT (one process, or DDP under torchrun); write a checkpoint"

_MODEL_FLAGS = (
    "context_length",
    "n_layer",
    "n_head",
    "n_kv_head",
    "n_embd",
    "mlp_ratio",
    "dropout",
    "positions",
    "rope_layout",
    "impl",
    "attention",
    "kv_latent_dim",
    "rope_dim",
)
_TRAIN_FLAGS = (
    "batch_size",
    "max_iters",
    "learning_rate",
    "min_lr",
    "warmup_iters",
    "lr_decay_iters",
    "weight_decay",
    "beta1",
    "beta2",
    "grad_clip",
    "eval_interval",
    "eval_windows",
    "final_eval_windows",
    "seed",
    "dtype",
)


class _RenamedFlag(argparse.Action):
    """A flag from before a rename (``--block-size``): sets the new one and says so on stderr."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        new = "--" + self.dest.replace("_", "-")
        print(f"{parser.prog}: {option_string} was renamed {new}; write {new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mha_course.gpt.config import GPTConfig, TrainConfig

    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help='JSON file {"model": {...}, "train": {...}, "out": ...}; flags win',
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="checkpoint to write (default: the config's, else gpt.pt)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue from <out stem>.resume.pt if it exists"
    )
    parser.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="start from this checkpoint's weights (its model config is used)",
    )
    parser.add_argument(
        "--convert-kv-heads",
        type=int,
        default=None,
        help="with --init-from: mean-pool attention to G key/value heads first",
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    parser.add_argument("--threads", type=int, default=None, help="CPU intra-op threads")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    types = {f.name: f.type for cls in (GPTConfig, TrainConfig) for f in fields(cls)}
    for name in _MODEL_FLAGS + _TRAIN_FLAGS:
        kind = {"int": int, "float": float, "str": str}.get(
            str(types[name]).split(" ")[0].replace("|", "").strip(), str
        )
        parser.add_argument("--" + name.replace("_", "-"), type=kind, default=None, dest=name)
    # GPTConfig.block_size became context_length (nanoGPT's T; block_size is chapter 16's word).
    parser.add_argument(
        "--block-size", type=int, dest="context_length", action=_RenamedFlag, help=argparse.SUPPRESS
    )


def resolve(args: argparse.Namespace):
    """(GPTConfig, TrainConfig, out path) from the config file and the flags."""
    from mha_course.gpt.config import GPTConfig, TrainConfig, from_dict

    spec = json.loads(args.config.read_text()) if args.config else {}
    unknown = sorted(
        set(spec) - {"model", "train", "out", "init_from", "convert_kv_heads", "comment"}
    )
    if unknown:
        raise ValueError(f"config: unknown top-level keys {unknown}")
    model = dict(spec.get("model", {}))
    train = dict(spec.get("train", {}))
    for name in _MODEL_FLAGS:
        if getattr(args, name) is not None:
            model[name] = getattr(args, name)
    for name in _TRAIN_FLAGS:
        if getattr(args, name) is not None:
            train[name] = getattr(args, name)
    out = args.out or Path(spec.get("out", "gpt.pt"))
    init_from = args.init_from or (Path(spec["init_from"]) if "init_from" in spec else None)
    convert = args.convert_kv_heads or spec.get("convert_kv_heads")
    return from_dict(GPTConfig, model), from_dict(TrainConfig, train), out, init_from, convert


def run(args: argparse.Namespace) -> int:
    import torch

    from mha_course.gpt.train import train

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    model_config, train_config, out, init_from, convert = resolve(args)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    _, meta = train(
        model_config,
        train_config,
        out,
        resume=args.resume,
        init_from=init_from,
        convert_kv_heads=convert,
        device=device,
        progress=not args.no_progress,
    )
    if meta:
        print(
            f"wrote {out}: val loss {meta['val_loss']:.4f} nats/char after "
            f"{meta['steps']} steps, {meta['wall_time_s']:.0f} s wall "
            f"({meta['world_size']} process(es))"
        )
    return 0
