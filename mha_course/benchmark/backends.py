"""Chapter 8: which SDPA kernel runs — forcing one backend at a time, and asking torch which it picks.

``torch.nn.functional.scaled_dot_product_attention`` dispatches to one of several kernels:
``math`` (plain PyTorch ops, materialises the scores), ``flash`` (FlashAttention: tiled, never
materialises them), ``efficient`` (memory-efficient attention, xFormers-style), ``cudnn``. Not every
kernel supports every device, dtype, head size or mask; forcing one that cannot run raises, and
the benchmark reports it as *unsupported* rather than silently timing a fallback.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS: dict[str, SDPBackend] = {
    "math": SDPBackend.MATH,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}


def forced_sdpa(
    backend: str,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool = False,
    enable_gqa: bool = False,
) -> Callable[[], torch.Tensor]:
    """A zero-argument callable running torch's SDPA with only ``backend`` allowed.

    Shape:
        query: (B, H, L, D); key, value: (B, G, S, D). The callable returns (B, H, L, D).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {sorted(BACKENDS)}, got {backend!r}")
    chosen = BACKENDS[backend]

    def run() -> torch.Tensor:
        with sdpa_kernel(chosen):
            return F.scaled_dot_product_attention(
                query, key, value, is_causal=is_causal, enable_gqa=enable_gqa
            )

    return run


def chosen_backend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    enable_gqa: bool = False,
) -> str:
    """The kernel torch's SDPA would pick for these inputs now (``"unknown"`` if torch cannot say).

    Uses torch's own dispatcher (``torch._fused_sdp_choice``, a private function — hence the
    fallback), so the benchmark records the backend actually used, not the one hoped for.
    """
    try:
        code = torch._fused_sdp_choice(
            query, key, value, attn_mask, 0.0, is_causal, enable_gqa=enable_gqa
        )
        return SDPBackend(int(code)).name.lower().replace("_attention", "")
    except Exception:  # a private API: any failure just means "we cannot tell"
        return "unknown"
