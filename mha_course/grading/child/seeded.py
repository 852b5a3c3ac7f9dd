"""Seeded models for the grader, from an explicit ``torch.Generator``, never torch's global one.

The class grader builds references and served models in several threads at once, while other
code (a notebook helper, another item's reference) re-seeds torch's global generator: a model
initialised from that shared state gets whatever weights the interleaving gives it (seen as
wrong reference weights in about a quarter of concurrent builds). ``seeded`` draws every
parameter from a generator of its own instead, so the weights are a function of the seed alone.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def seeded(model: nn.Module, seed: int) -> nn.Module:
    """Re-draw every parameter of ``model`` from ``torch.Generator().manual_seed(seed)``, in
    module order, with PyTorch's default distributions: ``nn.Linear`` weight and bias
    U(-1/sqrt(in), 1/sqrt(in)); ``nn.Embedding`` N(0, 1); ``nn.LayerNorm`` ones and zeros.
    A parameter owned by any other kind of module is a ``ValueError`` (add its rule here)."""
    g = torch.Generator().manual_seed(int(seed) % 2**63)
    with torch.no_grad():
        for name, mod in model.named_modules():
            own = list(mod.named_parameters(recurse=False))
            if not own:
                continue
            if isinstance(mod, nn.Linear):
                bound = 1.0 / math.sqrt(mod.in_features)
                for _, p in own:
                    p.copy_(torch.rand(p.shape, generator=g, dtype=p.dtype) * (2 * bound) - bound)
            elif isinstance(mod, nn.Embedding):
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=g, dtype=mod.weight.dtype))
            elif isinstance(mod, nn.LayerNorm):
                for pname, p in own:
                    p.fill_(1.0 if pname == "weight" else 0.0)
            else:
                raise ValueError(
                    f"seeded: no rule for the parameters of {name or 'the model'} "
                    f"({type(mod).__name__}): {[n for n, _ in own]}"
                )
    return model
