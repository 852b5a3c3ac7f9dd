"""Chapter 8: the side-by-side comparison — every way to run one attention, on the same inputs.

Kernel level (inputs Q, K, V already split into heads): the course's naive eager
:func:`~mha_course.scaled_dot_product_attention`, torch's SDPA with each backend forced alone,
``torch.compile`` of the naive version, and FlexAttention where torch has it. Module level (input
X): the course :class:`~mha_course.MultiHeadAttention` with ``impl="eager"`` and ``"sdpa"``, and
``torch.nn.MultiheadAttention`` with ``need_weights`` True and False — all four sharing one set of
weights, so their outputs can be compared with a float64 reference.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mha_course.attention.mha import MultiHeadAttention
from mha_course.benchmark import labels
from mha_course.benchmark.backends import BACKENDS, chosen_backend, forced_sdpa
from mha_course.benchmark.flops import attention_flops, io_bytes, projection_flops, scores_bytes
from mha_course.ops.masks import causal_mask
from mha_course.ops.sdpa import scaled_dot_product_attention


@dataclass(frozen=True)
class Problem:
    """One attention problem: B sequences, L queries over S keys, E = H · D, G key/value heads."""

    B: int
    L: int
    E: int
    H: int
    S: int | None = None
    G: int | None = None
    causal: bool = True
    dtype: torch.dtype = torch.float32

    @property
    def D(self) -> int:
        return self.E // self.H

    def as_dict(self) -> dict:
        return {
            "B": self.B,
            "L": self.L,
            "S": self.S or self.L,
            "E": self.E,
            "H": self.H,
            "G": self.G or self.H,
            "D": self.D,
            "causal": self.causal,
            "dtype": str(self.dtype).removeprefix("torch."),
        }


@dataclass
class Variant:
    """A zero-argument callable plus what is needed to turn its time into rates and check it."""

    name: str
    level: str  # "kernel" or "module"
    fn: Callable[[], torch.Tensor]
    backend: str
    attention_flops: int
    projection_flops: int
    io_bytes: int
    scores_bytes: (
        int  # memory of materialised (B, H, L, S) scores; 0 if the kernel never holds them
    )
    reference: torch.Tensor | None  # float64 output for batch element 0; None if it did not fit


def _float64_reference(compute: Callable[[], torch.Tensor]) -> torch.Tensor | None:
    """The float64 reference output, or ``None`` when it does not fit in the device's memory
    (float64 eager attention needs 4x the memory of bf16 — the error is then not reported)."""
    try:
        return compute()
    except torch.OutOfMemoryError:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return None


def bare_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """The floor for an eager kernel: matmul, mask, ``torch.softmax``, matmul — no checks, no
    fully-masked-row handling, no options.

    Shape:
        q: (B, H, L, D); k, v: (B, H, S, D). Returns (B, H, L, D).
    """
    scores = (q @ k.transpose(-2, -1)) * q.shape[
        -1
    ] ** -0.5  # (B, H, L, D) @ (B, H, D, S) -> (B, H, L, S)
    if causal:
        L, S = scores.shape[-2:]
        allowed = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, L, S) @ (B, H, S, D) -> (B, H, L, D)


def _flex_variant(q, k, v, causal: bool, device) -> Callable[[], torch.Tensor] | None:
    """Compiled FlexAttention with a causal block mask, or ``None`` if this torch lacks it."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    B, H, L, _ = q.shape
    S = k.shape[-2]
    block_mask = None
    if causal:
        block_mask = create_block_mask(
            lambda b, h, qi, ki: qi >= ki, None, None, L, S, device=str(device)
        )
    compiled = torch.compile(flex_attention)
    return lambda: compiled(q, k, v, block_mask=block_mask)


def kernel_variants(
    p: Problem, device: torch.device, include_compiled: bool = True, generator_seed: int = 0
) -> list[Variant]:
    """The kernel-level contenders on random Q (B, H, L, D), K, V (B, H, S, D)."""
    S = p.S or p.L
    g = torch.Generator(device="cpu").manual_seed(generator_seed)
    q, k, v = (torch.randn(p.B, p.H, n, p.D, generator=g).to(device, p.dtype) for n in (p.L, S, S))
    ref = _float64_reference(
        lambda: scaled_dot_product_attention(
            q[:1].double(), k[:1].double(), v[:1].double(), is_causal=p.causal
        )
    )
    flops = attention_flops(p.B, p.H, p.L, S, p.D, causal=p.causal)
    nbytes = io_bytes(p.B, p.H, p.L, S, p.D, element_size=q.element_size())
    full = scores_bytes(p.B, p.H, p.L, S, q.element_size())

    def make(name, fn, backend, materializes):
        return Variant(
            name, "kernel", fn, backend, flops, 0, nbytes, full if materializes else 0, ref
        )

    out = [
        make(
            labels.COURSE_NAIVE,
            lambda: scaled_dot_product_attention(q, k, v, is_causal=p.causal),
            "course eager (materialised)",
            True,
        ),
        make(
            labels.BARE_EAGER,
            lambda: bare_attention(q, k, v, p.causal),
            "eager (materialised)",
            True,
        ),
    ]
    for backend in BACKENDS:
        out.append(
            make(
                labels.sdpa_forced(backend),
                forced_sdpa(backend, q, k, v, is_causal=p.causal),
                backend,
                backend == "math",
            )
        )
    if include_compiled:
        compiled = torch.compile(scaled_dot_product_attention)
        out.append(
            make(
                labels.COMPILED_COURSE,
                lambda: compiled(q, k, v, is_causal=p.causal),
                "inductor",
                True,
            )
        )
        flex = _flex_variant(q, k, v, p.causal, device)
        if flex is not None:
            out.append(make(labels.FLEX_COMPILED, flex, "flex", False))
    return out


def bare_sdpa_with_projections(
    m: MultiHeadAttention, x: torch.Tensor, causal: bool
) -> torch.Tensor:
    """The floor for a module: the four projections and torch's SDPA, with no checks, no masks,
    no options — what the course module costs on top of it is its overhead.

    Shape:
        x: (B, L, E). Returns (B, L, E).
    """
    B, L, E = x.shape
    H, D = m.num_heads, m.head_dim
    q, k, v = (
        F.linear(x, p.weight, p.bias).view(B, L, H, D).transpose(1, 2)
        for p in (m.q_proj, m.k_proj, m.v_proj)
    )  # (B, L, E) -> (B, L, H, D) -> (B, H, L, D)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    o = o.transpose(1, 2).reshape(B, L, E)  # (B, H, L, D) -> (B, L, H, D) -> (B, L, E)
    return F.linear(o, m.out_proj.weight, m.out_proj.bias)


def module_variants(p: Problem, device: torch.device, generator_seed: int = 0) -> list[Variant]:
    """The module-level contenders on random X (B, L, E), all with the same weights."""
    torch.manual_seed(generator_seed)
    S = p.S or p.L
    if S != p.L or (p.G or p.H) != p.H:
        raise ValueError(f"p: module comparison is self-attention MHA (S = L, G = H), got {p}")
    theirs = nn.MultiheadAttention(p.E, p.H, batch_first=True).to(device, p.dtype).eval()
    ours = {
        impl: MultiHeadAttention.from_torch(theirs, impl=impl).eval() for impl in ("eager", "sdpa")
    }
    g = torch.Generator(device="cpu").manual_seed(generator_seed + 1)
    x = torch.randn(p.B, p.L, p.E, generator=g).to(device, p.dtype)
    allowed = causal_mask(p.L, device=device) if p.causal else None  # (L, S), True = may attend
    forbidden = None if allowed is None else ~allowed  # torch.nn.MultiheadAttention's convention

    ref = _float64_reference(
        lambda: MultiHeadAttention.from_torch(copy.deepcopy(theirs).double(), impl="eager")(
            x[:1].double(), is_causal=p.causal
        )[0]
    )
    flops = attention_flops(p.B, p.H, p.L, S, p.D, causal=p.causal)
    proj = projection_flops(p.B, p.L, S, p.E, p.H)
    nbytes = io_bytes(p.B, p.H, p.L, S, p.D, element_size=x.element_size())
    full = scores_bytes(p.B, p.H, p.L, S, x.element_size())
    qh = torch.empty(p.B, p.H, p.L, p.D, device=device, dtype=p.dtype)
    picked = chosen_backend(qh, qh, qh, is_causal=p.causal)

    def theirs_fn(need_weights: bool):
        return lambda: theirs(
            x, x, x, attn_mask=forbidden, is_causal=p.causal, need_weights=need_weights
        )[0]

    def make(name, fn, backend, materializes):
        return Variant(
            name, "module", fn, backend, flops, proj, nbytes, full if materializes else 0, ref
        )

    return [
        make(
            labels.COURSE_MODULE_EAGER,
            lambda: ours["eager"](x, is_causal=p.causal)[0],
            "course eager (materialised)",
            True,
        ),
        make(
            labels.COURSE_MODULE_SDPA, lambda: ours["sdpa"](x, is_causal=p.causal)[0], picked, False
        ),
        make(
            labels.BARE_SDPA_MODULE,
            lambda: bare_sdpa_with_projections(ours["sdpa"], x, p.causal),
            picked,
            False,
        ),
        make(
            labels.TORCH_MHA_WEIGHTS,
            theirs_fn(True),
            "native MHA fast path (eval, weights returned)",
            True,
        ),
        make(
            labels.TORCH_MHA_FAST,
            theirs_fn(False),
            "native MHA fast path (eval, no weights)",
            device.type == "cpu",
        ),  # profiled on CPU
    ]
