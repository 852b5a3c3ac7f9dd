"""Chapter 16, measured with controls: which KV-cache quantization costs the course's trained
models the least loss — per-token or per-channel int4 keys, KIVI's scheme, FP8 e4m3?

For each chapter 13 checkpoint (MHA, GQA, MQA: learned positions, context T = 64, head_dim 32)
and **every** validation window (593 of 64 characters, one after another over all of
validation), the per-position loss when every layer attends through keys and values that were

- stored as they are (``float``; the control every scheme is paired against);
- symmetric absmax codes (chapter 16 §1): ``int8 token`` / ``int4 token`` (``QuantizedKVCache``,
  keys and values per token, fp16 scales) and ``int4 K channel`` (keys per channel over the
  window's 64 positions, values per token: the chapter's old advice);
- asymmetric (zero-point) int4 codes: ``int4 asym token`` (keys and values per token) and
  ``int4 asym K channel/16`` (keys per channel in groups of 16 tokens, values per token: KIVI's
  quantizers without its residual);
- FP8 e4m3 with one scale per tensor (``fp8 tensor``) or per key/value head (``fp8 head``).

Those run each window as one prompt chunk through the caches (the codes of a per-channel scale
see the window's later keys: prefill quantization). KIVI's full scheme keeps recent tokens in full
precision, which differs per query, so it is decoded one token at a time (all windows batched):
``KIVI int4`` and ``KIVI int2`` (group 16, residual 16) against ``float decode``. Like with like
(issue 32): KIVI's residual keeps 38 % of the keys and 59 % of the values a query reads at this
64-token context in full precision, so the same residual is also given to other quantizers —
``int4 token +residual`` (symmetric int4 keys and values per token) and ``int2 asym K token
+residual`` (KIVI int2 with keys per token instead of per channel) — and KIVI's 2-bit quantizers
run without it (``int2 asym K channel/16``, one chunk). Differences
are paired per window (mean, standard error and a 95 % BCa bootstrap interval over the 593 windows:
the uncertainty of the text sample, not of training — one trained model per recipe).

Also per layer: how far the keys' largest channel stands out (max over channels of a channel's
absmax within a window over the median channel's; mean over windows and key/value heads) —
KIVI's motivation is channels that stand out by an order of magnitude.

Run ``python -m mha_course.experiments.kv_quant`` (3–8 minutes on one CPU thread of a 2-core
machine, depending on its load: 3.1 at load 5, 6.0 at load 8–11); it writes
``results/ch16_kv_quant.json``, which notebook 16 loads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from mha_course.caches.base import Cache, check_new_kv
from mha_course.caches.dense import KVCache
from mha_course.caches.quant_schemes import KIVICache, fake_quant_asymmetric, fake_quant_fp8
from mha_course.caches.quantized import QuantizedKVCache, dequantize, quantize
from mha_course.experiments._common import run_main, write_result
from mha_course.experiments.gpt_head_removal import paired
from mha_course.experiments.sink_distance import chunk_losses, stretch_losses
from mha_course.gpt.checkpoint import load_checkpoint
from mha_course.gpt.data import validation_windows

SCHEMA = "mha-course-ch16-kv-quant/2"  # 2: "block_size" is now "context_length" (GPTConfig's T)
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "results" / "ch16_kv_quant.json"
CHECKPOINTS = ("ch13_mha.pt", "ch13_gqa.pt", "ch13_mqa.pt")
GROUP = RESIDUAL = 16

Transform = Callable[[torch.Tensor], torch.Tensor]


class TransformedCache(Cache):
    """A one-chunk cache that hands attention ``key_fn(key)``, ``value_fn(value)`` (simulated
    quantization of the whole chunk at once). Shape: as :class:`~mha_course.caches.dense.KVCache`."""

    def __init__(self, key_fn: Transform, value_fn: Transform) -> None:
        self.key_fn, self.value_fn = key_fn, value_fn
        self.reset()

    def reset(self) -> None:
        self.key = self.value = None

    @property
    def length(self) -> int:
        return 0 if self.key is None else self.key.shape[-2]

    def held(self) -> tuple[torch.Tensor, ...]:
        return () if self.key is None else (self.key, self.value)

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        check_new_kv(key, value, None)
        if self.key is not None:
            raise ValueError("key: this cache quantizes one prompt chunk; call reset() first")
        self.key, self.value = self.key_fn(key), self.value_fn(value)
        return self.key, self.value


def _sym(axis: str, bits: int) -> Transform:
    return lambda x: dequantize(*quantize(x, axis, bits))


def _asym(axis: str, group: int | None = None, bits: int = 4) -> Transform:
    return lambda x: fake_quant_asymmetric(x, axis, bits, group)


class ResidualCache(KIVICache):
    """KIVI's full-precision residual (the same positions held in full precision, token by token)
    around any quantizers: keys leave the residual ``residual`` at a time through ``key_fn``,
    values one at a time through ``value_fn``. With KIVI's own quantizers it equals
    :class:`~mha_course.caches.quant_schemes.KIVICache`. Shape: as KIVICache."""

    def __init__(
        self, key_fn: Transform, value_fn: Transform, group: int = GROUP, residual: int = RESIDUAL
    ) -> None:
        super().__init__(4, group, residual)
        self.key_fn, self.value_fn = key_fn, value_fn

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        check_new_kv(key, value, None if self.k_full is None else (self.k_full, self.v_full))
        if self.k_full is None:
            self.k_quant, self.v_quant = key[..., :0, :], value[..., :0, :]
            self.k_full, self.v_full = key[..., :0, :], value[..., :0, :]
        k_full = torch.cat([self.k_full, key], dim=-2)  # (B, G, r + S_new, D)
        n = k_full.shape[-2] // self.residual * self.residual  # keys in whole residual blocks
        if n:
            self.k_quant = torch.cat([self.k_quant, self.key_fn(k_full[..., :n, :])], dim=-2)
        self.k_full = k_full[..., n:, :]
        v_full = torch.cat([self.v_full, value], dim=-2)
        old = max(v_full.shape[-2] - self.residual, 0)  # values leaving the residual
        if old:
            self.v_quant = torch.cat([self.v_quant, self.value_fn(v_full[..., :old, :])], dim=-2)
        self.v_full = v_full[..., old:, :]
        return (
            torch.cat([self.k_quant, self.k_full], dim=-2),
            torch.cat([self.v_quant, self.v_full], dim=-2),
        )


def _fp8(over: str) -> Transform:
    return lambda x: fake_quant_fp8(x, over)


CHUNK: dict[str, Callable[[], Cache]] = {
    "float": KVCache,
    "int8 token": lambda: QuantizedKVCache(8),
    "int4 token": lambda: QuantizedKVCache(4),
    "int4 K channel": lambda: TransformedCache(_sym("channel", 4), _sym("token", 4)),
    "int4 asym token": lambda: TransformedCache(_asym("token"), _asym("token")),
    "int4 asym K channel/16": lambda: TransformedCache(_asym("channel", GROUP), _asym("token")),
    "fp8 tensor": lambda: TransformedCache(_fp8("tensor"), _fp8("tensor")),
    "fp8 head": lambda: TransformedCache(_fp8("head"), _fp8("head")),
    "int2 asym K channel/16": lambda: TransformedCache(
        _asym("channel", GROUP, 2), _asym("token", None, 2)
    ),
}
DECODE: dict[str, Callable[[], Cache]] = {
    "float decode": KVCache,
    "KIVI int4": lambda: KIVICache(4, GROUP, RESIDUAL),
    "KIVI int2": lambda: KIVICache(2, GROUP, RESIDUAL),
    "int4 token +residual": lambda: ResidualCache(_sym("token", 4), _sym("token", 4)),
    "int2 asym K token +residual": lambda: ResidualCache(
        _asym("token", None, 2), _asym("token", None, 2)
    ),
}
CONTRASTS = {  # (a, b): a − b, paired per window
    "int4 K channel - int4 token": ("int4 K channel", "int4 token"),
    "int4 asym K channel/16 - int4 asym token": ("int4 asym K channel/16", "int4 asym token"),
    "int4 asym token - int4 token": ("int4 asym token", "int4 token"),
    "KIVI int4 - int4 token": ("KIVI int4", "int4 token"),
    "fp8 head - int8 token": ("fp8 head", "int8 token"),
    "KIVI int2 - int4 token +residual": ("KIVI int2", "int4 token +residual"),
    "KIVI int2 - int2 asym K token +residual": ("KIVI int2", "int2 asym K token +residual"),
}


@torch.no_grad()
def key_channel_spread(model, x: torch.Tensor) -> list[float]:
    """Per layer: mean over windows and key/value heads of max_d a_d / median_d a_d, where a_d is
    channel d's largest |key| over the window's positions."""
    caches = [KVCache() for _ in range(model.config.n_layer)]
    model(x, caches=caches)
    out = []
    for c in caches:
        a = c.key.abs().amax(dim=-2)  # (N, G, S, D) -> (N, G, D)
        out.append(round((a.amax(-1) / a.median(-1).values).mean().item(), 3))
    return out


def run(out: Path = DEFAULT_OUT) -> dict:
    t0 = time.perf_counter()
    result: dict = {"schema": SCHEMA, "group": GROUP, "residual": RESIDUAL, "models": {}}
    for name in CHECKPOINTS:
        ckpt = load_checkpoint(ROOT / "checkpoints" / name)
        model, T = ckpt.model.eval(), ckpt.config.context_length
        _, val_ids = ckpt.data()
        x, y = validation_windows(val_ids, T)
        result["val_windows"] = len(x)
        per = {k: chunk_losses(model, x, y, make) for k, make in CHUNK.items()}
        per |= {k: stretch_losses(model, x, y, make) for k, make in DECODE.items()}
        attn = model.blocks[0].attn
        result["models"][name] = {
            "context_length": T,
            "n_layer": ckpt.config.n_layer,
            "n_kv_head": attn.num_kv_heads,
            "head_dim": attn.head_dim,
            "loss": {k: round(v.mean().item(), 5) for k, v in per.items()},
            "minus_float": {
                k: paired(v, per["float decode" if k in DECODE else "float"])
                for k, v in per.items()
                if k not in ("float", "float decode")
            },
            "contrasts": {c: paired(per[a], per[b]) for c, (a, b) in CONTRASTS.items()},
            "key_channel_spread": key_channel_spread(model, x),
        }
    return write_result(result, out, t0)


def main(argv: list[str] | None = None) -> int:
    return run_main(__doc__, DEFAULT_OUT, lambda args: run(args.out), argv)


if __name__ == "__main__":
    raise SystemExit(main())
