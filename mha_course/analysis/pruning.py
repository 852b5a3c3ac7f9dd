"""Chapter 10: attention head importance and head pruning.

Two importance scores per head, for any model whose attention layers are
:class:`~mha_course.attention.mha.MultiHeadAttention` and whose ``forward(inputs, head_mask=...)`` passes
``head_mask[i]`` to the i-th attention layer (as :class:`~mha_course.models.tiny_transformer.TinyTransformer`):

* gradient-based (Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better than One?"):
  ``I_h = E_x |dL(x)/d xi_h|`` where ``xi_h`` is a multiplier on head h's output — how much the
  loss would change if the head were switched off, to first order;
* activation-based: the mean norm of what the head writes into the residual stream,
  ``|| W_O[:, h] o_h ||``.

Then :func:`prune_heads` removes heads physically: the query rows of ``W_Q``, the columns of
``W_O`` and, for GQA, the key/value rows of groups whose query heads are all gone.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

from mha_course._checks import (
    check_nonnegative_int,
    check_positive_int,
    check_rank,
    check_tensor,
    shape_str,
)
from mha_course.attention.mha import MultiHeadAttention


def attention_layers(model: nn.Module) -> list[MultiHeadAttention]:
    """The model's :class:`MultiHeadAttention` modules, in registration (layer) order."""
    _check_module("model", model)
    return [m for m in model.modules() if isinstance(m, MultiHeadAttention)]


def count_parameters(module: nn.Module) -> int:
    """Number of scalar parameters."""
    _check_module("module", module)
    return sum(p.numel() for p in module.parameters())


def gradient_importance(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    normalize: bool = True,
) -> torch.Tensor:
    """Michel et al.'s head importance: the mean over examples of ``|dL/d head_mask|``.

    The head mask is all ones (the model is unchanged) but has one entry per example, shape
    (num_layers, B, H), so one backward pass gives every example's own gradient (the batch loss
    is the sum of the examples' losses). With ``normalize`` each layer's scores are divided by
    their L2 norm, as in the paper, so that layers can be compared.

    Shape:
        batches: (inputs (B, ...), targets); ``loss_fn(outputs, targets)`` is a mean over one
        example's positions when given one example. Returns (num_layers, H).
    """
    layers = attention_layers(model)
    H = _same_heads(layers)
    was_training = model.training
    model.eval()
    total, count = torch.zeros(len(layers), H), 0
    for inputs, targets in batches:
        B = inputs.shape[0]
        dtype = layers[0].q_proj.weight.dtype
        head_mask = torch.ones(len(layers), B, H, dtype=dtype, requires_grad=True)
        outputs = model(inputs, head_mask=head_mask)
        loss = sum(loss_fn(outputs[b : b + 1], targets[b : b + 1]) for b in range(B))
        (grad,) = torch.autograd.grad(loss, head_mask)  # (num_layers, B, H)
        total += grad.abs().sum(dim=1).detach().float()  # (num_layers, B, H) -> (num_layers, H)
        count += B
    model.train(was_training)
    scores = total / max(count, 1)
    if normalize:
        scores = scores / scores.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return scores


def activation_importance(
    model: nn.Module, batches: Iterable[tuple[torch.Tensor, ...]]
) -> torch.Tensor:
    """Mean norm of each head's contribution to the attention output, ``|| W_O[:, h] o_h ||``
    per token, averaged over tokens and examples.

    Forward pre-hooks on every ``out_proj`` see the merged heads (B, L, H * D) before W_O.

    Shape:
        batches: tuples whose first element is the model input. Returns (num_layers, H).
    """
    layers = attention_layers(model)
    H = _same_heads(layers)
    total, tokens = torch.zeros(len(layers), H), [0]

    def hook_for(i: int, layer: MultiHeadAttention):
        def hook(_module, args):
            o = args[0].detach()
            B, L, _ = o.shape
            o = o.reshape(B, L, layer.num_heads, layer.head_dim)  # (B, L, H*D) -> (B, L, H, D)
            W_O = layer.out_proj.weight.detach().reshape(
                -1, layer.num_heads, layer.head_dim
            )  # (E, H*D) -> (E, H, D)
            contribution = torch.einsum("blhd,ehd->blhe", o, W_O)  # (B, L, H, E)
            total[i] += contribution.norm(dim=-1).sum(dim=(0, 1)).float()  # -> (H,)
            if i == 0:
                tokens[0] += B * L

        return hook

    handles = [
        layer.out_proj.register_forward_pre_hook(hook_for(i, layer))
        for i, layer in enumerate(layers)
    ]
    try:
        with torch.no_grad():
            for batch in batches:
                model(batch[0])
    finally:
        for h in handles:
            h.remove()
    return total / max(tokens[0], 1)


def _same_heads(layers: Sequence[MultiHeadAttention]) -> int:
    if not layers:
        raise ValueError("model: expected at least one MultiHeadAttention layer, found none")
    counts = {layer.num_heads for layer in layers}
    if len(counts) != 1:
        raise ValueError(
            f"model: importance needs the same number of heads H in every layer, "
            f"got {sorted(counts)}"
        )
    return counts.pop()


def least_important(importance: torch.Tensor, count: int) -> dict[int, list[int]]:
    """The ``count`` heads with the lowest scores across all layers, as {layer: [heads]}.

    Shape:
        importance: (num_layers, H).
    """
    check_tensor("importance", importance)
    check_rank("importance", importance, "(num_layers, H)", rank=2)
    n_layers, H = importance.shape
    check_nonnegative_int("count", count, "(heads to choose)")
    if count > n_layers * H:
        raise ValueError(
            f"count: expected 0..{n_layers * H} heads (num_layers * H of importance "
            f"{shape_str(importance)}), got {count}"
        )
    order = torch.argsort(importance.flatten(), stable=True)[:count].tolist()  # (layers*H,)
    chosen: dict[int, list[int]] = {}
    for flat in order:
        chosen.setdefault(flat // H, []).append(flat % H)
    return {layer: sorted(heads) for layer, heads in sorted(chosen.items())}


def mask_from_heads(
    heads: dict[int, Sequence[int]], num_layers: int, num_heads: int
) -> torch.Tensor:
    """A (num_layers, H) head mask: 0 for the listed heads, 1 elsewhere."""
    check_positive_int("num_layers", num_layers)
    check_positive_int("num_heads", num_heads, "H")
    mask = torch.ones(num_layers, num_heads)
    for layer, hs in heads.items():
        _check_indices("heads", [layer], num_layers, "layer")
        _check_indices(f"heads[{layer}]", hs, num_heads, "head")
        mask[layer, list(hs)] = 0.0
    return mask


def prune_heads(attn: MultiHeadAttention, heads: Iterable[int]) -> MultiHeadAttention:
    """A copy of ``attn`` with the query heads ``heads`` physically removed.

    Rows ``h*D:(h+1)*D`` of ``W_Q`` (and its bias) and the same columns of ``W_O`` go; the
    output bias stays. The result equals ``attn`` run with ``head_mask`` 0 on those heads.
    With GQA (G < H) query head h reads key/value head ``h // (H/G)``: a group whose query
    heads are all removed loses its ``W_K``/``W_V`` rows too; every surviving group must keep
    the same number of query heads (the module needs H' / G' to be an integer), so prune
    within groups evenly. After pruning H' * D < E: ``embed_dim`` stays, ``num_heads`` drops.

    Shape:
        the module's inputs and outputs are unchanged: (B, L, E) -> (B, L, E).
    """
    if not isinstance(attn, MultiHeadAttention):
        raise ValueError(f"attn: expected a MultiHeadAttention, got {type(attn).__name__}")
    H, G, D = attn.num_heads, attn.num_kv_heads, attn.head_dim
    heads = list(heads)
    _check_indices("heads", heads, H, "head")
    drop = sorted(set(heads))
    if len(drop) == H:
        raise ValueError(f"heads: cannot remove all {H} heads of a layer (keep at least one)")
    per_group = H // G
    kept_by_group = [
        [h for h in range(g * per_group, (g + 1) * per_group) if h not in drop] for g in range(G)
    ]
    kept_groups = [g for g, kept in enumerate(kept_by_group) if kept]
    sizes = {len(kept_by_group[g]) for g in kept_groups}
    if len(sizes) != 1:
        raise ValueError(
            f"heads: with G = {G} key/value groups of {per_group} query heads, the surviving groups "
            f"would keep {[len(k) for k in kept_by_group]} heads; each must keep the same number"
        )
    kept_heads = [h for g in kept_groups for h in kept_by_group[g]]

    def rows(index: list[int]) -> torch.Tensor:  # head indices -> feature rows h*D .. h*D+D-1
        return torch.tensor([i * D + d for i in index for d in range(D)], dtype=torch.long)

    pruned = copy.deepcopy(attn)
    pruned.q_proj = _select(attn.q_proj, rows(kept_heads), dim=0)  # (H*D, E) -> (H'*D, E)
    pruned.k_proj = _select(attn.k_proj, rows(kept_groups), dim=0)  # (G*D, kdim) -> (G'*D, kdim)
    pruned.v_proj = _select(attn.v_proj, rows(kept_groups), dim=0)  # (G*D, vdim) -> (G'*D, vdim)
    pruned.out_proj = _select(attn.out_proj, rows(kept_heads), dim=1)  # (E, H*D) -> (E, H'*D)
    pruned.num_heads, pruned.num_kv_heads = len(kept_heads), len(kept_groups)
    if getattr(attn, "alibi_slopes", None) is not None:  # each kept head keeps its ALiBi slope
        pruned.alibi_slopes = attn.alibi_slopes[kept_heads]
    return pruned


def _check_module(name: str, module: object) -> None:
    if not isinstance(module, nn.Module):
        raise ValueError(f"{name}: expected a torch.nn.Module, got {type(module).__name__}")


def _check_indices(name: str, index: Iterable[object], n: int, what: str) -> None:
    """Every entry of ``index`` is an int in [0, n) (a bool or a float is not an index)."""
    index = list(index)
    bad = [i for i in index if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n]
    if bad:
        raise ValueError(f"{name}: expected {what} indices (ints) in 0..{n - 1}, got {index}")


def _select(linear: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    """A new Linear keeping rows (dim=0: output features) or columns (dim=1: input features)."""
    W = linear.weight.detach().index_select(dim, index)
    out_f, in_f = W.shape
    new = nn.Linear(in_f, out_f, bias=linear.bias is not None, device=W.device, dtype=W.dtype)
    with torch.no_grad():
        new.weight.copy_(W)
        if linear.bias is not None:
            new.bias.copy_(linear.bias if dim == 1 else linear.bias.index_select(0, index))
    return new


def prune_model_heads(model: nn.Module, heads: dict[int, Sequence[int]]) -> nn.Module:
    """A copy of ``model`` whose i-th attention layer lost the heads ``heads[i]``."""
    pruned = copy.deepcopy(model)
    parents = {
        id(child): (parent, name)
        for parent in pruned.modules()
        for name, child in parent.named_children()
    }
    layers = attention_layers(pruned)
    for i, hs in heads.items():
        _check_indices("heads", [i], len(layers), "layer")
        if hs:
            parent, name = parents[id(layers[i])]
            setattr(parent, name, prune_heads(layers[i], hs))
    return pruned
